"""Serving: many sessions of an adapted model on one device, above the adapters.

``sessions`` time-multiplexes one runtime's bindings (state swapped per session), ``lanes`` runs several
runtimes over shared weights on their own streams, ``batched`` stacks sessions' chunks into one call (a
labelled control: exact against batched eager, not against each session alone). Each serves Token2wav
today; what it needs of a model is the runtime's session protocol (``reset``, a call with ``last``,
``counters``), its state (``stock_state`` / the carries) and its engines.
"""

#: the lanes' goal (round 4): sessions held at the cadence over SRc's, speak-heavy, every chunk solo-exact (here, not
#: in ``lanes``: the study's verdict and the course read it without importing torch)
LANES_TARGET = 2.5
