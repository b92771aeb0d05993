"""B0: the stock MiniCPM-o Token2wav streaming loop, reproduced step for step.

:class:`StockToken2wav` performs the same tensor operations, in the same order, as the vendor's
``stepaudio2.token2wav.Token2wav.set_stream_cache`` / ``.stream`` (minicpmo 0.1.2), with three differences that
touch no computed value: the device is a parameter instead of a hard-coded ``.cuda()``, the speaker prompt is
injected as a :class:`PromptState` instead of coming from the audio front end, and nothing is printed.

Stock behaviour kept on purpose (the reference semantics, quirks included):

- priming appends the lookahead's worth of silence tokens to the prompt tokens;
- after every chunk the estimator cache (dim 4, newest first) and the conformer cache (dim 3, chronological) are
  cut to ``P + R`` frames once longer, ``cat([c[..., :P], c[..., -R:]])`` (P = prompt mel frames, R = the clocks'
  retained frames);
- the returned estimator caches alias the solver's preallocated buffers and are overwritten by the next call;
- the vocoder keeps the clocks' mel overlap (and as many frames' worth of source and speech samples) between
  chunks, cross-fades with a float64 Hamming window, left-pads the first chunk with that many zeros and holds
  back as many samples of every non-final chunk;
- HiFT draws from the default generator of its device on every call, so PCM is reproducible only under the same
  generator state (seed before each ``stream``).
"""

from __future__ import annotations

import contextlib
import types
from typing import Sequence

import numpy as np
import torch

from .clocks import T2W_CLOCKS
from .prompts import PromptState
from .vendor_import import load_vendor_token2wav_module

__all__ = ["SILENCE_TOKEN", "StockToken2wav", "crossfade", "vendor_token2wav"]

SILENCE_TOKEN = T2W_CLOCKS.silence_token
"""Speech-token id of silence; a lookahead's worth of them primes a turn."""

MEL_CACHE_LEN = T2W_CLOCKS.mel_cache_frames
"""Mel frames the vocoder carries into the next chunk."""

SAMPLES_PER_FRAME = T2W_CLOCKS.samples_per_frame
"""24 kHz samples per 50 Hz mel frame."""

LOOKAHEAD = T2W_CLOCKS.lookahead_tokens
"""Speech tokens of lookahead a call carries (silence at priming)."""

RETAINED_FRAMES = T2W_CLOCKS.retained_frames
"""Frames of history the stock cut keeps after the prompt."""


def crossfade(fade_in: torch.Tensor, fade_out: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
    """Overlap-add the first ``len(window) // 2`` samples of ``fade_in`` with the tail of ``fade_out``.

    Same arithmetic as the vendor's ``fade_in_out`` (which lives in ``token2wav.py``, a module
    that cannot be imported without stand-ins for torchaudio & co., so it is restated here; a
    test checks both agree bit for bit). ``window`` is the float64 Hamming window of 2 x 3840
    samples: the rising half weights ``fade_in``, the falling half ``fade_out``. The products
    are computed in float64 and rounded back into the float32 output.
    """
    half = int(window.shape[0] / 2)
    out = fade_in.clone()
    out[..., :half] = out[..., :half] * window[:half] + fade_out[..., -half:] * window[half:]
    return out


class StockToken2wav:
    """The stock streaming Token2wav (B0) on any device.

    State lives in attributes, as in the vendor class: ``cache`` (the prompt tuple),
    ``stream_cache`` (flow caches: ``conformer_cnn_cache``, ``conformer_att_cache``,
    ``estimator_cnn_cache``, ``estimator_att_cache``) and ``hift_cache_dict`` (``mel``
    (1, 80, <=8) frames, ``source`` (1, 1, <=3840) and ``speech`` (1, <=3840) samples).
    After each :meth:`stream` call ``last_mel`` holds the flow output (1, 80, frames) and
    ``last_speech`` the float32 waveform (1, samples) that was returned/encoded, both on
    ``device``, for hashing by a bench.

    Args:
        flow, hift: vendor modules (see :func:`build_token2wav` / :func:`load_checkpoint`).
        device: where inputs and vocoder caches are created.
        n_timesteps: Euler steps of the flow-matching solver (10 in the HF-style model).
        float16: run each chunk's flow call under float16 autocast (CUDA only), as the
            vendor's ``float16=True`` does; the vendor also casts the flow to half (build it
            with ``dtype=torch.float16``). As in the vendor, priming then fails: ``setup_cache``
            runs outside autocast and feeds the float32 speaker embedding to half weights.
    """

    def __init__(
        self,
        flow: torch.nn.Module,
        hift: torch.nn.Module,
        device: str | torch.device,
        n_timesteps: int = 10,
        float16: bool = False,
    ):
        self.device = torch.device(device)
        self.float16 = float16
        self.n_timesteps = n_timesteps
        self.flow = flow
        self.hift = hift
        self.cache: tuple[torch.Tensor, ...] | None = None
        self.stream_cache: dict[str, torch.Tensor] | None = None
        self.mel_cache_len = MEL_CACHE_LEN
        self.source_cache_len = int(self.mel_cache_len * SAMPLES_PER_FRAME)
        self.speech_window = torch.from_numpy(np.hamming(2 * self.source_cache_len)).to(self.device)
        self.hift_cache_dict: dict[str, torch.Tensor] = {}
        self.last_mel: torch.Tensor | None = None
        self.last_speech: torch.Tensor | None = None

    def _autocast(self) -> contextlib.AbstractContextManager:
        # The vendor enters autocast("cuda", float16 or float32). On a CUDA device we do the
        # same; elsewhere a CUDA autocast has no effect on the ops, so we enter nothing.
        if self.device.type == "cuda":
            return torch.amp.autocast("cuda", dtype=torch.float16 if self.float16 else torch.float32)
        return contextlib.nullcontext()

    def set_stream_cache(self, prompt: PromptState) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Prime the flow with the prompt; return ``(stream_cache, hift_cache_dict)``.

        Like the vendor, the caches are returned; unlike the vendor, they are also installed on
        ``self`` (the duplex demo always does ``self.stream_cache, self.hift_cache_dict =
        set_stream_cache(...)``). The estimator caches alias the solver's buffers: clone them
        to keep a copy past the next :meth:`stream` call (the demo clones at turn start).
        """
        self.cache = prompt.as_tuple()
        prompt_speech_tokens, prompt_speech_tokens_lens, spk_emb, prompt_mels, prompt_mels_lens = self.cache

        right_pad_speech_tokens = (
            torch.ones(1, LOOKAHEAD, device=prompt_speech_tokens.device, dtype=prompt_speech_tokens.dtype) * SILENCE_TOKEN
        )
        stream_cache = self.flow.setup_cache(
            torch.cat([prompt_speech_tokens, right_pad_speech_tokens], dim=1),
            prompt_mels,
            spk_emb,
            n_timesteps=self.n_timesteps,
        )
        hift_cache_dict = dict(
            mel=torch.zeros(1, prompt_mels.shape[2], 0, device=self.device),
            source=torch.zeros(1, 1, 0, device=self.device),
            speech=torch.zeros(1, 0, device=self.device),
        )
        self.stream_cache, self.hift_cache_dict = stream_cache, hift_cache_dict
        return stream_cache, hift_cache_dict

    def stream(
        self,
        tokens: Sequence[int] | torch.Tensor,
        prompt: PromptState | None = None,
        last_chunk: bool = False,
        return_waveform: bool = False,
    ) -> bytes | np.ndarray:
        """Synthesise one chunk of speech tokens.

        ``tokens``: the chunk (committed tokens + lookahead in the demo; any length when
        ``last_chunk``). Returns int16 little-endian PCM bytes at 24 kHz, or with
        ``return_waveform`` the float32 waveform as a (1, samples) numpy array (not clipped).
        ``prompt`` is only used when no prompt has been set yet (the vendor's lazy
        ``_prepare_prompt``); :meth:`set_stream_cache` must have run before.
        """
        if self.cache is None:
            if prompt is None:
                raise ValueError("StockToken2wav.stream: no prompt set; call set_stream_cache(prompt) first")
            self.cache = prompt.as_tuple()
        prompt_speech_tokens, prompt_speech_tokens_lens, spk_emb, prompt_mels, prompt_mels_lens = self.cache

        if isinstance(tokens, torch.Tensor):
            tokens = tokens.tolist()
        generated_speech_tokens = torch.tensor([tokens], dtype=torch.int32, device=self.device)
        generated_speech_tokens_lens = torch.tensor(  # noqa: F841 - built (and copied) as the vendor does
            [generated_speech_tokens.shape[1]], dtype=torch.int32, device=self.device
        )

        if self.stream_cache is None:
            raise ValueError("stream_cache is not set")

        with self._autocast():
            chunk_mel, self.stream_cache = self.flow.inference_chunk(
                token=generated_speech_tokens,
                spk=spk_emb,
                cache=self.stream_cache,
                last_chunk=last_chunk,
                n_timesteps=self.n_timesteps,
            )
        prompt_frames, kept = prompt_mels.shape[1], RETAINED_FRAMES
        if self.stream_cache["estimator_att_cache"].shape[4] > (prompt_frames + kept):
            self.stream_cache["estimator_att_cache"] = torch.cat(
                [
                    self.stream_cache["estimator_att_cache"][:, :, :, :, :prompt_frames],
                    self.stream_cache["estimator_att_cache"][:, :, :, :, -kept:],
                ],
                dim=4,
            )
        if self.stream_cache["conformer_att_cache"].shape[3] > (prompt_frames + kept):
            self.stream_cache["conformer_att_cache"] = torch.cat(
                [
                    self.stream_cache["conformer_att_cache"][:, :, :, :prompt_frames, :],
                    self.stream_cache["conformer_att_cache"][:, :, :, -kept:, :],
                ],
                dim=3,
            )

        hift_cache_mel = self.hift_cache_dict["mel"]
        hift_cache_source = self.hift_cache_dict["source"]
        hift_cache_speech = self.hift_cache_dict["speech"]
        mel = torch.concat([hift_cache_mel, chunk_mel], dim=2)

        speech, source = self.hift(mel, hift_cache_source)

        if hift_cache_speech.shape[-1] > 0:
            speech = crossfade(speech, hift_cache_speech, self.speech_window)

        is_first_chunk = hift_cache_speech.shape[-1] == 0

        self.hift_cache_dict = dict(
            mel=mel[..., -self.mel_cache_len :].clone().detach(),
            source=source[:, :, -self.source_cache_len :].clone().detach(),
            speech=speech[:, -self.source_cache_len :].clone().detach(),
        )

        if not last_chunk:
            if is_first_chunk:
                silence_padding = torch.zeros(1, self.source_cache_len, device=speech.device)
                speech = torch.cat([silence_padding, speech[:, : -self.source_cache_len]], dim=1)
            else:
                speech = speech[:, : -self.source_cache_len]

        self.last_mel = chunk_mel
        self.last_speech = speech
        wav_np = speech.cpu().numpy()
        if return_waveform:
            return wav_np

        wav_np = np.clip(wav_np, -1.0, 1.0)
        wav_int16 = (wav_np * 32767.0).astype("<i2")
        return wav_int16.tobytes()


def vendor_token2wav(
    flow: torch.nn.Module,
    hift: torch.nn.Module,
    prompt: PromptState,
    n_timesteps: int = 10,
    float16: bool = False,
    device: str | torch.device = "cuda",
) -> object:
    """The vendor's own ``stepaudio2.token2wav.Token2wav`` around ``flow``/``hift``, for reference runs.

    The instance is made with ``object.__new__`` (its ``__init__`` would load onnx models and
    a checkpoint) and given the attributes its ``set_stream_cache`` / ``stream`` read:
    ``float16``, ``n_timesteps``, ``flow``, ``hift``, ``cache`` (the prompt tuple),
    ``stream_cache`` (None), ``hift_cache_dict`` ({}), ``mel_cache_len`` (8),
    ``source_cache_len`` (3840) and ``speech_window`` (float64 Hamming on ``device``). Its
    ``_prepare_prompt`` is replaced on the instance by one returning ``prompt``, so the
    vendor's ``set_stream_cache(None)`` works (it prints three lines). ``stream`` hard-codes
    CUDA tensors, so it runs only with a CUDA device.
    """
    module = load_vendor_token2wav_module()
    inst = object.__new__(module.Token2wav)
    prompt_tuple = prompt.as_tuple()
    inst.float16 = float16
    inst.n_timesteps = n_timesteps
    inst.flow = flow
    inst.hift = hift
    inst.audio_tokenizer = None
    inst.spk_model = None
    inst.cache = prompt_tuple
    inst._prepare_prompt = types.MethodType(lambda self, prompt_wav: prompt_tuple, inst)
    inst.stream_cache = None
    inst.hift_cache_dict = {}
    inst.mel_cache_len = MEL_CACHE_LEN
    inst.source_cache_len = int(inst.mel_cache_len * SAMPLES_PER_FRAME)
    inst.speech_window = torch.from_numpy(np.hamming(2 * inst.source_cache_len)).to(torch.device(device))
    return inst
