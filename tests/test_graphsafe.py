"""GraphSafeISTFT against torch.istft: bitwise equality (torch.equal) over HiFT's frame counts, other
configurations, the full HiFT vocoder with the iSTFT swapped, and (on CUDA) inside captured graphs."""

from __future__ import annotations

import zlib

import pytest
import torch

from cadencelab.adapters.token2wav.build import build_token2wav
from cadencelab.adapters.token2wav.configs import TEACHING
from cadencelab.adapters.token2wav.envelopes import CacheEnvelope
from cadencelab.replay.graphsafe import GraphSafeISTFT

SEED = 7
MEL_FRAMES = range(50, 121)  # the mel lengths a streaming vocoder call sees (one chunk plus its caches)


@pytest.fixture(scope="module")
def hift():
    _, hift = build_token2wav(TEACHING, SEED, "cpu", envelope=CacheEnvelope(n_slots=1, max_frames=1))
    return hift


def hift_istft(hift, device) -> GraphSafeISTFT:
    """The vocoder's own iSTFT arguments (its ``_istft``): n_fft, hop, win_length = n_fft, its window."""
    p = hift.istft_params
    return GraphSafeISTFT(p["n_fft"], p["hop_len"], p["n_fft"], hift.stft_window.to(device))


def stft_frames(hift, mel_frames: int) -> int:
    """STFT frames HiFT hands its iSTFT for ``mel_frames`` mel frames (output samples / hop + 1)."""
    return int(mel_frames * hift.f0_upsamp.scale_factor) // hift.istft_params["hop_len"] + 1


def random_spec(gen, shape, dtype=torch.complex64, device="cpu"):
    return torch.randn(shape, generator=gen, dtype=dtype).to(device)


def hift_specs(hift, device):
    """One seeded vocoder-shaped spec (1, n_fft/2+1, frames) per mel length: exp magnitude, sine phase."""
    gen = torch.Generator().manual_seed(SEED)
    bins = hift.istft_params["n_fft"] // 2 + 1
    for m in MEL_FRAMES:
        shape = (1, bins, stft_frames(hift, m))
        magnitude = torch.randn(shape, generator=gen).exp().clip(max=1e2)
        phase = torch.randn(shape, generator=gen).sin()
        yield torch.complex(magnitude * phase.cos(), magnitude * phase.sin()).to(device)


# (n_fft, hop, win_length, window kind, center, normalized, two-sided input, length offset, 2-D input, double)
CASES = [
    (16, 4, 16, "hann", True, False, False, None, False, False),
    (16, 4, 16, "hann", True, True, False, None, True, False),
    (16, 4, 16, "hann", True, False, True, None, False, False),
    (16, 4, 16, "hamming", False, False, False, None, False, False),
    (16, 4, 12, "hamming", True, False, False, None, False, False),
    (16, 4, 16, "hann", True, False, False, -7, False, False),
    (16, 4, 16, "hann", True, False, False, 9, False, False),
    (31, 7, 25, "random", True, True, True, 3, True, False),
    (31, 7, 31, "random", False, False, False, -5, False, True),
    (64, 16, 64, "hann", True, False, False, None, False, True),
    (64, 16, 48, "rect", True, True, True, 20, True, False),
    (8, 2, 8, "hann", True, False, False, None, True, False),
    (8, 8, 8, "rect", False, False, False, None, False, False),
]


def make_window(kind, win_length, dtype, gen):
    if kind == "hann":
        return torch.hann_window(win_length, dtype=dtype)
    if kind == "hamming":
        return torch.hamming_window(win_length, dtype=dtype)
    if kind == "random":
        return torch.rand(win_length, generator=gen, dtype=dtype) + 0.1
    return None


def run_case(case, device, frames_list=(1, 2, 5, 33)):
    """Compare GraphSafeISTFT with torch.istft for one configuration over several frame counts."""
    n_fft, hop, win, kind, center, normalized, two_sided, length_offset, two_d, double = case
    gen = torch.Generator().manual_seed(zlib.crc32(repr(case).encode()))
    real, cplx = (torch.float64, torch.complex128) if double else (torch.float32, torch.complex64)
    window = make_window(kind, win, real, gen)
    window = None if window is None else window.to(device)
    g = GraphSafeISTFT(n_fft, hop, win, window, center=center, normalized=normalized, dtype=real, device=device)
    checked = 0
    for frames in frames_list:
        shape = ((n_fft if two_sided else n_fft // 2 + 1), frames)
        spec = random_spec(gen, shape if two_d else (3, *shape), cplx, device)
        length = None if length_offset is None else max(1, hop * (frames - 1) + length_offset)
        kwargs = dict(n_fft=n_fft, hop_length=hop, win_length=win, window=window, center=center,
                      normalized=normalized, onesided=not two_sided, length=length)
        try:
            want = torch.istft(spec, **kwargs)
        except RuntimeError as exc:  # NOLA fails or nothing is left: admission must refuse the same class
            nola = "window overlap add min" in str(exc)
            with pytest.raises(RuntimeError if nola else ValueError, match="NOLA" if nola else "no samples"):
                g.admit(frames, length)
            continue
        got = g(spec, length, onesided=not two_sided)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want), (case, frames)
        assert torch.equal(g.drop_in(spec, **kwargs), want)
        checked += 1
    return checked


# ---------------------------------------------------------------------------------------
# CPU
# ---------------------------------------------------------------------------------------


def test_hift_frame_counts_bitwise(hift):
    g = hift_istft(hift, "cpu")
    p = hift.istft_params
    for spec in hift_specs(hift, "cpu"):
        want = torch.istft(spec, p["n_fft"], p["hop_len"], p["n_fft"], window=hift.stft_window)
        assert torch.equal(g(spec), want)
    assert [n for n, _ in g.admitted] == [stft_frames(hift, m) for m in MEL_FRAMES]


@pytest.mark.filterwarnings("ignore:The length of signal is shorter than the length parameter")
@pytest.mark.filterwarnings("ignore:A window was not provided")
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_configurations_bitwise(case):
    assert run_case(case, "cpu") >= 1


def test_random_configurations_bitwise():
    gen = torch.Generator().manual_seed(SEED)
    checked = 0
    for _ in range(12):
        n_fft = int(torch.randint(4, 65, (), generator=gen))
        win = int(torch.randint(n_fft // 2 + 1, n_fft + 1, (), generator=gen))
        hop = int(torch.randint(1, win // 2 + 1, (), generator=gen))
        flags = [bool(b) for b in torch.randint(0, 2, (5,), generator=gen)]
        case = (n_fft, hop, win, "random", flags[0], flags[1], flags[2], None if flags[3] else 3, flags[4], False)
        checked += run_case(case, "cpu", frames_list=(int(torch.randint(2, 200, (), generator=gen)),))
    assert checked >= 6  # the rest were refused by both (a zero-padded window end left uncovered)


def test_complex_output_bitwise():
    gen = torch.Generator().manual_seed(SEED)
    window = torch.randn(16, generator=gen, dtype=torch.complex64)
    g = GraphSafeISTFT(16, 4, window=window, return_complex=True)
    for frames in (3, 40):
        spec = random_spec(gen, (2, 16, frames))
        want = torch.istft(spec, 16, 4, window=window, onesided=False, return_complex=True)
        assert torch.equal(g(spec, onesided=False), want)


def test_conjugate_view_input_bitwise():
    gen = torch.Generator().manual_seed(SEED)
    window = torch.hann_window(16)
    spec = random_spec(gen, (9, 20)).conj()
    assert spec.is_conj()
    assert torch.equal(GraphSafeISTFT(16, 4, window=window)(spec), torch.istft(spec, 16, 4, window=window))


def test_nola_failure_is_refused_at_admission():
    window = torch.hann_window(16)  # periodic Hann starts at 0: without centring the first sample has no envelope
    with pytest.raises(RuntimeError, match="window overlap add min"):
        torch.istft(torch.ones(9, 5, dtype=torch.complex64), 16, 4, window=window, center=False)
    with pytest.raises(RuntimeError, match=r"n_frames=5, length=None falls to 0 .*NOLA fails"):
        GraphSafeISTFT(16, 4, window=window, center=False, frames=[5])


def test_fails_closed(hift):
    g = hift_istft(hift, "cpu")
    spec = next(hift_specs(hift, "cpu"))
    with pytest.raises(KeyError, match=f"n_frames={spec.shape[-1]}, length=None"):
        g.istft_no_sync(spec)
    g.admit(spec.shape[-1])
    assert g.admitted == [(spec.shape[-1], None)]
    g.istft_no_sync(spec)
    p = hift.istft_params
    with pytest.raises(ValueError, match="declared"):
        g.drop_in(spec, p["n_fft"], p["hop_len"] + 1, p["n_fft"], window=g.window)
    with pytest.raises(ValueError, match="window other than the declared one"):
        g.drop_in(spec, p["n_fft"], p["hop_len"], p["n_fft"], window=g.window.clone())
    with pytest.raises(ValueError, match="frequency bins"):
        g.istft_no_sync(spec[:, :-1])
    with pytest.raises(ValueError, match="complex"):
        g.istft_no_sync(spec.real)
    with pytest.raises(ValueError, match="rectangular window declared as torch.float32"):
        GraphSafeISTFT(16, 4)(spec.to(torch.complex128))
    with pytest.raises(ValueError, match="win_length=17"):
        GraphSafeISTFT(16, 4, 17)


def vocoder_bitwise(hift, device, mel_lengths, monkeypatch):
    """Full HiFT forward, stock vs torch.istft swapped for GraphSafeISTFT.drop_in, same seed: torch.equal."""
    g = hift_istft(hift, device)
    hift.stft_window = g.window  # the declared tensor; `.to(device)` in the vendor returns it unchanged
    gen = torch.Generator().manual_seed(SEED)
    bins = TEACHING.output_size
    runs = []
    for mel_len in mel_lengths:
        mel = torch.randn(1, bins, mel_len, generator=gen).to(device)
        cache = torch.randn(1, 1, mel_len * int(hift.f0_upsamp.scale_factor) // 4, generator=gen).to(device)
        runs.append((mel, cache))
    stock = []
    for i, (mel, cache) in enumerate(runs):
        torch.manual_seed(SEED + i)
        stock.append(hift(mel, cache))
    with monkeypatch.context() as m:
        m.setattr(torch, "istft", g.drop_in)
        for i, (mel, cache) in enumerate(runs):
            torch.manual_seed(SEED + i)
            speech, source = hift(mel, cache)
            assert torch.equal(speech, stock[i][0]) and torch.equal(source, stock[i][1]), mel.shape
    assert len(g.admitted) == len(set(mel_lengths))


def test_hift_vocoder_bitwise(hift, monkeypatch):
    vocoder_bitwise(hift, "cpu", (8, 9, 8), monkeypatch)


# ---------------------------------------------------------------------------------------
# CUDA: eager with sync errors on, and inside captured graphs
# ---------------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.filterwarnings("ignore:Synchronization debug mode is a prototype feature")
@pytest.mark.filterwarnings("ignore:The length of signal is shorter than the length parameter")
@pytest.mark.filterwarnings("ignore:A window was not provided")
def test_cuda_bitwise_no_sync_and_captured(hift, monkeypatch):
    device = torch.device("cuda")
    g = hift_istft(hift, device)
    p = hift.istft_params
    specs = list(hift_specs(hift, device))
    for spec in specs:
        g.admit(spec.shape[-1])
    pool, graphs = torch.cuda.graph_pool_handle(), []
    side = torch.cuda.Stream()
    for spec in specs:
        static = spec.clone()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                g.istft_no_sync(static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = g.istft_no_sync(static)
        graphs.append((static, graph, out))
    gen = torch.Generator().manual_seed(SEED + 1)
    for (static, graph, out), spec in zip(graphs, specs):
        fresh = spec * random_spec(gen, spec.shape, device=device)  # new values for the replay
        want = torch.istft(fresh, p["n_fft"], p["hop_len"], p["n_fft"], window=g.window)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            eager = g.istft_no_sync(fresh)
            static.copy_(fresh)
            graph.replay()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert torch.equal(eager, want) and torch.equal(out, want), fresh.shape
    torch.cuda.set_sync_debug_mode("error")  # the control: the stock op does sync, and is caught
    try:
        with pytest.raises(RuntimeError, match="synchronizing"):
            torch.istft(fresh, p["n_fft"], p["hop_len"], p["n_fft"], window=g.window)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    for case in CASES:
        assert run_case(case, device) >= 1
    _, hift_cuda = build_token2wav(TEACHING, SEED, device, envelope=CacheEnvelope(n_slots=1, max_frames=1))
    vocoder_bitwise(hift_cuda, device, tuple(MEL_FRAMES)[::10], monkeypatch)


@pytest.mark.cuda
def test_cuda_whole_vocoder_in_one_graph(monkeypatch):
    """The whole HiFT forward (device-resident constants, iSTFT swapped) captured as one graph replays
    bit-identically to the stock eager vocoder under the same seed."""
    from cadencelab.adapters.token2wav.runtime import make_constants_device_resident

    device = torch.device("cuda")
    envelope = CacheEnvelope(n_slots=1, max_frames=1)
    _, stock = build_token2wav(TEACHING, SEED, device, envelope=envelope)
    flow, hift = build_token2wav(TEACHING, SEED, device, envelope=envelope)
    make_constants_device_resident(flow, hift, device)
    g = hift_istft(hift, device)
    hift.stft_window = g.window
    gen = torch.Generator().manual_seed(SEED)
    mel_len = MEL_FRAMES[8]
    mel = torch.randn(1, TEACHING.output_size, mel_len, generator=gen).to(device)
    cache = torch.randn(1, 1, mel_len * int(hift.f0_upsamp.scale_factor) // 4, generator=gen).to(device)
    g.admit(stft_frames(hift, mel_len))
    with monkeypatch.context() as m:
        m.setattr(torch, "istft", g.drop_in)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                hift(mel, cache)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            speech, source = hift(mel, cache)
    for seed in range(3):
        torch.manual_seed(seed)
        want_speech, want_source = stock(mel, cache)
        torch.manual_seed(seed)
        graph.replay()
        assert torch.equal(speech, want_speech) and torch.equal(source, want_source), seed
