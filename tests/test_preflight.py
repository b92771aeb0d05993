"""The capture-safety preflight: each detector on a toy step, then the stock Token2wav and Mimi hazards.

CPU runs emulate the CUDA target (device="cuda" with CPU tensors); the CUDA tests run the same on a GPU
with torch.cuda.set_sync_debug_mode.
"""

from __future__ import annotations

import inspect
import sys

import pytest
import torch

from cadencelab.replay import Preflight, preflight
from cadencelab.replay.hazards import COLUMNS, KINDS


def _line(path: str, text: str) -> int:
    """The 1-based line of ``path`` holding ``text`` (exactly one)."""
    hits = [i for i, s in enumerate(open(path).read().splitlines(), 1) if text in s]
    assert len(hits) == 1, (path, text, hits)
    return hits[0]


HERE = __file__


class Toy(torch.nn.Module):
    """One hazard per marked line; ``state`` is updated in place, ``total`` rebound, ``seen`` grows."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("state", torch.zeros(4))
        self.total = torch.zeros(4)
        self.seen: dict = {}
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = self.lin(x) * torch.arange(4).to(x)  # <const>
        y = y + torch.tensor([float(self.calls)]).to(x)  # <input>
        if y.sum() > 0:  # <sync>
            y = y * 2
        kept = y[y > 0]  # <shape>
        noise = torch.rand(4)  # <host-rng>
        y = y + torch.randn_like(y)  # <device-rng>
        self.state.copy_(y.detach().sum(0))  # in place: no row
        self.total = self.total + y.detach().sum(0)  # <rebound>
        self.seen[self.calls] = kept.detach() * 1  # <pool>
        return y.cpu(), noise  # <d2h>


def _toy_lines() -> dict[str, int]:
    src = inspect.getsource(Toy)
    start = inspect.getsourcelines(Toy)[1]
    return {s.split("# <")[1].split(">")[0]: start + i for i, s in enumerate(src.splitlines()) if "# <" in s}


@pytest.fixture(scope="module")
def toy_report():
    torch.manual_seed(0)
    toy = Toy()
    return preflight(toy, torch.randn(2, 4), device="cuda", calls=2), toy


def _rows(rep, kind, file=HERE, line=None):
    r = rep[(rep["kind"] == kind) & (rep["file"] == file)]
    return r if line is None else r[r["line"] == line]


def test_toy_each_detector_at_its_line(toy_report):
    rep, toy = toy_report
    lines = _toy_lines()
    assert isinstance(rep, Preflight) and list(rep.columns) == COLUMNS
    expect = {"const": "host_constant", "input": "host_input", "sync": "host_sync", "shape": "data_dependent_shape",
              "host-rng": "host_rng", "device-rng": "device_rng", "rebound": "rebound", "pool": "pool_allocation",
              "d2h": "device_to_host"}
    for marker, kind in expect.items():
        r = _rows(rep, kind, line=lines[marker])
        assert len(r) == 1, (marker, kind, rep[["kind", "where", "op"]].to_string())
        assert (r["calls"] == 2).all() and (r["fix"] == KINDS[kind].fix).all()
        assert r["source"].iloc[0].endswith(f"# <{marker}>")  # the line's code is shown
    assert "built at" in _rows(rep, "host_constant", line=lines["const"])["detail"].iloc[0]
    assert "torch.arange(4)" in _rows(rep, "host_constant", line=lines["const"])["detail"].iloc[0]
    assert _rows(rep, "rebound", line=lines["rebound"])["op"].tolist() == ["Toy.total"]
    assert _rows(rep, "pool_allocation", line=lines["pool"])["count"].iloc[0] == 2  # a new dict entry per call
    assert not rep["op"].str.contains("Toy.state").any()  # written in place
    assert set(rep.loc[rep["kind"] == "device_rng", "severity"]) == {"info"}
    assert toy.calls == 2


def test_toy_summary_and_clean_step():
    class Clean(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("acc", torch.zeros(3))

        def forward(self, x):
            self.acc.add_(x)
            return self.acc * 2

    rep = preflight(Clean(), torch.ones(3), device="cuda")
    assert rep.empty and rep.summary() == "preflight Clean for cuda (emulated on cpu, 2 calls): no hazards"
    line = preflight(Toy(), torch.randn(2, 4), device="cuda", calls=3).summary()
    assert line.startswith("preflight Toy for cuda (emulated on cpu, 3 calls): ") and "host_constant 1" in line
    assert "rebound 1" in line and "info row" in line


def test_bad_arguments_name_what_was_typed():
    with pytest.raises(ValueError, match="device='cpu'"):
        preflight(Toy(), torch.randn(2, 4), device="cpu")
    with pytest.raises(ValueError, match="calls=1"):
        preflight(Toy(), torch.randn(2, 4), calls=1)


# ---------------------------------------------------------------------------------------
# the stock Token2wav: three host constants and iSTFT's host check
# ---------------------------------------------------------------------------------------

from sizes import CPU_STEPS as STEPS  # noqa: E402  (the smallest prompt and solver steps the batched tests use)
from sizes import PROMPT_TOKENS  # noqa: E402

CHUNK = [4218] * 3 + list(range(100, 125))


def _token2wav(fixed: bool, device="cpu"):
    from cadencelab.adapters.token2wav import TEACHING, StockToken2wav, build_token2wav, make_prompt
    from cadencelab.adapters.token2wav.runtime import make_constants_device_resident

    flow, hift = build_token2wav(TEACHING, 0, device=device)
    if fixed:
        make_constants_device_resident(flow, hift, device)
    stock = StockToken2wav(flow, hift, device, n_timesteps=STEPS)
    stock.set_stream_cache(make_prompt(TEACHING, 40, device, n_tokens=PROMPT_TOKENS))
    return stock


def _vendor_sites(stock) -> dict[str, tuple[str, set]]:
    """The vendor lines of the three host constants and of the iSTFT call, read from the vendor source."""
    dit = inspect.getsourcefile(type(stock.flow.decoder.estimator.t_embedder))
    sine = inspect.getsourcefile(type(stock.hift.m_source.l_sin_gen))
    hift = inspect.getsourcefile(type(stock.hift))
    arange = _line(dit, "torch.arange(start=0, end=half)")
    istft = _line(hift, "inverse_transform = torch.istft(")
    return {
        "timestep_freqs": (dit, {arange - 1, arange, arange + 1}),  # `freqs = torch.exp(` .. `).to(t)`
        "harmonic_multiplier": (sine, {_line(sine, "torch.FloatTensor([[range(1, self.harmonic_num + 2)]])")}),
        "stft_window": (hift, {_line(hift, "window=self.stft_window.to(x.device)"),
                               _line(hift, "window=self.stft_window.to(magnitude.device)")}),
        "istft": (hift, {istft, istft + 1}),
    }


def _check_stock(rep, sites):
    const = rep[rep["kind"] == "host_constant"]
    for name in ("timestep_freqs", "harmonic_multiplier", "stft_window"):
        file, lines = sites[name]
        hit = const[(const["file"] == file) & const["line"].isin(lines)]
        assert len(hit) >= 1, (name, rep[["kind", "where", "op"]].to_string())
        assert (hit["calls"] == 2).all()
    file, lines = sites["stft_window"]
    assert set(const.loc[const["file"] == file, "line"]) == lines  # both the STFT and the iSTFT copies
    dit, lines = sites["timestep_freqs"]
    arange = min(lines) + 1
    assert f"{dit.split('site-packages/')[-1]}:{arange}" in const.loc[const["file"] == dit, "detail"].iloc[0]
    file, lines = sites["istft"]
    sync = rep[(rep["kind"] == "host_sync") & (rep["file"] == file) & rep["line"].isin(lines)]
    assert len(sync) == 1 and "torch.istft" in sync["op"].iloc[0], rep[["kind", "where", "op"]].to_string()
    assert sync["op"].iloc[0].split()[0] in ("aten.equal", "aten.is_nonzero", "aten._local_scalar_dense")
    assert "torch.istft(" in sync["source"].iloc[0]


def test_stock_token2wav_host_constants_and_istft_check():
    pytest.importorskip("einops")
    stock = _token2wav(fixed=False)
    rep = preflight(stock.stream, CHUNK, device="cuda", modules=[stock.flow, stock.hift])
    assert rep.attrs["emulated"]
    _check_stock(rep, _vendor_sites(stock))
    # the stock loop's own state handling shows up too: caches rebound by torch.cat every chunk
    rebound = rep[rep["kind"] == "rebound"]["op"]
    assert rebound.str.contains("conformer_att_cache").any() and rebound.str.contains("hift_cache_dict").any()


def test_runtime_constants_fix_comes_out_clean():
    pytest.importorskip("einops")
    stock = _token2wav(fixed=True)
    rep = preflight(stock.stream, CHUNK, device="cuda", modules=[stock.flow, stock.hift])
    sites = _vendor_sites(stock)
    const = rep[rep["kind"].isin(["host_constant", "host_input"])]
    for name in ("timestep_freqs", "harmonic_multiplier", "stft_window"):
        file, lines = sites[name]
        assert not (const["file"] == file).any(), (name, const[["where", "op"]].to_string())
    file, lines = sites["istft"]  # the iSTFT is untouched by the fix: its host check is still there
    assert ((rep["kind"] == "host_sync") & (rep["file"] == file) & rep["line"].isin(lines)).sum() == 1


# ---------------------------------------------------------------------------------------
# Mimi: the one state tensor rebound by torch.where
# ---------------------------------------------------------------------------------------


def _mimi_check(rep):
    conv = sys.modules["moshi.modules.conv"].__file__
    rebound = rep[rep["kind"] == "rebound"]
    assert rebound["op"].tolist() == ["MimiModel.downsample.conv._streaming_state.first"], rep.to_string()
    r = rebound.iloc[0]
    assert r["file"] == conv and r["line"] == _line(conv, "state.first = torch.where(")
    assert "torch.where" in r["source"] and r["calls"] == 2
    assert "allocated inside the step" in r["detail"]


def test_mimi_finds_the_rebound_flag():
    from cadencelab.adapters import mimi as M

    pytest.importorskip("moshi", reason=f"moshi not installed: {M.INSTALL_HINT}")
    mimi = M.build_mimi(0)
    with M.MimiStream(mimi, "eager") as s:
        rep = preflight(s.step, M.pcm_stream(1, seed=0), device="cuda", modules=[mimi])
    _mimi_check(rep)
    assert rep.hazards()["kind"].tolist() == ["rebound"]  # everything else updates in place


# ---------------------------------------------------------------------------------------
# on a GPU: real placement and the CUDA sync debug mode
# ---------------------------------------------------------------------------------------


@pytest.mark.cuda
def test_stock_token2wav_on_cuda():
    pytest.importorskip("einops")
    stock = _token2wav(fixed=False, device="cuda")
    rep = preflight(stock.stream, CHUNK, device="cuda", modules=[stock.flow, stock.hift])
    assert not rep.attrs["emulated"] and rep.attrs["ran_on"].startswith("cuda")
    _check_stock(rep, _vendor_sites(stock))
    assert (rep["kind"] == "device_to_host").any()  # the PCM's .cpu()
    fixed = _token2wav(fixed=True, device="cuda")
    rep = preflight(fixed.stream, CHUNK, device="cuda", modules=[fixed.flow, fixed.hift])
    sites = _vendor_sites(fixed)
    for name in ("timestep_freqs", "harmonic_multiplier", "stft_window"):
        assert not ((rep["kind"] == "host_constant") & (rep["file"] == sites[name][0])).any(), name


@pytest.mark.cuda
def test_toy_and_mimi_on_cuda():
    toy = Toy().cuda()
    toy.total = toy.total.cuda()  # a plain attribute: .cuda() moves only parameters and buffers
    rep = preflight(toy, torch.randn(2, 4, device="cuda"), device="cuda")
    lines = _toy_lines()
    for marker, kind in {"const": "host_constant", "input": "host_input", "sync": "host_sync",
                         "host-rng": "host_rng", "device-rng": "device_rng", "rebound": "rebound",
                         "d2h": "device_to_host"}.items():
        assert len(_rows(rep, kind, line=lines[marker])) == 1, (marker, rep[["kind", "where", "op"]].to_string())
    assert len(_rows(rep, "data_dependent_shape", line=lines["shape"])) >= 1
    from cadencelab.adapters import mimi as M

    pytest.importorskip("moshi", reason=f"moshi not installed: {M.INSTALL_HINT}")
    mimi = M.build_mimi(0, device="cuda")
    with M.MimiStream(mimi, "eager") as s:
        rep = preflight(s.step, M.pcm_stream(1, seed=0).cuda(), device="cuda", modules=[mimi])
    _mimi_check(rep)


@pytest.mark.cuda
def test_setting_the_sync_debug_mode_is_not_a_sync_of_the_step(monkeypatch):
    """torch 2.11 warns (once per process, naming synchronizing) when the sync-debug mode is first set: the
    preflight sets it outside its watch, so a clean step's first preflight in a process has no hazard. Here the
    setter warns on every call, the harshest form."""
    import warnings

    real = torch.cuda.set_sync_debug_mode

    def noisy(mode):
        warnings.warn("synchronizing operations will now be reported (sync debug mode set)")
        real(mode)

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", noisy)
    rep = preflight(lambda x: x * 2 + 1, torch.ones(8, device="cuda"), device="cuda")
    assert not rep.attrs["emulated"] and rep.empty, rep[["kind", "op", "where"]].to_string()
    rep = preflight(lambda x: x.sum().item(), torch.ones(8, device="cuda"), device="cuda")
    assert "host_sync" in rep["kind"].tolist()  # a real sync is still seen


def test_graphsafe_istft_has_no_host_check():
    from cadencelab.replay import GraphSafeISTFT

    window = torch.hann_window(16)
    spec = torch.stft(torch.randn(64, generator=torch.Generator().manual_seed(0)), 16, 4, 16, window=window,
                      return_complex=True)
    stock = preflight(lambda s: torch.istft(s, 16, 4, 16, window=window), spec, device="cuda")
    assert stock.hazards()["kind"].tolist() == ["host_sync"] and "torch.istft" in stock["op"].iloc[0]
    safe = GraphSafeISTFT(16, 4, 16, window, frames=[spec.shape[-1]])
    assert preflight(safe.istft_no_sync, spec, device="cuda").empty
