"""Token2wav on the adapter kit (:mod:`cadencelab.adapters.token2wav.kit`): the kit model's stock step is the
vendor-path stock loop bit for bit, every kit arm equals it, the estimator cache is carried in the solver's own
buffer, and the factorial entry runs on it (CPU: the teaching sizes; CUDA: the lead's H200 run)."""

from __future__ import annotations

import pytest
import torch

from cadencelab.adapters.kit import ARMS, factorial, run_stock
from cadencelab.contract import class_labels
from cadencelab.adapters.token2wav import TEACHING, StockToken2wav
from cadencelab.adapters.token2wav import kit as K


@pytest.fixture(scope="module")
def model():
    return K.kit_model(TEACHING, 0, turns=1, chunks=3)  # the estimator cache walks 302 -> 352 -> 402: every class


@pytest.fixture(scope="module")
def stock(model):
    """The kit model's stock step over its traffic: outputs, and the label of every call."""
    return run_stock(model)


def small_on(device="cpu", arm=None):
    """``bench kit --model test_token2wav_kit:small_on``: one turn of one steady and one final call."""
    return K.kit_model(TEACHING, 0, device=device, arm=arm, turns=1, chunks=1)


def _stock_loop(m):
    """The same traffic through StockToken2wav (the vendor's loop, step for step), seeded at each turn start."""
    flow, hift = m.modules
    stock, outs = StockToken2wav(flow, hift, m.device, n_timesteps=10), []
    for t, turn in enumerate(m.traffic.turns):
        torch.manual_seed(0)
        stock.set_stream_cache(m.traffic.prompt(t))
        for i, x in enumerate(turn):
            wav = stock.stream(x[0].tolist(), last_chunk=i == len(turn) - 1, return_waveform=True)
            outs.append(torch.from_numpy(wav))
    return outs


def test_the_stock_step_is_the_vendor_path_stock_loop(model, stock):
    ref, observed = stock
    loop = _stock_loop(model)
    assert [x.shape[1] for x in model.traffic.turns[0]] == [28, 28, 28, 15]  # 25 tokens + 3 of lookahead, the rest
    assert len(ref) == len(loop) == model.traffic.calls and all(torch.equal(a, b) for a, b in zip(ref, loop))
    steady = set(observed.loc[observed["kind"] == "steady", "label"])
    assert steady == class_labels(model.decl, K.OPERATOR, "steady") == {(302, 302, 50), (352, 352, 50), (402, 402, 50)}


def test_every_kit_arm_equals_the_stock_step():
    m = small_on()
    df = factorial(m, blocks=1, warmup=0, backend="eager")
    assert df["bit_exact"].all() and set(df["arm"]) == set(ARMS), df
    cert = df.attrs["certificate"].set_index("clause")["passed"]
    assert cert[["preflight: no capture hazard in the step", "declared audit agrees on every retention",
                 "bit-exact with the model's own loop", "reference: the model's own loop",
                 "the declared state's stock step equals the model's own loop", "carries at one address"]].all(), cert
    assert df.attrs["reference"] == "the model's own loop"  # the vendor's StockToken2wav, not the declaration
    assert not cert["admitted calls replayed"]  # on a CPU HiFT draws host randomness: no class is admitted
    assert "differential audit agrees on every retention" not in cert.index  # the stock step writes adopted buffers
    assert (df.set_index("arm").loc[["S", "SR", "SRc"], "state_bytes"] > 0).all()


def test_the_estimator_cache_is_carried_in_the_solvers_buffer(model):
    flow, _ = model.modules
    rt = model.runtime("S", backend="eager")
    assert rt.carries["estimator_att_cache"].buffer is flow.decoder.att_cache_buffer
    assert rt.carries["estimator_cnn_cache"].buffer is flow.decoder.cnn_cache_buffer
    run = rt.run(model.traffic)
    assert (run.table.filter(like="ptr_").nunique() == 1).all()
    p = model.decl.params
    assert run.table["ext_estimator_att_cache"].tolist() == [p["f_prompt"] + 50, p["f_prompt"] + 100] + \
        [p["f_prompt"] + p["f_retained"]] * 2


def test_a_stock_arm_is_built_with_the_vendors_buffers(stock):
    m = small_on(arm="B0")
    dec = m.modules[0].decoder
    assert m.adopt is None and tuple(dec.att_cache_buffer.shape[:1]) == (16,) and dec.att_cache_buffer.shape[4] == 1000
    assert torch.equal(m.reference_outputs()[0][0], stock[0][0])  # the same first call (the same tokens) on the stock buffers


def test_the_bench_entry_runs_token2wav(tmp_path, capsys):
    import json

    from cadencelab.bench.__main__ import main
    from cadencelab.bench.kit import MODELS, load_model

    rc = main(["kit", "--model", "test_token2wav_kit:small_on", "--device", "cpu", "--inline", "--min-processes", "1",
               "--max-processes", "1", "--blocks", "1", "--cores", "none", "--arms", "B0,SRc", "--out", str(tmp_path)])
    assert rc == 1  # one steady call of one turn, and host randomness on a CPU: not certified (no class replays)
    assert "admitted calls replayed): the figures are recorded with certified: false" in capsys.readouterr().err
    rec = json.loads((tmp_path / "kit_factorial.json").read_text())
    assert rec["summary"]["model"] == "token2wav" and all(a["bit_exact"] for a in rec["arms"])
    assert rec["summary"]["certified"] is False
    b0 = load_model("test_token2wav_kit:small_on", "cpu", "B0")  # a B0 process is given its arm
    assert b0.adopt is None and b0.modules[0].decoder.att_cache_buffer.shape[4] == 1000
    assert set(MODELS) >= {"token2wav", "token2wav-teaching"}


@pytest.mark.cuda
def test_the_kit_factorial_on_token2wav_with_cuda_graphs():
    """Device randomness is admitted on CUDA: every arm replays its classes and stays bit-exact."""
    m = K.kit_model(TEACHING, 0, device="cuda")
    df = factorial(m, blocks=2, warmup=1, backend="cuda")
    assert df["bit_exact"].all() and df.attrs["certified"], (df, df.attrs["certificate"])
    rep = df.set_index("arm")
    assert (rep.loc[["R", "Rc", "SR", "SRc"], "replayed"] > 0).all() and (df["peak_mem_bytes"] >= 0).all()


@pytest.mark.cuda
def test_the_bench_entry_on_token2wav_with_cuda_graphs(tmp_path, capsys):
    """``bench kit --model token2wav-teaching`` on a GPU: fresh processes per arm, every arm bit-exact, SRc replayed
    (the lead's full run is ``--model token2wav``, the real sizes)."""
    import json

    from cadencelab.bench.__main__ import main

    rc = main(["kit", "--model", "token2wav-teaching", "--device", "cuda", "--min-processes", "1", "--max-processes",
               "1", "--blocks", "2", "--arms", "B0,S,SRc,B0_repeat", "--out", str(tmp_path)])
    assert rc == 0, capsys.readouterr().err
    rec = json.loads((tmp_path / "kit_factorial.json").read_text())
    arms = {a["arm"]: a for a in rec["arms"]}
    assert rec["summary"]["certified"] and all(a["bit_exact"] for a in arms.values())
    assert arms["SRc"]["replayed"] > 0 and arms["B0"]["replayed"] == 0
