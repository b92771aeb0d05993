"""The Token2wav runtime's factorial arms by name, with no import beyond this file: the command line lists
them in its help before it imports torch (:mod:`cadencelab.adapters.token2wav.runtime` holds each arm's spec)."""

#: B0 (stock) and the rule arms: S (state rule), R / Rc (replay per solver step / per chunk), SR and SRc (both)
FACTORIAL = ("B0", "S", "R", "Rc", "SR", "SRc")
