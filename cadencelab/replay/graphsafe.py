"""Capture-safe stand-ins for stock ops whose only obstacle to CUDA-graph capture is a host-side check.

``torch.istft`` checks the window envelope on the host (NOLA: its smallest magnitude must reach 1e-11),
a device-to-host sync that makes any graph containing it uncapturable. For a declared window that
envelope depends only on the frame count (and the requested length), so :class:`GraphSafeISTFT` checks
it once per class at admission, keeps the envelope on the device, and its :meth:`istft_no_sync` runs the
remaining device ops in the order and dtypes ``torch.istft`` runs them, so the output is bit-identical
(tests/test_graphsafe.py compares with ``torch.equal``).
"""

from __future__ import annotations

from typing import Iterable

import torch
import torch.nn.functional as F

NOLA_FLOOR = 1e-11
"""The smallest window-envelope magnitude ``torch.istft`` accepts."""


def _overlap_add(frames: torch.Tensor, signal_len: int, n_fft: int, hop: int) -> torch.Tensor:
    """Sum (batch, n_frames, n_fft) frames placed every ``hop`` samples -> (batch, signal_len)."""
    return torch.ops.aten.unfold_backward(frames, [frames.size(0), signal_len], 1, n_fft, hop)


class GraphSafeISTFT:
    """``torch.istft`` for one declared window and configuration, with the NOLA check done at admission.

    n_fft, hop_length, win_length, window, center, normalized, return_complex: as in ``torch.istft``
    (defaults too). ``window=None`` means a rectangular window of ``dtype`` (torch builds it in the
    input's real dtype; a call with another dtype is refused). The window is a declared constant: it is
    held by reference and its values are not re-read by later checks. ``frames``: frame counts admitted
    now (each with ``length=None``); others are admitted by :meth:`admit` or on first sight by
    ``__call__``. An admitted class is ``(n_frames, length)``.
    """

    def __init__(self, n_fft: int, hop_length: int | None = None, win_length: int | None = None,
                 window: torch.Tensor | None = None, *, center: bool = True, normalized: bool = False,
                 return_complex: bool = False, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None, frames: Iterable[int] = ()):
        self.n_fft, self.center, self.normalized, self.return_complex = n_fft, center, normalized, return_complex
        self.hop = n_fft >> 2 if hop_length is None else hop_length
        self.win_length = n_fft if win_length is None else win_length
        if not 0 < self.win_length <= n_fft:
            raise ValueError(f"GraphSafeISTFT: need 0 < win_length <= n_fft, got win_length={self.win_length}, "
                             f"n_fft={n_fft}")
        if not 0 < self.hop <= self.win_length:
            raise ValueError(f"GraphSafeISTFT: need 0 < hop_length <= win_length, got hop_length={self.hop}, "
                             f"win_length={self.win_length}")
        self.rectangular = window is None
        if window is None:
            window = torch.ones(self.win_length, dtype=dtype, device=device)
        if window.dim() != 1 or window.size(0) != self.win_length:
            raise ValueError(f"GraphSafeISTFT: window must be 1-D of length win_length={self.win_length}, "
                             f"got shape {tuple(window.shape)}")
        if window.is_complex() and not return_complex:
            raise ValueError("GraphSafeISTFT: a complex window needs return_complex=True (as in torch.istft)")
        self.window = window
        left = (n_fft - self.win_length) // 2
        pad = (left, n_fft - self.win_length - left)
        self._frame_window = window if self.win_length == n_fft else F.pad(window, pad)  # centred in n_fft
        self._classes: dict[tuple[int, int | None], tuple[torch.Tensor, int, int, int]] = {}
        for n in frames:
            self.admit(n)

    @property
    def admitted(self) -> list[tuple[int, int | None]]:
        """The admitted classes, ``(n_frames, length)``, in admission order."""
        return list(self._classes)

    def admit(self, n_frames: int, length: int | None = None) -> None:
        """Compute the window envelope for one class on the device and check NOLA on the host (one sync)."""
        if (n_frames, length) in self._classes:
            return
        if self.window.is_cuda and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"GraphSafeISTFT: class (n_frames={n_frames}, length={length}) was not admitted "
                               f"before capture; admitted: {self.admitted}. Call admit() first.")
        signal_len = self.n_fft + self.hop * (n_frames - 1)
        start = self.n_fft // 2 if self.center else 0
        end = start + length if length is not None else (-(self.n_fft // 2) if self.center else signal_len)
        squares = self._frame_window.pow(2).expand(1, n_frames, self.n_fft)
        envelope = _overlap_add(squares, signal_len, self.n_fft, self.hop)[:, start:end]
        if envelope.numel() == 0:
            raise ValueError(f"GraphSafeISTFT: n_frames={n_frames}, length={length} leaves no samples")
        lowest = envelope.abs().min()
        if bool(lowest.lt(NOLA_FLOOR)):
            raise RuntimeError(f"GraphSafeISTFT: window envelope for n_frames={n_frames}, length={length} falls to "
                               f"{lowest.item():.3g} < {NOLA_FLOOR} (NOLA fails); torch.istft refuses it too")
        self._classes[(n_frames, length)] = (envelope, start, end, signal_len)

    def istft_no_sync(self, spec: torch.Tensor, length: int | None = None,
                      onesided: bool | None = None) -> torch.Tensor:
        """``torch.istft(spec, ...)`` for an admitted class: device ops only, no host sync, no host tensors.

        spec: complex (fft_size, n_frames) or (channel, fft_size, n_frames) on the window's device.
        Raises KeyError when ``(n_frames, length)`` was not admitted (fail closed: no check is skipped).
        """
        if not spec.is_complex() or spec.dim() not in (2, 3):
            raise ValueError(f"GraphSafeISTFT: spec must be complex with 2 or 3 dims, got {spec.dtype} "
                             f"{tuple(spec.shape)}")
        if spec.device != self.window.device:
            raise ValueError(f"GraphSafeISTFT: spec is on {spec.device}, the window on {self.window.device}")
        if self.rectangular and spec.dtype.to_real() != self.window.dtype:
            raise ValueError(f"GraphSafeISTFT: rectangular window declared as {self.window.dtype}, "
                             f"spec is {spec.dtype}")
        fft_size, n_frames = spec.shape[-2:]
        onesided = fft_size != self.n_fft if onesided is None else onesided
        want = self.n_fft // 2 + 1 if onesided else self.n_fft
        if fft_size != want:
            raise ValueError(f"GraphSafeISTFT: onesided={onesided} needs {want} frequency bins, spec has {fft_size}")
        if onesided and self.return_complex:
            raise ValueError("GraphSafeISTFT: return_complex=True needs a two-sided spec (onesided=False)")
        cls = self._classes.get((n_frames, length))
        if cls is None:
            raise KeyError(f"GraphSafeISTFT: class (n_frames={n_frames}, length={length}) not admitted; "
                           f"admitted: {self.admitted}")
        envelope, start, end, signal_len = cls
        x = torch.view_as_real(spec.resolve_conj())
        if x.dim() == 3:
            x = x.unsqueeze(0)
        x = torch.view_as_complex(x.transpose(1, 2))  # (channel, n_frames, fft_size)
        norm = "ortho" if self.normalized else "backward"
        if self.return_complex:
            x = torch.fft.ifft(x, dim=-1, norm=norm)
        else:
            if not onesided:
                x = x[..., :self.n_fft // 2 + 1]
            x = torch.fft.irfft(x, n=self.n_fft, dim=-1, norm=norm)  # (channel, n_frames, n_fft)
        y = _overlap_add(x * self._frame_window.view(1, 1, self.n_fft), signal_len, self.n_fft, self.hop)
        y = y[:, start:end] / envelope
        if spec.dim() == 2:
            y = y.squeeze(0)
        if end > signal_len:
            y = F.pad(y, (0, end - signal_len))
        return y

    def __call__(self, spec: torch.Tensor, length: int | None = None, onesided: bool | None = None) -> torch.Tensor:
        """Admit the class on first sight (one host check, refused during capture), then :meth:`istft_no_sync`."""
        if spec.is_complex() and spec.dim() in (2, 3):
            self.admit(spec.shape[-1], length)
        return self.istft_no_sync(spec, length, onesided)

    def drop_in(self, input: torch.Tensor, n_fft: int, hop_length: int | None = None, win_length: int | None = None,
                window: torch.Tensor | None = None, center: bool = True, normalized: bool = False,
                onesided: bool | None = None, length: int | None = None, return_complex: bool = False) -> torch.Tensor:
        """``torch.istft``'s signature: refuses arguments other than the declared ones, then ``self(...)``.

        The window must be the declared tensor (same storage, shape, dtype, device); its values are not
        compared (that would be a sync).
        """
        got = (n_fft, n_fft >> 2 if hop_length is None else hop_length, n_fft if win_length is None else win_length,
               center, normalized, return_complex)
        declared = (self.n_fft, self.hop, self.win_length, self.center, self.normalized, self.return_complex)
        if got != declared:
            raise ValueError(f"GraphSafeISTFT: called with (n_fft, hop_length, win_length, center, normalized, "
                             f"return_complex)={got}, declared {declared}")
        same = (window is None) if self.rectangular else (
            window is not None and window.data_ptr() == self.window.data_ptr()
            and window.stride() == self.window.stride() and window.shape == self.window.shape
            and window.dtype == self.window.dtype and window.device == self.window.device)
        if not same:
            raise ValueError("GraphSafeISTFT: called with a window other than the declared one")
        return self(input, length, onesided)
