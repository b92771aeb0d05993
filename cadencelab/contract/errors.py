"""Errors raised by declarations."""


class DeclarationError(ValueError):
    """A declaration is invalid. ``field`` names the offending field (dotted path)."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"invalid declaration field '{field}': {reason}")


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
