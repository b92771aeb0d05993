"""transformers' MimiModel streaming encoder and decoder on the kit through the bridge: every call equal to
transformers' own streaming loop (its own padding and KV caches, chunk by chunk), certified, small adapters;
a wrong initial-state declaration differs from the model."""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("transformers", minversion="5.25")

from cadencelab.adapters.hf import mimi_codec, mimi_decoder, mimi_encoder
from cadencelab.adapters.kit import Traffic, adapter_lines
from cadencelab.contract import Fixed


def _equal(want, got) -> list:
    return [bool(a.shape == b.shape and torch.equal(a, b)) for a, b in zip(want, got)]


@pytest.fixture(scope="module")
def model():
    return mimi_codec.build()


@pytest.fixture(scope="module")
def encoder(model):
    km = mimi_encoder.kit_model(model)
    return km, mimi_codec.reference_encoder(model)(km.traffic)


@pytest.fixture(scope="module")
def decoder(model):
    km = mimi_decoder.kit_model(model)
    return km, mimi_codec.reference_decoder(model)(km.traffic)


def test_encoder_certified_and_equal_to_transformers_loop(encoder):
    km, want = encoder
    cert = km.certify()
    assert cert.ok, cert
    assert len(want) == km.traffic.calls == 9
    assert all(_equal(want, cert.outputs)), "every replayed call equals transformers' own streaming encoder"
    # the regions are the model's: its conv paddings (one replicate-padded: a sliding window starting empty),
    # its sliding-window KV (window - 1 kept) and its positions as a counter
    kinds = {r.name: r.policy.describe() for r in km.decl.regions}
    assert kinds["pad8"].startswith("sliding window of 2") and kinds["kv0"].startswith("sliding window of 7")
    assert kinds["pos"].startswith("counter")


@pytest.mark.parametrize("arm", ["B0", "S", "SR"])
def test_encoder_arms_equal_to_transformers_loop(encoder, arm):
    km, want = encoder
    assert all(_equal(want, km.runtime(arm).run(km.traffic).outputs))


def test_adapters_are_small():
    for m in (mimi_encoder, mimi_decoder):
        assert adapter_lines(m.declaration, m.steps) <= 40


def test_encoder_wrong_initial_state_differs_from_the_model(model, encoder):
    """The replicate-padded latent downsample declared Fixed(2) (zeros at a turn's start) instead of started
    by the model: the first call of each turn differs from transformers' own loop, the others agree."""
    km, want = encoder
    wrong = dataclasses.replace(km.decl, regions=tuple(
        dataclasses.replace(r, policy=Fixed(2)) if r.name == "pad8" else r for r in km.decl.regions))
    bad = dataclasses.replace(km, decl=wrong)
    got = _equal(want, bad.runtime("S").run(km.traffic).outputs)
    firsts = [k for k, (t, i, *_) in enumerate(km.traffic.items_of()) if i == 0]
    assert [k for k, ok in enumerate(got) if not ok] == firsts
    cert = bad.certify()  # checked against transformers' own loop: never certified
    failed = set(cert.table.loc[~cert.table["passed"], "clause"])
    assert not cert.ok and any(c.startswith("bit-exact with") for c in failed), cert
    assert any(c.startswith("the declared state's stock step equals") for c in failed), cert


def test_decoder_equal_to_transformers_loop(decoder):
    km, want = decoder
    cert = km.certify()
    assert len(want) == km.traffic.calls == 9
    assert all(_equal(want, cert.outputs)), "every replayed call equals transformers' own streaming decoder"
    table = cert.table.set_index("clause")["passed"]
    assert table.drop("preflight: no capture hazard in the step").all(), cert
    # on a CPU the preflight emulates a GPU and cannot know the conv sizes stay on the host there (see
    # mimi_codec.host_conv_sizes): its one hazard is the decoder convs' padding, certified on a GPU below
    hz = cert.preflight.hazards()
    assert set(hz["kind"]) <= {"host_sync"} and hz["source"].str.contains("pad").all()


@pytest.mark.cuda
@pytest.mark.parametrize("which", ["encoder", "decoder"])
def test_certified_on_cuda(which):
    mod = {"encoder": mimi_encoder, "decoder": mimi_decoder}[which]
    model = mimi_codec.build(device="cuda")
    km = mod.kit_model(model, device="cuda")
    ref = (mimi_codec.reference_encoder if which == "encoder" else mimi_codec.reference_decoder)(model)
    with torch.inference_mode():
        want = ref(km.traffic)
    cert = km.certify("cuda")
    assert cert.ok, cert
    assert all(_equal(want, cert.outputs))


def test_decoder_wrong_lookahead_is_refused(model, decoder):
    """A lookahead code the causal decoder does not have (codes clock offset 1): the model's caches take every
    code it is given, more than the declaration lets a call commit, and the runtime refuses, naming the region."""
    km, _ = decoder
    clocks = tuple(dataclasses.replace(c, offset=1) if c.name == "codes" else c for c in km.decl.clocks)
    decl = dataclasses.replace(km.decl, clocks=clocks,
                               operators=tuple(dataclasses.replace(o, flush="lookahead") for o in km.decl.operators))
    g = torch.Generator().manual_seed(5)
    codes = [torch.randint(0, model.config.codebook_size, (1, model.config.num_quantizers, 11), generator=g)]
    bad = dataclasses.replace(km, decl=decl, traffic=Traffic.stream(decl, codes, clock="codes", dim=2))
    with pytest.raises(ValueError, match="returned 6 frames for region 'kv0' where the declaration implies 4"):
        bad.certify()


def test_decoder_counter_on_the_wrong_clock_is_never_certified(decoder):
    """Positions declared on the codes clock (2 a call) where the model counts transformer frames (4 a call):
    the differential audit sees the model's own count differ from the counter's, and the calls after the
    first differ from transformers' own loop."""
    km, _ = decoder
    regions = tuple(dataclasses.replace(r, clock="codes", shape=(1, "codes")) if r.name == "pos" else r
                    for r in km.decl.regions)
    cert = dataclasses.replace(km, decl=dataclasses.replace(km.decl, regions=regions)).certify()
    failed = set(cert.table.loc[~cert.table["passed"], "clause"])
    assert "differential audit agrees on every retention" in failed and any(c.startswith("bit-exact") for c in failed)
    assert "pos" in cert.audit.loc[cert.audit["audit"] == "differential"].to_string()


def test_the_test_model_depends_on_its_state(model, encoder, decoder):
    """Guard for every equality above: the seeded model's outputs change with its caches (a fresh-cache call
    per chunk differs from transformers' streaming loop after a turn's first call), so equal means equal state."""
    with torch.inference_mode():
        for km, want, fresh in ((*encoder, lambda x: model.encoder(x, use_streaming=True).latents),
                                (*decoder, lambda x: model.decode(x).audio_values)):
            got = [fresh(x) for t, i, op, x, last in km.traffic.items_of()]
            same = _equal(want, got)
            firsts = [k for k, (t, i, *_) in enumerate(km.traffic.items_of()) if i == 0]
            assert [k for k, ok in enumerate(same) if ok] == firsts
