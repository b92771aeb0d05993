"""What the tour and CI set from outside a notebook, in a module that imports nothing (the command line reads
it before any heavy import): the predictions a headless run uses. (No switch marks an answer: the tour types the
course's answers into the exercise cells, from a folder outside the package.)"""

from __future__ import annotations

__all__ = ["TOUR_PREDICTIONS"]

#: the predictions the headless tour makes (injected as parameters: a student in the lab starts blank);
#: a naive student's guesses, so the reveals show a miss as well as a hit
TOUR_PREDICTIONS = {
    "PREDICT_LAUNCHES": {"B0": 1000, "SRc": 100},
    "PREDICT_K": {"f_retained=150": 3, "f_chunk=40": 3},
    "PREDICT_ADDRESSES": {"stock torch.cat": 1, "carry": 1},
    "PREDICT_MOVED": "the new input's answer",
    "PREDICT_BUSY_MS": {"eager": 200.0, "replay": 60.0},
    "PREDICT_CLASSES": {"K (steady classes)": 2, "admitted signatures": 8},
    "PREDICT_SLACK": {"stock torch.cat": 0.5, "carry": 0.5},
    "PREDICT_SPEEDUP": 2.0,
    "PREDICT_DECODER_K": 2,
    "PREDICT_PLACES": {"S": "faster, less memory", "R": "faster, no clear difference", "Rc": "faster, no clear difference"},
    "PREDICT_SESSIONS": {"B0": 4, "SRc": 8},
}
