# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 10 · Capstone: adapt a model the course has not shown
#
# Everything so far was Token2wav, the teaching model, or a model whose declaration the course walked you
# through. Here are streaming models you have not seen, each as its author wrote it: pick one and write its
# adapter yourself, the two things the kit needs: the declaration and the step. The kit's grader certifies it
# on traffic you never see, at the sizes shown and at a second configuration you do not see either: the
# derived catalog against what the model is observed to see, both audits, every call bit-identical to the
# model's own stock step, the carries at one address, replay.
#
# **You will learn**
# - to read a model's streaming code and find its clocks (frames per call, lookahead, samples per frame) and
#   its state (what it keeps, under which retention: a sliding window, a fixed context, a ring) without being told;
# - to write a declaration and a views-form step that the kit certifies bit-exact on hidden traffic;
# - to read a failed certificate: which clause failed, which field differs.
#
# Runs on a CPU (the kit's eager backend: same bookkeeping, every call eager), graded for correctness only;
# with a GPU (`LIVE`) the certificate replays real CUDA graphs and the grade adds **speed**: the adapter's SRc
# arm against the model's stock loop at the hidden sizes, on fresh traffic, the course's in-process factorial
# (its interval's low end must clear the target).

# %% tags=["parameters"]
# parameters: the tour and CI may override these (papermill style)
import torch

LIVE = torch.cuda.is_available()  # certify with real CUDA graphs
BACKEND = "cuda" if LIVE else "eager"
DEVICE = "cuda" if LIVE else "cpu"
MODEL = "window"  # the model you adapt: "window" (a sliding-window decoder) or "codec" (a codec decoder, ring cache)
PREDICT_DECODER_K = None  # your prediction: the model's steady shape classes K

# %%
import inspect

from IPython.display import HTML, Markdown, display

from cadencelab import viz
from cadencelab.contract import (Admission, Clock, Declaration, Fixed, Operator, PromptRetained, Region,  # noqa: F401
                                 Ring, SlidingWindow, catalog_counts)  # the parts of your answer
from cadencelab.course import capstone, glossary, grading
from cadencelab.course.display import show
from cadencelab.course.predict import Prediction, reveal

HTML(glossary.to_html(notebook=10))  # the terms this notebook uses

# %% [markdown]
# ## The model
#
# The models you may pick, then the one `MODEL` names: what it is, its sizes (one dataclass: the checker
# builds the model at a second configuration too), then its code, the functions a call is made of and the
# model's own streaming step (it concatenates and cuts its caches itself). Read it for the clocks and the state.

# %%
spec = capstone.capstone_model(MODEL)
print("models:", ", ".join(f"{m.name!r} ({m.title})" for m in capstone.MODELS.values()))
display(Markdown(spec.about))
s = spec.shown
print(s)
print(*(inspect.getsource(f) for f in spec.code), sep="\n")

# %% [markdown]
# ## Predict
#
# How many steady shape classes will the model's state pass through (K, counting the turn's first call)?

# %%
guess = Prediction(f"Steady shape classes K of {spec.title}", unit="classes", value=PREDICT_DECODER_K)
guess

# %% [markdown]
# ## Your adapter
#
# What the adapter must hold, for the model you picked (every size read from `s`, never typed):

# %%
display(Markdown(spec.task))

# %% tags=["answer"]
def declare(s) -> Declaration:
    """Your declaration of the model, every size read from s."""
    return ...


def make_step(model):
    """Your views-form step: step(x, caches, last) -> (out, new frames per region)."""
    return ...


# %% [markdown]
# ## Certify it on hidden traffic
#
# Each row is one configuration (the sizes shown, and hidden ones), each streamed on traffic you have not
# seen. A failure names the clause of the certificate that failed and the first field of your declaration
# that differs from what the model needs.

# %%
feedback = grading.grade(capstone.check_adapter, (declare, make_step), backend=BACKEND, device=DEVICE, model=MODEL)
feedback

# %% [markdown]
# The certificate of your adapter at the sizes shown, once the grader certifies it (the course hands out no
# stand-in: until then the next cell stops Run All here and says why): every clause, then the catalog it derived
# and the replay.

# %%
adapter = grading.certified((declare, make_step), feedback)
cert = capstone.certificate(adapter, backend=BACKEND, device=DEVICE, model=MODEL)
cert.table

# %%
counts = catalog_counts(adapter[0](s), "decode")
display(reveal(guess, counts["steady"], rel_tol=0))
show(viz.misses_figure(cert.runtime.engine.counters()))

# %% [markdown]
# What you did is the whole adapter workflow: read the model's streaming code for its clocks and its state,
# declare them, hand the runtime a step that returns what each call adds, and let the kit certify it
# bit-exact against the model's own loop. No number in your declaration was typed: the hidden configuration
# checks that. A ring is the one region whose extent never changes (it is always its capacity, written
# modulo it), so its K is one class however long the turn; a sliding window passes through every extent up
# to its width first. Try the other model: set `MODEL` and run the notebook again.
#
# ## Check
#
# Run the next cell: it asserts what this notebook taught and prints `CHECK OK` when it holds.

# %% tags=["check"]
assert cert.ok, cert.table
assert counts["steady"] == len(cert.catalog.query("kind == 'steady' and derived"))
print(f"CHECK OK: notebook 10: {spec.title} certified ({BACKEND} backend, K = {counts['steady']}); "
      f"your adapter: {grading.verdict(feedback)} (graded for {feedback.graded})")
print(grading.record(10, feedback))
