"""A certificate is checked against the model, never against the declaration it certifies.

Two models the package does not ship: the streaming conformer of :mod:`kit_models` (its own stock step and
start), and a stack of transformers' own causal ``MimiConv1d`` layers streamed with transformers' own
``MimiConv1dPaddingCache`` (one zero-padded conv, one replicate-padded: the model initialises that padding from
the turn's first frame). Each is certified with the right declaration, and every wrong declaration (a base, an
initial extent, a retention, a lookahead the model does not have) is refused or fails a named clause: none
certifies, whatever reference (the model's own loop, recorded outputs, the stock step from the model's own
start)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cadencelab.adapters.kit import KitModel, Traffic, certify, factorial
from cadencelab.adapters.kit.certify import REFERENCES, model_reference
from cadencelab.contract import Admission, Clock, Declaration, Fixed, Operator, PromptRetained, Region, SlidingWindow
from kit_models import StreamingConformer
from test_kit import conformer_declaration, conformer_steps, conformer_traffic

transformers = pytest.importorskip("transformers")
from transformers.models.mimi.modeling_mimi import MimiConv1d, MimiConv1dPaddingCache  # noqa: E402

CH, CALL = 4, 8  # channels; frames a call commits (the model's own call size)
PADS, MODES = (2, 4), ("constant", "replicate")  # conv 0: kernel 3, zero padding; conv 1: kernel 5, replicate


# ---- a transformers model: two causal MimiConv1d, transformers' own padding cache -------------------------
class ConvStack(torch.nn.Module):
    def __init__(self, seed: int = 3):
        super().__init__()
        cfg = transformers.MimiConfig(use_causal_conv=True)
        self.convs = torch.nn.ModuleList(
            [MimiConv1d(cfg, CH, CH, p + 1, pad_mode=m, layer_idx=i) for i, (p, m) in enumerate(zip(PADS, MODES))])
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)

    def padding_cache(self, given=(None, None)) -> MimiConv1dPaddingCache:
        """transformers' own cache; ``given``: each conv's context (None: the model starts it itself)."""
        pc = MimiConv1dPaddingCache(len(PADS), list(PADS), list(MODES), [CH] * len(PADS))
        pc.padding_cache = list(given)
        return pc

    def forward(self, x, pc):
        """x (1, CH, n) -> (1, CH, n), and each conv's input (what its padding is cut from)."""
        inputs = []
        for conv in self.convs:
            inputs.append(x)
            x = conv(x, padding_cache=pc)
        return x, inputs


def conv_loop(model: ConvStack):
    """The model's own streaming loop: each turn's whole signal cut into the model's own calls of CALL frames,
    transformers' padding cache carried from call to call (new each turn)."""
    def loop(traffic: Traffic) -> list:
        outs = []
        for sig in traffic.signals:
            pc = model.padding_cache()
            outs += [model(sig[..., a:a + CALL], pc)[0] for a in range(0, sig.shape[-1], CALL)]
        return outs
    return loop


def _started(t):
    """A context the model has started (None at a turn's start, or an empty view: transformers starts it)."""
    return None if t is None or t.shape[-1] == 0 else t


def conv_steps(model: ConvStack):
    """The adapter: a views-form step (the frames each conv's context is cut from) and the stock step."""
    names = ("pad0", "pad1")

    def step(x, caches, last):
        out, inputs = model(x, model.padding_cache([_started(caches[n]) for n in names]))
        return out, dict(zip(names, inputs))

    def stock(x, caches, last):
        pc = model.padding_cache([_started(caches.get(n)) for n in names])
        out, _ = model(x, pc)
        return out, dict(zip(names, pc.padding_cache))

    return step, stock


def conv_declaration(pad1=SlidingWindow(PADS[1]), lookahead: int = 0, pad0=Fixed(PADS[0]), initial: int = 0):
    """Right by default: conv 0's zero padding a Fixed context, conv 1's replicate padding a window that starts
    empty (the model fills it from the turn's first frame)."""
    clocks = (Clock("calls", "encoder call", rate_hz=25.0),
              Clock("frames", "latent frame", parent="calls", ratio=CALL, offset=lookahead))
    regions = (Region("pad0", clock="frames", shape=(1, CH, "frames"), policy=pad0, lifetime="turn"),
               Region("pad1", clock="frames", shape=(1, CH, "frames"), policy=pad1, lifetime="turn",
                      initial=initial))
    op = Operator("encode", reads=("pad1",), clock="frames", flush=(1, CALL, 1) if not lookahead else "lookahead")
    return Declaration("mimi-conv-stack", clocks, regions, (op,), admission=Admission("frames"), call_clock="calls")


def conv_traffic(decl: Declaration, seed: int = 5) -> Traffic:
    g = torch.Generator().manual_seed(seed)
    signals = [torch.randn(1, CH, n, generator=g) for n in (4 * CALL + 3, 3 * CALL)]
    return Traffic.stream(decl, signals, clock="frames", dim=2)


def conv_certify(decl, reference="loop", model=None, **kw):
    model = model or ConvStack()
    step, stock = conv_steps(model)
    ref = conv_loop(model) if reference == "loop" else reference
    return certify(KitModel(decl, step, stock, conv_traffic(decl), frames=2, modules=[model], reference=ref, **kw),
                   backend="eager")


def failed(cert) -> set:
    return set(cert.table.loc[~cert.table["passed"], "clause"])


# ---- the right declarations certify against the model --------------------------------------------------
def test_the_transformers_conv_stack_certifies_against_transformers_own_loop():
    cert = conv_certify(conv_declaration())
    assert cert.ok, cert.table
    assert cert.reference == REFERENCES["loop"] == "the model's own loop"
    assert "bit-exact with the model's own loop" in set(cert.table["clause"])
    assert len(cert.outputs) == 8 and all(torch.equal(a, b) for a, b in zip(cert.outputs, cert.stock_outputs))


def test_recorded_outputs_and_the_model_start_are_references_too():
    model = ConvStack()
    decl = conv_declaration()
    recorded = conv_loop(model)(conv_traffic(decl))
    assert conv_certify(decl, recorded, model).reference == "recorded outputs"
    assert conv_certify(decl, recorded, model).ok
    start = conv_certify(decl, None, model)
    assert start.ok and start.reference == "the stock step from the model's own start", start.table


def test_the_conformer_certifies_against_its_own_start():
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    spec = KitModel(conformer_declaration(), step, stock, conformer_traffic(), modules=[model])
    cert = certify(spec, backend="eager")
    assert cert.ok and cert.reference == "the stock step from the model's own start", cert.table


# ---- wrong declarations: refused, or a named clause fails --------------------------------------------------
@pytest.mark.parametrize("reference", ["loop", None])
def test_a_zero_filled_base_where_the_model_replicates_is_never_certified(reference):
    """The silent case: conv 1's replicate padding declared Fixed (zero-filled at a turn's start). The kit's
    carry and the stock step on the declared state agree with each other; the model does not."""
    cert = conv_certify(conv_declaration(pad1=Fixed(PADS[1])), reference)
    label = REFERENCES["loop" if reference else "stock"]
    assert not cert.ok
    assert {f"bit-exact with {label}", f"the declared state's stock step equals {label}"} <= failed(cert)
    exact = cert.exact.set_index("call")["equal"]
    assert not exact[0] and not exact[5]  # each turn's first call: the declared start is not the model's
    detail = cert.table.set_index("clause").loc[f"the declared state's stock step equals {label}", "detail"]
    assert "call 0 (turn 0, call 0 of the turn: the turn's first call)" in detail
    assert "declared audit agrees on every retention" not in failed(cert)  # the audits agree: only the model tells


def test_a_stock_step_that_reads_an_unstarted_region_names_it():
    model = ConvStack()
    decl = conv_declaration(pad1=Fixed(PADS[1]))
    step, _ = conv_steps(model)

    def stock(x, caches, last):  # indexes the region: it needs a start the model's own loop never gives
        pc = model.padding_cache([caches["pad0"], caches["pad1"]])
        return model(x, pc)[0], dict(zip(("pad0", "pad1"), pc.padding_cache))

    cert = certify(KitModel(decl, step, stock, conv_traffic(decl), frames=2, modules=[model]), backend="eager")
    assert not cert.ok and "reference: the stock step from the model's own start" in failed(cert)
    detail = cert.table.set_index("clause").loc["reference: the stock step from the model's own start", "detail"]
    assert "region 'pad0' at turn 0's start" in detail and "init" in detail


@pytest.mark.parametrize("reference", ["loop", None])
@pytest.mark.parametrize("window", [PADS[1] - 1, PADS[1] + 1])
def test_a_retention_the_model_does_not_have_is_never_certified(reference, window):
    try:
        cert = conv_certify(conv_declaration(pad1=SlidingWindow(window)), reference)
    except (RuntimeError, ValueError) as e:  # refused: the model's conv cannot take that context
        assert "pad1" in str(e) or "encode" in str(e)
        return
    assert not cert.ok and any(c.startswith("bit-exact with") for c in failed(cert)), cert.table


def test_a_lookahead_the_model_does_not_have_is_never_certified():
    """Declared one frame of lookahead: the traffic's calls overlap by a frame; transformers' own loop, cutting
    the signal its own way, gives other outputs (or another count of them)."""
    try:
        cert = conv_certify(conv_declaration(lookahead=1))
    except (RuntimeError, ValueError):
        return
    assert not cert.ok and failed(cert) & {"reference: the model's own loop", "bit-exact with the model's own loop"}


def test_an_initial_extent_without_the_models_start_is_refused():
    with pytest.raises(ValueError, match=r"region 'pad1' declares initial=4"):
        conv_certify(conv_declaration(pad1=Fixed(PADS[1]), initial=PADS[1]))


def test_an_initial_extent_primed_with_a_start_the_model_lacks_is_never_certified():
    """``init`` primes the turn (both the kit and the stock step start from it), but the model's own loop has no
    such start: only a reference the declaration did not build can tell."""
    decl = conv_declaration(pad1=Fixed(PADS[1]), initial=PADS[1])
    cert = conv_certify(decl, init=lambda prompt: {"pad1": torch.zeros(1, CH, PADS[1])})
    assert not cert.ok and "bit-exact with the model's own loop" in failed(cert)


@pytest.mark.parametrize("policy", [PromptRetained(8, 40), PromptRetained(4, 48)])
def test_the_conformer_with_a_retention_it_does_not_have_is_never_certified(policy):
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    decl = conformer_declaration(kv_policy=policy)
    cert = certify(KitModel(decl, step, stock, conformer_traffic(), modules=[model]), backend="eager")
    assert not cert.ok
    assert {"bit-exact with the stock step from the model's own start",
            "differential audit agrees on every retention"} <= failed(cert), cert.table


def test_the_conformer_with_a_base_it_does_not_have_is_never_certified():
    """The conv context declared a window that starts empty: the model starts from a zero context."""
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    right = conformer_declaration()
    conv = dataclasses.replace(right.region("conv"), policy=SlidingWindow(model.s.kernel - 1))
    decl = dataclasses.replace(right, regions=(right.region("kv"), conv))
    with pytest.raises((RuntimeError, ValueError)):
        cert = certify(KitModel(decl, step, stock, conformer_traffic(), modules=[model]), backend="eager")
        assert not cert.ok  # reached only if the step ran on the short context
        raise ValueError(cert.table)


def test_the_conformer_with_a_lookahead_it_does_not_have_is_refused():
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    right = conformer_declaration()
    clocks = tuple(dataclasses.replace(c, offset=2) if c.name == "frames" else c for c in right.clocks)
    with pytest.raises(ValueError, match="commits"):
        certify(KitModel(dataclasses.replace(right, clocks=clocks), step, stock, conformer_traffic(), modules=[model]),
                backend="eager")


# ---- the factorial's gate is the model's reference -------------------------------------------------------
def test_the_factorial_gates_every_arm_on_the_models_loop():
    model = ConvStack()
    step, stock = conv_steps(model)
    wrong = conv_declaration(pad1=Fixed(PADS[1]))
    m = KitModel(wrong, step, stock, conv_traffic(wrong), frames=2, modules=(model,), reference=conv_loop(model))
    df = factorial(m, ("B0", "SRc"), blocks=1, warmup=0, backend="eager")
    assert not df.attrs["certified"] and df.attrs["reference"] == "the model's own loop"
    assert not df["bit_exact"].any()  # B0 on the declared state is not the model either
    outs, which = m.reference_outputs()
    assert which == "loop" and len(outs) == m.traffic.calls


def test_a_reference_of_the_wrong_form_is_refused():
    decl = conv_declaration()
    with pytest.raises(ValueError, match="reference must be"):
        model_reference(KitModel(decl, traffic=conv_traffic(decl), reference=torch.zeros(3)))
    with pytest.raises(ValueError, match="list of tensors"):
        model_reference(KitModel(decl, traffic=conv_traffic(decl), reference=lambda traffic: torch.zeros(3)))
