"""The "fused" decode: a second of one language model as two CUDA graph launches, no host round trip.

    FusedDecoder(model, max_len, steps, cache_kw)   a GraphDecoder whose ``serve(n, **inputs)`` replays
                                                    one prefill graph per (input kind, T, at start) and
                                                    one decode graph of n steps per n

The prefill reads its input from a static buffer and its positions from the cache's device length; its
last hidden state, the head's argmax and the decode step's inputs are written on the device, where the
n-step decode graph reads them. HF's mask code is not captured: at T > 1 it asks ``q_offset == 0`` of the
cache's device length (a host sync, and a branch on a device value: no mask and ``is_causal`` at an empty
cache, a (1, 1, T, max_len) mask otherwise), so the host picks the branch from its own ``length`` and the
mask is built in the graph from the positions (the same booleans HF builds). A start graph also empties
the cache (what ``reset`` does eagerly elsewhere). On a CPU or after a failed capture the same bodies run
eagerly (counted; the error kept): the arithmetic of the "graph" mode, so its tokens and hidden states are
the "graph" mode's, and like them a labelled control, not exact against eager decoding.
"""

from __future__ import annotations

import numbers

import torch

from .served import GraphDecoder, capture_warmed

__all__ = ["FusedDecoder"]

_KINDS = ("input_ids", "inputs_embeds")


class FusedDecoder(GraphDecoder):
    """Greedy decoding of a HF decoder-only model whose layers all attend fully (its body takes a mask per
    layer type: Qwen2, Llama, ...), a second at a time: :meth:`serve`. The output buffers hold ``steps + 1``
    positions: slot 0 the prefill's last hidden state and first token, slots 1..n the decoded ones."""

    def __init__(self, model, max_len: int, steps: int, cache_kw: str | None = None,
                 capture: bool | None = None):
        super().__init__(model, max_len, steps, cache_kw, capture)
        types = getattr(model.config, "layer_types", None)
        if not types or any(t != "full_attention" for t in types):
            raise ValueError(f"FusedDecoder: {type(model).__name__} needs every layer of type 'full_attention' "
                             f"(its mask is built in the graph), got layer_types {types!r}")
        p = self.hidden
        with torch.inference_mode():
            self.hidden = torch.zeros(1, self.steps + 1, p.shape[-1], dtype=p.dtype, device=self.device)
            self.tokens = torch.zeros(1, self.steps + 1, dtype=torch.long, device=self.device)
            self.kv_index = torch.arange(self.max_len, device=self.device)  # the key positions a mask compares
        self.inputs: dict[tuple[str, int], torch.Tensor] = {}  # (kind, T) -> the static input buffer
        self.prefill_graphs: dict[tuple[str, int, bool], torch.cuda.CUDAGraph] = {}
        self.decode_graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.prefill_replays = self.decode_replays = self.eager_prefills = 0
        self._stale = False  # reset asked, the cache not yet emptied (a start body empties it)

    # -- context ---------------------------------------------------------------------------
    def reset(self) -> None:
        """A new context: ``length`` 0 now; the cache is emptied by the next start prefill (inside its graph),
        or eagerly by :meth:`prefill` of the base class."""
        self.length, self._stale = 0, True

    def prefill(self, **inputs) -> torch.Tensor:
        if self._stale:
            GraphDecoder.reset(self)
            self._stale = False
        return super().prefill(**inputs)

    # -- the bodies (captured, or run eagerly) ------------------------------------------------
    def _empty_cache(self) -> None:
        for layer in self.cache.layers:
            if getattr(layer, "is_initialized", False):
                layer.keys.zero_()
                layer.values.zero_()
            layer.cumulative_length.zero_()

    def _prefill_body(self, kind: str, t: int, start: bool) -> None:
        """Forward the static input at the cache's next T positions; slot 0 <- last hidden state and its
        argmax; the decode step's token, position and slot set. Only device tensors move."""
        if start:
            self._empty_cache()
        pos = (self.kv_index[:t] + self.cache.layers[0].cumulative_length).unsqueeze(0)  # (1, T)
        mask = None if start else (self.kv_index <= pos[0, :, None])[None, None]  # (1, 1, T, max_len) as HF's
        out = self.body(**{kind: self.inputs[(kind, t)]}, position_ids=pos, attention_mask={"full_attention": mask},
                        **{self.cache_kw: self.cache}, use_cache=True)
        h = out.last_hidden_state[:, -1:]  # (1, 1, H)
        tok = self.head(h).argmax(-1)  # (1, 1)
        self.hidden[:, :1].copy_(h)
        self.tokens[:, :1].copy_(tok)
        self.ids.copy_(tok)
        self.pos.copy_(pos[:, -1:] + 1)
        self.slot.fill_(1)

    def _decode_body(self, n: int) -> None:
        for _ in range(n):
            self._step()

    # -- capture -----------------------------------------------------------------------------
    def _capture_body(self, body) -> torch.cuda.CUDAGraph:
        """Warm ``body`` twice on a side stream, the decoder's device state put back before each and after
        (what a warm-up wrote lies past ``length`` or in slots the replay rewrites), then capture it."""
        saved = [layer.cumulative_length.clone() for layer in self.cache.layers]
        bufs = (self.ids, self.pos, self.slot)
        kept = [b.clone() for b in bufs]

        def rewind():
            for layer, v in zip(self.cache.layers, saved):
                layer.cumulative_length.copy_(v)
            for b, v in zip(bufs, kept):
                b.copy_(v)

        return capture_warmed(self.device, body, rewind)

    def _run(self, graphs: dict, key, body) -> bool:
        """Replay the graph at ``key`` (captured at its first use); False when the body ran eagerly."""
        if self.capture and self.capture_error is None and key not in graphs:
            try:
                graphs[key] = self._capture_body(body)
            except Exception as e:  # fail closed: every body eager from now on
                self.capture_error = f"{type(e).__name__}: {e}"
                torch.cuda.synchronize(self.device)
        if self.capture_error is None and key in graphs:
            graphs[key].replay()
            return True
        body()
        return False

    # -- one second ----------------------------------------------------------------------------
    @torch.inference_mode()
    def serve(self, n: int, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
        """Prefill ``input_ids`` (1, T) or ``inputs_embeds`` (1, T, H) and decode ``n`` tokens greedily after
        the first: (hidden (1, n + 1, H), tokens (1, n + 1)), the prefill's last position first; views of
        the output buffers, valid until the next call. ValueError, before anything moves, on bad input."""
        t = self._check_prefill(inputs)
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or not 0 <= n <= self.steps:
            raise ValueError(f"FusedDecoder.serve: n = {n!r} is not an integer in 0..{self.steps} (steps)")
        n = int(n)
        if not self.fits(t + n):
            raise ValueError(f"FusedDecoder.serve: {t} + {n} positions after {self.length} exceed max_len "
                             f"{self.max_len}")
        kind = next(k for k in _KINDS if inputs.get(k) is not None)
        x = inputs[kind]
        if kind == "inputs_embeds" and x.dtype != self.hidden.dtype:  # the "graph" mode would not cast either
            raise ValueError(f"FusedDecoder.serve: inputs_embeds must be {self.hidden.dtype} (the model's), got {x.dtype}")
        buf = self.inputs.get((kind, t))
        if buf is None:
            shape = (1, t) if kind == "input_ids" else (1, t, self.hidden.shape[-1])
            dtype = torch.long if kind == "input_ids" else self.hidden.dtype
            buf = self.inputs[(kind, t)] = torch.zeros(shape, dtype=dtype, device=self.device)
        buf.copy_(x)
        start = self.length == 0
        if self._run(self.prefill_graphs, (kind, t, start), lambda: self._prefill_body(kind, t, start)):
            self.prefill_replays += 1
        else:
            self.eager_prefills += 1
        self._stale = False
        self.length += t
        if n:
            if self._run(self.decode_graphs, n, lambda: self._decode_body(n)):
                self.decode_replays += 1
            else:
                self.eager_steps += n
            self.length += n
        return self.hidden[:, :n + 1], self.tokens[:, :n + 1]

    def describe(self) -> dict:
        return dict(max_len=self.max_len, steps=self.steps, captured=bool(self.prefill_graphs or self.decode_graphs),
                    prefill_graphs=sorted(f"{k} T={t}{' start' if s else ''}" for k, t, s in self.prefill_graphs),
                    decode_graphs=sorted(self.decode_graphs), prefill_replays=self.prefill_replays,
                    decode_replays=self.decode_replays, eager_prefills=self.eager_prefills,
                    eager_steps=self.eager_steps, capture_error=self.capture_error)
