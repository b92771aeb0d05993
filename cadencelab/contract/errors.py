"""Errors raised by declarations."""


class DeclarationError(ValueError):
    """A declaration is invalid. ``field`` names the offending field (dotted path)."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"invalid declaration field '{field}': {reason}")
