"""The "fused" decode of the duplex second's language models (adapters.duplex.fused): the prefill captured per
(input kind, T, at start) and a second's decode steps as one graph; on a CPU the same bodies run eagerly and
give the "graph" mode's bits."""

from __future__ import annotations


import pytest
import torch
from duplex_runs import bench_duplex_tiny, dispatched, host_reads, served_row

pytest.importorskip("transformers")

from cadencelab.adapters.duplex import TINY, DuplexSecond, build_models  # noqa: E402
from cadencelab.adapters.duplex.fused import FusedDecoder  # noqa: E402
from cadencelab.adapters.duplex.served import GraphDecoder, run_label  # noqa: E402


def _ids(second, t=25, vocab=TINY.backbone.vocab):
    return torch.randint(0, vocab, (1, t), generator=torch.Generator().manual_seed(second))


def _same_seconds(graph, fused, seconds, make_inputs, n, per_second_reset=False):
    """Both decoders through ``seconds`` seconds (a context that would overflow starts afresh); every hidden
    state and token equal, bit for bit."""
    for sec in range(seconds):
        inputs = make_inputs(sec)
        t = next(iter(inputs.values())).shape[1]
        for d in (graph, fused):
            if per_second_reset or not d.fits(t + n):
                d.reset()
        a = graph.serve(n, **inputs)
        b = fused.serve(n, **inputs)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), sec
        assert graph.length == fused.length


def test_fused_decoding_is_the_graph_modes_bits_on_a_cpu(models):
    """Backbone-like (ids, its context overflowing every second second: start and continued prefills) and
    speech-decoder-like (embeddings, a new context each second), with an explicit reset between."""
    bb = models.backbone
    graph, fused = GraphDecoder(bb, 80, 9, models.cache_kw), FusedDecoder(bb, 80, 9, models.cache_kw)
    _same_seconds(graph, fused, 5, lambda s: dict(input_ids=_ids(s)), 9)
    graph.reset(), fused.reset()
    _same_seconds(graph, fused, 3, lambda s: dict(input_ids=_ids(10 + s)), 9)
    d = fused.describe()
    assert d["eager_prefills"] == 8 and d["eager_steps"] == 8 * 9 and not d["captured"]
    assert d["prefill_replays"] == d["decode_replays"] == 0 and d["capture_error"] is None
    sp, hs = models.speech, models.cfg.speech.hidden
    graph, fused = GraphDecoder(sp, 35, 24, models.cache_kw), FusedDecoder(sp, 35, 24, models.cache_kw)

    def embeds(s):
        return dict(inputs_embeds=torch.randn(1, 10, hs, generator=torch.Generator().manual_seed(s)))

    _same_seconds(graph, fused, 3, embeds, 24, per_second_reset=True)


def test_the_harness_fused_mode_gives_the_graph_modes_seconds(models):
    """Over several seconds including a reset and a backbone context overflow: the same text and speech
    tokens and the same audio as the "graph" mode; the run labelled ``+fusedLM``."""
    cfg = TINY.replace(backbone_context=80)  # 35 positions a second: the context starts afresh every third
    m = build_models(cfg, "cpu", 0)
    runs = {}
    for decode in ("graph", "fused"):
        h = DuplexSecond(cfg, "B0", "cpu", 0, models=m, decode=decode)
        h.run(4, warmup=1)
        h.reset()
        h.run_second(), h.run_second()
        runs[decode] = h
    g, f = (runs[k].seconds_frame() for k in ("graph", "fused"))
    assert len(f) == 6 and f["arm"].eq("B0+fusedLM").all() and runs["fused"].label == run_label("B0", "fused")
    for col in ("text_tokens", "speech_tokens", "pcm_sha16"):
        assert g[col].tolist() == f[col].tolist(), col
    dec = runs["fused"].decoders
    assert isinstance(dec["backbone"], FusedDecoder) and dec["speech_decoder"].describe()["eager_prefills"] == 6


def _host_reads(fn):
    return host_reads(dispatched(fn))


def test_the_fused_prefill_reads_no_device_value_on_the_host_where_hfs_does(models):
    """HF's prefill at T > 1 on a static cache asks ``q_offset == 0`` of the cache's device length (a host
    read: capture fails there); the fused bodies (start and continued) and the n-step decode do not."""
    plain = GraphDecoder(models.backbone, 80, 9, models.cache_kw)
    plain.prefill(input_ids=_ids(0))
    assert _host_reads(lambda: plain.prefill(input_ids=_ids(1)))  # why the prefill needed its own mask
    fused = FusedDecoder(models.backbone, 80, 9, models.cache_kw)
    fused.serve(9, input_ids=_ids(0))  # the cache's tensors exist (lazily built), as at a capture
    with torch.inference_mode():
        fused.inputs[("input_ids", 25)].copy_(_ids(1))
    assert not _host_reads(lambda: fused._prefill_body("input_ids", 25, False))
    assert not _host_reads(lambda: fused._decode_body(9))
    assert not _host_reads(lambda: fused._prefill_body("input_ids", 25, True))


@pytest.mark.parametrize("call, says", [
    (lambda d, v: d.serve(3, input_ids=torch.full((1, 3), v)), "token id"),
    (lambda d, v: d.serve(3, input_ids=torch.zeros(1, 0, dtype=torch.long)), "no positions"),
    (lambda d, v: d.serve(3, input_ids=torch.zeros(2, 3, dtype=torch.long)), "one sequence"),
    (lambda d, v: d.serve(3, input_ids=torch.zeros(1, 3)), "(1, T) integer token ids"),
    (lambda d, v: d.serve(3), "exactly one of input_ids or inputs_embeds"),
    (lambda d, v: d.serve(3, inputs_embeds=torch.zeros(1, 2, 3)), "embeddings"),
    (lambda d, v: d.serve(3, inputs_embeds=torch.zeros(1, 2, d.hidden.shape[-1], dtype=torch.float64)),
     "inputs_embeds must be torch.float32"),
    (lambda d, v: d.serve(4, input_ids=torch.zeros(1, 3, dtype=torch.long)), "n = 4 is not an integer in 0..3"),
    (lambda d, v: d.serve(1.5, input_ids=torch.zeros(1, 3, dtype=torch.long)), "n = 1.5"),
    (lambda d, v: d.serve(True, input_ids=torch.zeros(1, 3, dtype=torch.long)), "n = True"),
    (lambda d, v: d.serve(3, input_ids=torch.zeros(1, 30, dtype=torch.long)), "exceed max_len 32"),
])
def test_fused_decoder_refuses_bad_input_and_keeps_its_state(models, call, says):
    """As GraphDecoder's: one line, before anything moves; the next right call gives what it gives alone."""
    import re

    ids = _ids(5, 6)
    alone = FusedDecoder(models.backbone, 32, 3, models.cache_kw).serve(3, input_ids=ids)
    alone = tuple(x.clone() for x in alone)
    dec = FusedDecoder(models.backbone, 32, 3, models.cache_kw)
    dec.serve(3, input_ids=ids[:, :2])
    dec.reset()
    before = (dec.length, dec.eager_steps, dec.eager_prefills, dec.ids.clone(), dec.pos.clone(), dec.slot.clone())
    with pytest.raises(ValueError, match=re.escape(says)) as e:
        call(dec, dec.vocab)
    assert "\n" not in str(e.value)
    assert (dec.length, dec.eager_steps, dec.eager_prefills) == before[:3]
    assert all(torch.equal(a, b) for a, b in zip((dec.ids, dec.pos, dec.slot), before[3:]))
    got = dec.serve(3, input_ids=ids)
    assert all(torch.equal(a, b) for a, b in zip(got, alone))


def test_fused_decoder_refuses_a_model_with_sliding_layers():
    import transformers as tf

    torch.manual_seed(0)
    cfg = tf.Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=100, use_sliding_window=True, sliding_window=8,
                         max_window_layers=1)
    with pytest.raises(ValueError, match="every layer of type 'full_attention'"):
        FusedDecoder(tf.Qwen2ForCausalLM(cfg).eval(), 32, 3)


def test_bench_duplex_runs_and_labels_the_fused_mode(tmp_path, capsys):
    rc, res = bench_duplex_tiny(tmp_path, "eager,fused")
    assert rc == 0
    fused = served_row(res, capsys.readouterr().out, "fused")
    assert "lm_graph_tokens_equal_seconds" not in fused  # no graph run to compare with
    dec = res["arms"]["B0+fusedLM"]["decoders"]
    assert dec["backbone"]["eager_prefills"] == 2 and dec["backbone"]["eager_steps"] == 2 * (TINY.text_tokens - 1)
    assert dec["speech_decoder"]["decode_graphs"] == [] and dec["speech_decoder"]["capture_error"] is None


@pytest.mark.cuda
def test_fused_decode_captures_replays_and_matches_the_graph_mode_on_cuda():
    """On a GPU: one prefill graph per (kind, T, start) and one decode graph per n, every second after the
    first of each key replayed right after its capture (no eager prefill or step), the tokens the "graph" mode's; then the harness."""
    m = build_models("tiny", "cuda", 0)
    graph = GraphDecoder(m.backbone, 80, 9, m.cache_kw, capture=True)
    fused = FusedDecoder(m.backbone, 80, 9, m.cache_kw, capture=True)
    for sec in range(5):  # 35 positions a second: start, continued, start, ...
        ids = _ids(sec).cuda()
        for d in (graph, fused):
            if not d.fits(35):
                d.reset()
        a = graph.serve(9, input_ids=ids)
        b = fused.serve(9, input_ids=ids)
        assert torch.equal(a[1], b[1]), sec
        assert (a[0] - b[0]).abs().max() < 1e-3, sec  # the same ops; a captured kernel may differ in bits
    d = fused.describe()
    assert d["capture_error"] is None, d["capture_error"]
    assert d["prefill_graphs"] == ["input_ids T=25", "input_ids T=25 start"] and d["decode_graphs"] == [9]
    assert d["prefill_replays"] == 5 and d["decode_replays"] == 5
    assert d["eager_prefills"] == 0 and d["eager_steps"] == 0
    runs = {}
    for decode in ("graph", "fused"):
        h = DuplexSecond("tiny", "B0", "cuda", 0, models=m, decode=decode)
        h.run(4, warmup=1)
        runs[decode] = h
    for dec in runs["fused"].decoders.values():
        s = dec.describe()
        assert s["capture_error"] is None and s["eager_prefills"] == 0 and s["eager_steps"] == 0
        assert len(s["decode_graphs"]) == 1 and s["decode_replays"] == 4
    assert runs["fused"].decoders["speech_decoder"].describe()["prefill_graphs"] == ["inputs_embeds T=10 start"]
    g, f = (runs[k].seconds_frame() for k in ("graph", "fused"))
    assert g["text_tokens"].tolist() == f["text_tokens"].tolist()
    assert g["speech_tokens"].tolist() == f["speech_tokens"].tolist()
