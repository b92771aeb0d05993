"""Errors raised by declarations."""


class DeclarationError(ValueError):
    """A declaration is invalid. ``field`` names the offending field (dotted path)."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"invalid declaration field '{field}': {reason}")


#: longest name a declaration accepts (a model, clock, region, operator or dim name)
MAX_NAME = 128


def check_name(where: str, name, what: str) -> str:
    """``name`` when it is a usable name: a non-empty string of printable characters, no surrounding
    whitespace, at most :data:`MAX_NAME` characters; DeclarationError naming ``where`` otherwise."""
    if not isinstance(name, str) or not name:
        raise DeclarationError(where, f"{what} needs a non-empty string name, got {name!r:.60}")
    if len(name) > MAX_NAME:
        raise DeclarationError(where, f"{what} name has {len(name)} characters, more than {MAX_NAME}: {name[:40]!r}...")
    if name != name.strip() or not name.isprintable():
        raise DeclarationError(where, f"{what} name {name!r:.60} has surrounding whitespace or unprintable characters")
    return name


class DerivationLimitError(ValueError):
    """A derived table would exceed a row limit. ``field`` names what sets its size.

    The derivation never truncates: it says how many rows the request needs and which
    declaration field (or argument) drives that count.
    """

    def __init__(self, field: str, needed: int, limit: int, what: str):
        self.field = field
        self.needed = needed
        self.limit = limit
        super().__init__(f"'{field}': {what} needs {needed:,} rows, more than the limit of {limit:,}")
