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
# through. Here is a streaming model you have not seen, as its author wrote it: a **sliding-window
# decoder** (latent frames in, audio samples out). Write its adapter yourself, the two things the kit needs:
# the declaration and the step. The kit's grader certifies it on traffic you never see, at the sizes shown
# and at a second configuration you do not see either: the derived catalog against what the model is
# observed to see, both audits, every call bit-identical to the model's own stock step, the carries at one
# address, replay.
#
# **You will learn**
# - to read a model's streaming code and find its clocks (chunk, lookahead, samples per frame) and its state
#   (what it keeps, under which retention) without being told;
# - to write a declaration and a views-form step that the kit certifies bit-exact on hidden traffic;
# - to read a failed certificate: which clause failed, which field differs.
#
# Runs on a CPU (the kit's eager backend: same bookkeeping, every call eager); with a GPU (`LIVE`) the
# certificate replays real CUDA graphs.

# %% tags=["parameters"]
# parameters: the tour and CI may override these (papermill style)
import torch

LIVE = torch.cuda.is_available()  # certify with real CUDA graphs
BACKEND = "cuda" if LIVE else "eager"
DEVICE = "cuda" if LIVE else "cpu"
PREDICT_DECODER_K = None  # your prediction: the decoder's steady shape classes K

# %%
import inspect

from IPython.display import HTML, display

from cadencelab import viz
from cadencelab.contract import (Admission, Clock, Declaration, Fixed, Operator, PromptRetained, Region,  # noqa: F401
                                 SlidingWindow, catalog_counts)  # the parts of your answer
from cadencelab.course import capstone, glossary, grading
from cadencelab.course.display import show
from cadencelab.course.predict import Prediction, reveal

HTML(glossary.to_html(notebook=10))  # the terms this notebook uses

# %% [markdown]
# ## The model
#
# Its sizes live in one dataclass (the checker builds the model at a second configuration too), then its
# code: the weights, `decode` (one call), and `stock_step` (the model's own streaming loop: concatenate, then
# its own cut). Read it for the clocks and the state.

# %%
s = capstone.SHOWN
print(s)
print(*(inspect.getsource(f) for f in (capstone.WindowDecoder, capstone.decode, capstone.stock_step)), sep="\n")

# %% [markdown]
# ## Predict
#
# How many steady shape classes will the decoder's K|V cache pass through (K, counting the empty cache)?

# %%
guess = Prediction("Steady shape classes K of the decoder", unit="classes", value=PREDICT_DECODER_K)
guess

# %% [markdown]
# ## Your adapter
#
# `declare(s)`: the model's `Declaration` ("window-decoder"), every size read from `s`: a call clock, a
# frames clock (`chunk` per call, `lookahead` as its offset), a samples clock (`hop` per frame); a region for
# each piece of state the stock step keeps, with the policy its cut implements; the operator `decode` reading
# the K|V cache on frames (`flush="lookahead"`); admission on frames. `make_step(model)`: the views-form step,
# `step(x, caches, last) -> (out, {region: the frames this call adds})`, built on `capstone.decode`.

# %%
def declare(s) -> Declaration:
    """Your declaration of the sliding-window decoder, every size read from s."""
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
feedback = grading.grade(capstone.check_adapter, (declare, make_step), backend=BACKEND, device=DEVICE)
feedback

# %% [markdown]
# The certificate of the adapter at the sizes shown (yours once certified; until then a stand-in the course
# supplies, so the cells below run either way): every clause, then the catalog it derived and the replay.

# %%
adapter = grading.certified((declare, make_step), feedback)
cert = capstone.certificate(adapter, backend=BACKEND, device=DEVICE)
cert.table

# %%
counts = catalog_counts(adapter[0](s), "decode")
display(reveal(guess, counts["steady"], rel_tol=0))
show(viz.misses_figure(cert.runtime.engine.counters()))

# %% [markdown]
# What you did is the whole adapter workflow: read the model's streaming code for its clocks and its state,
# declare them, hand the runtime a step that returns what each call adds, and let the kit certify it
# bit-exact against the model's own loop. No number in your declaration was typed: the hidden configuration
# checks that.
#
# ## Check
#
# Run the next cell: it asserts what this notebook taught and prints `CHECK OK` when it holds.

# %% tags=["check"]
assert cert.ok, cert.table
assert counts["steady"] == len(cert.catalog.query("kind == 'steady' and derived"))
print(f"CHECK OK: notebook 10: the sliding-window decoder certified ({BACKEND} backend, K = {counts['steady']}); "
      f"your adapter: {grading.verdict(feedback)}")
