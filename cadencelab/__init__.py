"""cadencelab: a workbench for real-time speech-model serving.

Layers, in the order they build on each other:
contract (what a model declares) -> state (the carry, demand sizing, the audit)
-> replay (exact-shape replay) -> adapters (real models) -> profile -> viz.
"""

__version__ = "0.1.0"
