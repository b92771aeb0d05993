"""The seam from a declared operator to an engine (catalog and classifier derived from the declaration), and
the replay key that ignores strides of size-1 dims."""

from __future__ import annotations

import pytest
import torch

from cadencelab.contract import DeclarationError, admitted_labels, class_label
from cadencelab.adapters.freeze_style import freeze_style_declaration
from cadencelab.adapters.token2wav.clocks import token2wav_declaration
from cadencelab.replay import At, ExactShapeReplay, bind, eager_label, lookahead
from cadencelab.adapters.teaching import TeachingConfig, declaration as teaching_declaration

T2W = token2wav_declaration()


def _t(*shape):
    return torch.zeros(shape)


def test_catalog_is_the_declarations_and_classify_cannot_be_passed():
    eng = bind(T2W, "flow_chunk", lambda token, est, conf, last_chunk: token, backend="eager",
               reads={"estimator_att_cache": At("est"), "conformer_att_cache": At("conf")},
               frames=At("token", dim=1, clock="tokens", last="last_chunk"))
    assert eng.catalog == admitted_labels(T2W, "flow_chunk")
    with pytest.raises(TypeError, match="classify"):
        bind(T2W, "flow_chunk", lambda x: x, frames=At("x", dim=1), classify=lambda x: 0)


def test_tokens_with_lookahead_become_frames():
    eng = bind(T2W, "flow_chunk", lambda token, est, conf, last_chunk: token, backend="eager",
               reads={"estimator_att_cache": At("est"), "conformer_att_cache": At("conf")},
               frames=At("token", dim=1, clock="tokens", last="last_chunk"))
    est, conf = _t(10, 1, 2, 1, 352, 1), _t(1, 1, 1, 352, 1)
    tpc, la = T2W.params["tokens_per_chunk"], lookahead(T2W, "tokens")
    assert la == T2W.params["lookahead"]
    steady = eng.classifier(_t(1, tpc + la), est, conf, False)
    assert steady == class_label([352, 352], T2W.params["f_chunk"]) and steady in eng.catalog
    assert eng.classifier(_t(1, 10), est, conf, last_chunk=True) == (352, 352, 20)  # the flush commits its lookahead
    eng(_t(1, tpc + la), est, conf, False)
    assert eng.counters()["label"].tolist() == [steady]


def test_stock_cache_dicts_priming_and_inferred_regions():
    cache = dict(estimator_att_cache=_t(10, 1, 2, 1, 402, 1), conformer_att_cache=_t(1, 1, 1, 402, 1))
    flow = bind(T2W, "flow_chunk", lambda token, spk, cache, last_chunk: token, backend="eager",
                reads={r: At("cache", key=r) for r in cache}, frames=At("token", dim=1, clock="tokens", last="last_chunk"))
    assert flow.classifier(_t(1, 28), None, cache, False) == (402, 402, 50)
    step = bind(T2W, "estimator_step", lambda x, att_cache=None: x, backend="eager",
                reads={"estimator_att_cache": At("att_cache", dim=3)}, frames=At("x", dim=2))
    assert step.classifier(_t(2, 80, 50)) == eager_label("priming")  # cache-free priming, from the catalog
    assert step.classifier(_t(2, 80, 50), att_cache=_t(1, 2, 1, 302, 1)) == (302, 50)
    # the stock vocoder's mel carries the cached mel: its extent follows from the source cache's
    voc = bind(T2W, "vocoder_core", lambda mel, cache_source: mel, backend="eager",
               reads={"vocoder_source_cache": At("cache_source")}, frames=At("mel", dim=2, less="vocoder_mel_cache"))
    assert voc.classifier(_t(1, 80, 50), _t(1, 1, 0)) == (0, 0, 50)
    assert voc.classifier(_t(1, 80, 58), _t(1, 1, 3840)) == (8, 3840, 50)
    assert voc.classifier(_t(1, 80, 58), _t(1, 1, 17))[0] == "eager"  # off the declared trajectory: eager


def test_missing_region_without_declared_priming_is_refused():
    decl = freeze_style_declaration()
    eng = bind(decl, "decode_chunk", lambda tokens, ctx0=None: tokens, backend="eager",
               reads={"left_context": At("ctx0")}, frames=At("tokens", dim=1))
    label = eng.classifier(_t(1, 20))
    assert label[0] == "eager" and "left_context" in label[1]
    eng(_t(1, 20))
    assert eng.counters()["status"].tolist() == ["rejected"]


def test_samples_become_frames_and_batches_lead_the_label():
    from cadencelab.adapters.mimi import FRAME_SAMPLES, declaration as mimi_declaration

    decl = mimi_declaration()
    eng = bind(decl, "encode_frame", lambda pcm: pcm, backend="eager",
               reads={f"encoder_kv_{i}": At(lambda: _t(2, 1, 8, 250, 64)) for i in range(8)},
               frames=At("pcm", dim=-1, clock="samples"))
    assert eng.classifier(_t(1, 1, FRAME_SAMPLES)) == (250,) * 8 + (1,) and eng.classifier(_t(1, 1, FRAME_SAMPLES)) in eng.catalog
    assert eng.classifier(_t(1, 1, FRAME_SAMPLES + 1))[0] == "eager"
    b = bind(T2W, "vocoder_core", lambda mel, cache_source: mel, backend="eager", batch=At("mel", dim=0), batch_sizes=(1, 2),
             reads={"vocoder_source_cache": At("cache_source")}, frames=At("mel", dim=2, less="vocoder_mel_cache"))
    assert b.catalog == admitted_labels(T2W, "vocoder_core", (1, 2))
    assert b.classifier(_t(2, 80, 58), _t(2, 1, 3840)) == (2, 8, 3840, 50)


def test_bad_bindings_name_the_field():
    with pytest.raises(DeclarationError, match="does not read"):
        bind(T2W, "flow_encoder", lambda xs: xs, reads={"vocoder_mel_cache": At("xs")}, frames=At("xs", dim=1))
    with pytest.raises(ValueError, match="no argument 'tokens'"):
        bind(T2W, "flow_encoder", lambda xs, att_cache=None: xs, reads={"conformer_att_cache": At("att_cache")},
             frames=At("tokens", dim=1))
    with pytest.raises(TypeError, match="frames"):
        bind(T2W, "flow_encoder", lambda xs: xs, frames=At("xs"))
    with pytest.raises(DeclarationError, match="do not determine"):  # nothing located, several extents
        bind(teaching_declaration(TeachingConfig()), "chunk_step", lambda x: x, frames=At("x", dim=1))


# ---- the replay key and size-1 strides ---------------------------------------------------------------


def _double(x):
    return x * 2


def test_slices_of_turns_of_different_lengths_share_one_class():
    eng = ExactShapeReplay(_double, "double", backend="eager")
    for n in (200, 188, 200):
        x = torch.randn(1, n, 8)[:, :20]
        assert torch.equal(eng(x), x * 2)
    assert len(eng.classes) == 1
    many = ExactShapeReplay(_double, "double", backend="eager", max_classes=4)
    for n in range(20, 120):
        many(torch.randn(1, n, 8)[:, :20])
    c = many.counters()
    assert len(c) == 1 and c["reason"].tolist() == [""] and int(c["replays"].sum()) == 99  # no catalog_full


def test_strides_of_longer_dims_still_split_classes():
    eng = ExactShapeReplay(_double, "double", backend="eager")
    x = torch.randn(4, 6)
    eng(x)
    eng(x.t().contiguous().t())  # same shape, transposed strides: a different kernel layout
    assert len(eng.classes) == 2


@pytest.mark.cuda
def test_graph_replays_slices_with_other_size_one_strides_exactly():
    eng = ExactShapeReplay(_double, "double", backend="cuda")
    for n in (200, 188, 200, 150):
        x = torch.randn(1, n, 8, device="cuda")[:, :20]
        assert torch.equal(eng(x), x * 2)
    c = eng.counters()
    assert len(c) == 1 and int(c["replays"].sum()) == 3 and c["status"].tolist() == ["captured"]
