"""The serving-style decode of the duplex second's language models (adapters.duplex.served): a static KV
cache and a decode step that needs no host value, so it can be captured as a CUDA graph."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
import torch
from duplex_runs import bench_duplex_tiny, dispatched, host_reads, served_row

pytest.importorskip("transformers")

from cadencelab.adapters.duplex import TINY, DuplexSecond, build_models  # noqa: E402
from cadencelab.adapters.duplex.served import DECODE_MODES, GraphDecoder  # noqa: E402


def _eager_decode(m, model, n, **inputs):
    """The stock path: HF dynamic cache, one eager forward per token."""
    from transformers import DynamicCache

    with torch.inference_mode():
        cache = DynamicCache()
        h = model.model(**inputs, **{m.cache_kw: cache}, use_cache=True).last_hidden_state[:, -1:]
        hs, toks = [h], [model.lm_head(h).argmax(-1)]
        for _ in range(n - 1):
            h = model.model(input_ids=toks[-1], **{m.cache_kw: cache}, use_cache=True).last_hidden_state
            hs.append(h)
            toks.append(model.lm_head(h).argmax(-1))
    return torch.cat(hs, 1), torch.cat(toks, 1)


def _served(dec, model, n, **inputs):
    h = dec.prefill(**inputs)[:, -1:]
    first = model.lm_head(h).argmax(-1)
    hidden, tokens = dec.decode(first, n - 1)
    return torch.cat([h, hidden], 1), torch.cat([first, tokens], 1)


def test_static_cache_decoding_follows_eager_decoding(models):
    ids = torch.randint(0, models.cfg.backbone.vocab, (1, 25), generator=torch.Generator().manual_seed(3))
    e_h, e_t = _eager_decode(models, models.backbone, 10, input_ids=ids)
    dec = GraphDecoder(models.backbone, 128, 9, models.cache_kw)
    g_h, g_t = _served(dec, models.backbone, 10, input_ids=ids)
    assert torch.equal(e_t, g_t)  # greedy tokens agree at the tiny size on a CPU
    assert (e_h - g_h).abs().max() < 1e-4  # hidden states close, not asserted equal: a different reduction
    assert dec.length == 25 + 9 and dec.describe()["eager_steps"] == 9 and not dec.describe()["captured"]
    # a second context at the same addresses gives the same tokens again
    dec.reset()
    again = _served(dec, models.backbone, 10, input_ids=ids)[1]
    assert torch.equal(again, g_t)


def _other_model(arch: str):
    """A tiny decoder-only model of an architecture the decoder was not written for (random weights)."""
    import transformers as tf

    torch.manual_seed(0)
    common = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=500, max_position_embeddings=256)
    configs = {
        "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**common)),
        "mistral": lambda: tf.MistralForCausalLM(tf.MistralConfig(**common, sliding_window=None)),
        "gemma": lambda: tf.GemmaForCausalLM(tf.GemmaConfig(**common, head_dim=16)),
        "gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=500,
                                                         n_positions=256, bos_token_id=0, eos_token_id=0)),
    }
    return configs[arch]().eval()


@pytest.mark.parametrize("arch", ["llama", "mistral", "gemma", "gpt2"])
def test_the_decoder_serves_architectures_it_was_not_written_for(arch):
    """Written against Qwen2; its body and head come from HF's generic accessors, so any decoder-only
    model with a static cache serves. Greedy tokens follow the model's own eager generation."""
    model = _other_model(arch)
    ids = torch.randint(0, 500, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        want = model.generate(ids, max_new_tokens=8, do_sample=False, min_new_tokens=8)[:, 12:]
    dec = GraphDecoder(model, 64, 7)
    h = dec.prefill(input_ids=ids)[:, -1:]
    first = dec.first_token(h)
    got = torch.cat([first, dec.decode(first, 7)[1]], 1)
    assert torch.equal(got, want), (arch, got.tolist(), want.tolist())


def test_the_decode_step_reads_no_device_value_on_the_host(models):
    """What a CUDA graph capture forbids, checked where no GPU is: no .item()/bool(tensor) in the step."""
    dec = GraphDecoder(models.backbone, 64, 4, models.cache_kw)
    dec.prefill(input_ids=torch.zeros(1, 5, dtype=torch.long))
    seen = dispatched(dec._step)
    assert seen["aten.scaled_dot_product_attention.default"] or seen["aten.bmm.default"]
    assert not host_reads(seen), seen


def test_bad_use_is_refused_with_the_reason(models):
    dec = GraphDecoder(models.backbone, 16, 4, models.cache_kw)
    with pytest.raises(ValueError, match="prefill first"):
        dec.decode(torch.zeros(1, 1, dtype=torch.long), 2)
    dec.prefill(input_ids=torch.zeros(1, 14, dtype=torch.long))
    with pytest.raises(ValueError, match="exceed max_len 16"):
        dec.decode(torch.zeros(1, 1, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="not an integer in 0..4"):
        dec.decode(torch.zeros(1, 1, dtype=torch.long), 5)
    with pytest.raises(ValueError, match="exceed max_len 16"):
        dec.prefill(input_ids=torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="capture needs a CUDA device"):
        GraphDecoder(models.backbone, 16, 4, models.cache_kw, capture=True)
    with pytest.raises(ValueError, match="has no output embeddings"):
        GraphDecoder(models.backbone.get_decoder(), 16, 4)
    with pytest.raises(ValueError, match="decode must be one of"):
        DuplexSecond("tiny", "B0", "cpu", models=models, decode="compiled")
    assert DECODE_MODES == ("eager", "graph", "fused")


def test_bench_duplex_decode_modes(tmp_path, capsys, monkeypatch):
    from cadencelab.bench.duplex import lm_agreement

    out = tmp_path / "duplex"
    rc, res = bench_duplex_tiny(tmp_path, "eager,graph")
    assert rc == 0
    served = served_row(res, capsys.readouterr().out, "graph")
    assert served["lm_token_agreement"] == 1.0 and served["lm_first_divergence_second"] is None
    assert res["summary"]["B0"]["lm_exact"] is True and "lm_token_agreement" not in res["summary"]["B0"]
    dec = res["arms"]["B0+graphLM"]["decoders"]
    assert dec["backbone"]["captured"] is False and dec["backbone"]["eager_steps"] == 2 * (TINY.text_tokens - 1)  # 2 seconds
    assert dec["speech_decoder"]["max_len"] == TINY.text_tokens + TINY.speech_tokens  # its context: one second
    pcm = pd.DataFrame(res["seconds"]).pivot(index="second", columns="arm", values="pcm_sha16")
    assert (pcm["B0"] == pcm["B0+graphLM"]).all()  # the same tokens at the tiny size, so the same audio
    # the course reads it where the H200 recording will live, every served row labelled as a control
    from cadencelab.course import anatomy, data

    assert data.how_to_record("duplex_served").startswith("python -m cadencelab.bench duplex")
    (tmp_path / "data" / "h200").mkdir(parents=True)
    shutil.copy(out / "duplex_second.json", tmp_path / "data" / "h200" / "duplex_second_served.json")
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path / "data"))
    assert data.is_recorded("duplex_served")
    frame = anatomy.served_frame()
    assert list(frame.index) == ["B0", "B0+graphLM"] and list(frame["lm_decode"]) == ["eager", "graph"]
    assert frame.loc["B0", "lm_vs_eager"] == "exact (the stock path)"
    assert frame.loc["B0+graphLM", "lm_vs_eager"].startswith("control, not certified exact: 2/2 seconds")
    # divergence is counted per token position and the first differing second named
    a = pd.DataFrame(dict(text_tokens=[[1, 2], [3, 4]], speech_tokens=[[5], [6]]), index=[0, 1])
    b = pd.DataFrame(dict(text_tokens=[[1, 2], [3, 9]], speech_tokens=[[5], [7]]), index=[0, 1])
    got = lm_agreement(a, b)
    assert got == dict(lm_tokens_equal_seconds="1/2", lm_token_agreement=4 / 6, lm_first_divergence_second=1)


@pytest.mark.cuda
def test_captured_decode_step_replays_what_it_runs_eagerly():
    """On a GPU: the captured step gives the bits the same static-cache step gives eagerly, and the
    duplex harness replays it (no capture error, no eager step)."""
    m = build_models("tiny", "cuda", 0)
    ids = torch.randint(0, m.cfg.backbone.vocab, (1, 25), generator=torch.Generator().manual_seed(3)).cuda()
    eager = GraphDecoder(m.backbone, 128, 9, m.cache_kw, capture=False)
    graph = GraphDecoder(m.backbone, 128, 9, m.cache_kw, capture=True)
    e = _served(eager, m.backbone, 10, input_ids=ids)
    g = _served(graph, m.backbone, 10, input_ids=ids)
    assert graph.capture_error is None and graph.graph is not None and graph.replays == 9
    assert torch.equal(e[0], g[0]) and torch.equal(e[1], g[1])
    g2 = _served(graph, m.backbone, 10, input_ids=ids)  # a second call continues the context, replayed
    e2 = _served(eager, m.backbone, 10, input_ids=ids)
    assert torch.equal(e2[1], g2[1]) and graph.replays == 18
    # one token into the cache's last position still captures: each warm-up step writes where the step will
    last = GraphDecoder(m.backbone, 26, 1, capture=True)
    last.decode(last.first_token(last.prefill(input_ids=ids)[:, -1:]), 1)
    assert last.capture_error is None and last.replays == 1
    h = DuplexSecond("tiny", "B0", "cuda", 0, models=m, decode="graph")
    h.run(3, warmup=1)
    for d in h.decoders.values():
        assert d.capture_error is None and d.eager_steps == 0 and d.replays > 0


@pytest.mark.parametrize("call, says", [
    (lambda d, v: d.prefill(input_ids=torch.full((1, 3), v)), "token id"),
    (lambda d, v: d.prefill(input_ids=torch.tensor([[0, -1]])), "token id -1"),
    (lambda d, v: d.prefill(input_ids=torch.zeros(1, 0, dtype=torch.long)), "no positions"),
    (lambda d, v: d.prefill(input_ids=torch.zeros(2, 3, dtype=torch.long)), "one sequence"),
    (lambda d, v: d.prefill(input_ids=torch.zeros(3, dtype=torch.long)), "(1, T) integer token ids"),
    (lambda d, v: d.prefill(input_ids=torch.zeros(1, 3)), "(1, T) integer token ids"),
    (lambda d, v: d.prefill(input_ids=[[1, 2]]), "must be a tensor"),
    (lambda d, v: d.prefill(), "exactly one of input_ids or inputs_embeds"),
    (lambda d, v: d.prefill(input_ids=torch.zeros(1, 2, dtype=torch.long), inputs_embeds=torch.zeros(1, 2, 8)),
     "exactly one"),
    (lambda d, v: d.prefill(inputs_embeds=torch.zeros(1, 2, 3)), "embeddings"),
    (lambda d, v: d.prefill(inputs_embeds=torch.zeros(2, 2, d.hidden.shape[-1])), "one sequence"),
    (lambda d, v: d.decode(torch.zeros(1, 1, dtype=torch.long), 1.5), "n = 1.5 is not an integer"),
    (lambda d, v: d.decode(torch.zeros(1, 1, dtype=torch.long), True), "n = True"),
    (lambda d, v: d.decode(torch.zeros(1, 1, dtype=torch.long), -1), "n = -1"),
    (lambda d, v: d.decode(torch.full((1, 1), v), 2), "token id"),
    (lambda d, v: d.decode(torch.zeros(1, 2, dtype=torch.long), 2), "one integer token id"),
    (lambda d, v: d.decode(torch.zeros(1, 1), 2), "one integer token id"),
    (lambda d, v: d.decode(3, 2), "one integer token id"),
    (lambda d, v: d.first_token(torch.zeros(2, 1, d.hidden.shape[-1])), "hidden must be (1, 1,"),
])
def test_graph_decoder_refuses_bad_input_and_keeps_its_state(models, call, says):
    """Each wrong call is refused with one line before anything moves; the next right calls give what they
    give alone (ids >= the vocabulary, fractional n, an empty prefill, a batch of two, ...)."""
    ids = torch.randint(0, models.cfg.backbone.vocab, (1, 6), generator=torch.Generator().manual_seed(5))

    def right(dec):
        return _served(dec, models.backbone, 4, input_ids=ids)

    alone = right(GraphDecoder(models.backbone, 32, 3, models.cache_kw))
    dec = GraphDecoder(models.backbone, 32, 3, models.cache_kw)
    dec.prefill(input_ids=ids[:, :2])
    dec.reset()
    before = (dec.length, dec.eager_steps, dec.replays, dec.ids.clone(), dec.pos.clone(), dec.slot.clone())
    with pytest.raises(ValueError, match=said(says)) as e:
        call(dec, dec.vocab)
    assert "\n" not in str(e.value)
    assert (dec.length, dec.eager_steps, dec.replays) == before[:3]
    assert all(torch.equal(a, b) for a, b in zip((dec.ids, dec.pos, dec.slot), before[3:]))
    got = right(dec)
    assert all(torch.equal(a, b) for a, b in zip(got, alone))


def said(text: str) -> str:
    import re

    return re.escape(text)


@pytest.mark.parametrize("max_len, steps", [(16, 2.5), (16.0, 2), (16, 0), (1, 2), (16, True), ("16", 2)])
def test_graph_decoder_sizes_are_whole_numbers(models, max_len, steps):
    with pytest.raises(ValueError, match="must be an integer >= 1 and max_len"):
        GraphDecoder(models.backbone, max_len, steps, models.cache_kw)
