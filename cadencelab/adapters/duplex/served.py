"""The duplex second's language models decoded as serving stacks decode them: a static KV cache, and the
one-token decode step captured once as a CUDA graph and replayed per token (no host work between tokens).

    GraphDecoder(model, max_len, steps, cache_kw)   greedy decoding of one HF decoder-only model on a
                                                    static cache; ``prefill`` eager, ``decode`` replayed
    DECODE_MODES                                    "eager": the HF dynamic cache, one eager forward per
                                                    token (the stock path); "graph": GraphDecoder;
                                                    "fused": its subclass in :mod:`.fused` (prefill captured)
    run_label(arm, decode)                          "SRc" or "SRc+graphLM": how results name a run

The captured step reads the previous token, its position and its output slot from device buffers and
advances all three itself, so ``decode(first, n)`` is ``n`` graph replays. On a CPU, or when capture
fails, the same step runs eagerly (counted in ``eager_steps``; a failed capture is kept in
``capture_error``): the static-cache arithmetic is the same, only the launches differ.

A control, not an exact path: the static cache attends over all ``max_len`` positions with a mask, so
its reductions are not the dynamic cache's and its tokens may part from eager decoding. The duplex
study measures how far (tokens equal to the eager run's) and labels every "graph" row as such.
"""

from __future__ import annotations

import torch

from .models import cache_keyword, transformers_module

__all__ = ["GraphDecoder", "DECODE_MODES", "run_label"]

DECODE_MODES = ("eager", "graph", "fused")


def run_label(arm: str, decode: str) -> str:
    """A run's name in results: the Token2wav arm, with ``+<mode>LM`` when the language models do not decode
    eagerly ("SRc+graphLM")."""
    return arm if decode == "eager" else f"{arm}+{decode}LM"


def _whole(v) -> bool:
    """An integer (numpy's too), not a bool."""
    import numbers

    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _check_ids(x: torch.Tensor, vocab: int, what: str) -> None:
    """Every id in ``x`` in 0 .. vocab - 1. Host tensors only: a device tensor's values are not read (that
    would add a host sync per second to the served path; its shape and dtype are checked)."""
    if x.device.type != "cpu" or x.numel() == 0:
        return
    lo, hi = int(x.min()), int(x.max())
    if lo < 0 or hi >= vocab:
        bad = hi if hi >= vocab else lo
        raise ValueError(f"{what}: token id {bad} outside the vocabulary 0..{vocab - 1}")


def capture_warmed(device, body, rewind) -> torch.cuda.CUDAGraph:
    """``body`` warmed twice on a side stream (lazy init, the allocator), ``rewind()`` putting the device state back
    before each run and after, then captured on the current stream."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    try:
        with torch.cuda.stream(side):
            for _ in range(2):
                rewind()
                body()
        torch.cuda.current_stream(device).wait_stream(side)
    finally:
        torch.cuda.synchronize(device)
        rewind()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    torch.cuda.synchronize(device)
    return graph


class GraphDecoder:
    """Greedy decoding of ``model`` (a HF decoder-only ``...ForCausalLM``: its body is ``get_decoder()``,
    its head ``get_output_embeddings()``) on a static KV cache of ``max_len`` positions.

    steps:    the most tokens one :meth:`decode` call produces (its output buffers are this long).
    cache_kw: the body's cache keyword ("past_key_values" or "cache"; default: read from its signature).
    capture:  capture the decode step as a CUDA graph (default: on a CUDA device).

    ``length`` is the number of cache positions in use (host-side: the caller's schedule fixes it, no
    device read is needed). :meth:`reset` starts a new context at the same addresses.
    """

    def __init__(self, model, max_len: int, steps: int, cache_kw: str | None = None,
                 capture: bool | None = None):
        if not _whole(steps) or not _whole(max_len) or steps < 1 or max_len < 2:
            raise ValueError(f"GraphDecoder: steps ({steps!r}) must be an integer >= 1 and max_len ({max_len!r}) "
                             f"an integer >= 2")
        self.max_len, self.steps = int(max_len), int(steps)
        self.body, self.head = model.get_decoder(), model.get_output_embeddings()
        if self.head is None:
            raise ValueError(f"GraphDecoder: {type(model).__name__} has no output embeddings (a language-model head)")
        self.vocab = int(self.head.weight.shape[0])  # token ids are 0 .. vocab - 1
        self.cache_kw = cache_kw or cache_keyword(model)
        p = next(model.parameters())
        self.device = p.device
        self.capture = (self.device.type == "cuda") if capture is None else bool(capture)
        if self.capture and self.device.type != "cuda":
            raise ValueError(f"GraphDecoder: capture needs a CUDA device, the model is on {self.device}")
        self.cache = transformers_module().StaticCache(config=model.config, max_cache_len=self.max_len)
        hidden = model.config.hidden_size
        with torch.inference_mode():
            self.ids = torch.zeros(1, 1, dtype=torch.long, device=self.device)  # the token fed to the next step
            self.pos = torch.zeros(1, 1, dtype=torch.long, device=self.device)  # its position
            self.slot = torch.zeros(1, dtype=torch.long, device=self.device)  # the output slot it writes
            self.hidden = torch.zeros(1, self.steps, hidden, dtype=p.dtype, device=self.device)
            self.tokens = torch.zeros(1, self.steps, dtype=torch.long, device=self.device)
        self.length = 0
        self.graph = None
        self.capture_error: str | None = None
        self.replays = 0
        self.eager_steps = 0

    # -- context ---------------------------------------------------------------------------
    @torch.inference_mode()
    def reset(self) -> None:
        """A new context: the cache emptied in place (its addresses, and so the graph, stay valid)."""
        self.cache.reset()
        self.length = 0

    def fits(self, tokens: int) -> bool:
        """Whether ``tokens`` more positions fit in the cache."""
        return self.length + tokens <= self.max_len

    def _forward(self, position_ids: torch.Tensor, **inputs) -> torch.Tensor:
        out = self.body(**inputs, position_ids=position_ids, **{self.cache_kw: self.cache}, use_cache=True)
        return out.last_hidden_state

    @torch.inference_mode()
    def prefill(self, **inputs) -> torch.Tensor:
        """Eager forward of ``input_ids`` (1, T) or ``inputs_embeds`` (1, T, H) at the next T positions; the
        last hidden states (1, T, H). ValueError, before anything runs, when they are not one such batch
        of one sequence, T is 0, an id is outside the vocabulary, or they do not fit."""
        t = self._check_prefill(inputs)
        if not self.fits(t):
            raise ValueError(f"GraphDecoder.prefill: {t} positions after {self.length} exceed max_len {self.max_len}")
        pos = torch.arange(self.length, self.length + t, device=self.device).unsqueeze(0)
        h = self._forward(pos, **inputs)
        self.length += t
        return h

    def _check_prefill(self, inputs: dict) -> int:
        given = sorted(k for k in ("input_ids", "inputs_embeds") if inputs.get(k) is not None)
        if len(given) != 1:
            raise ValueError(f"GraphDecoder.prefill: give exactly one of input_ids or inputs_embeds, got "
                             f"{given or sorted(inputs) or 'nothing'}")
        x, ids = inputs[given[0]], given[0] == "input_ids"
        want = "(1, T) integer token ids" if ids else f"(1, T, {self.hidden.shape[-1]}) embeddings"
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"GraphDecoder.prefill: {given[0]} must be a tensor {want}, got {type(x).__name__}")
        shape = tuple(x.shape)
        ok = (x.dim() == 2 and not x.is_floating_point() and x.dtype != torch.bool) if ids else (
            x.dim() == 3 and x.is_floating_point() and shape[2] == self.hidden.shape[-1])
        if not ok or shape[0] != 1:
            raise ValueError(f"GraphDecoder.prefill: {given[0]} must be {want} (one sequence: the cache holds one), "
                             f"got {shape} {x.dtype}")
        if shape[1] == 0:
            raise ValueError(f"GraphDecoder.prefill: {given[0]} holds no positions (T = 0); prefill at least one")
        if ids:
            _check_ids(x, self.vocab, "GraphDecoder.prefill: input_ids")
        return int(shape[1])

    # -- the decode step -------------------------------------------------------------------
    def _step(self) -> None:
        """One token: forward the fed token at its position, write its hidden state and greedy successor to
        the output slot, feed the successor, advance position and slot. Only device tensors move."""
        h = self._forward(self.pos, input_ids=self.ids)  # (1, 1, H)
        tok = self.head(h).argmax(-1)  # (1, 1)
        self.hidden.index_copy_(1, self.slot, h)
        self.tokens.index_copy_(1, self.slot, tok)
        self.ids.copy_(tok)
        self.pos.add_(1)
        self.slot.add_(1)

    def _capture(self) -> None:
        """Warm the step on a side stream, then capture it. Each warm-up step writes at position ``length``
        and output slot 0 (the cache's device lengths and the slot are put back before each and after):
        what it wrote lies past ``length``, masked now and overwritten by the first real step."""
        lengths = [layer.cumulative_length.clone() for layer in self.cache.layers]

        def rewind():
            for layer, n in zip(self.cache.layers, lengths):
                layer.cumulative_length.copy_(n)
            self.slot.zero_()

        # not the kit's road: the language models have no declaration yet (a labelled control, tokens not exact)
        self.graph = capture_warmed(self.device, self._step, rewind)

    @torch.inference_mode()
    def first_token(self, hidden: torch.Tensor) -> torch.Tensor:
        """The greedy token after ``hidden`` (1, 1, H): the head's argmax, (1, 1)."""
        if not isinstance(hidden, torch.Tensor) or tuple(hidden.shape) != (1, 1, self.hidden.shape[-1]):
            raise ValueError(f"GraphDecoder.first_token: hidden must be (1, 1, {self.hidden.shape[-1]}), got "
                             f"{tuple(hidden.shape) if isinstance(hidden, torch.Tensor) else type(hidden).__name__}")
        return self.head(hidden).argmax(-1)

    @torch.inference_mode()
    def decode(self, first: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed ``first`` (1, 1) and decode ``n`` tokens greedily: (hidden (1, n, H), tokens (1, n)), views of
        the output buffers, valid until the next call (the caller concatenates them: no second copy here).

        The step is captured at the first call after a prefill (the cache's lazily built tensors exist
        then); a capture error keeps the step eager for good, the error in ``capture_error``."""
        if not _whole(n) or not 0 <= n <= self.steps:
            raise ValueError(f"GraphDecoder.decode: n = {n!r} is not an integer in 0..{self.steps} (steps)")
        n = int(n)
        if not isinstance(first, torch.Tensor) or first.numel() != 1 or first.is_floating_point() \
                or first.dtype == torch.bool:
            raise ValueError(f"GraphDecoder.decode: first must be one integer token id (1, 1), got "
                             f"{tuple(first.shape) if isinstance(first, torch.Tensor) else type(first).__name__}")
        _check_ids(first, self.vocab, "GraphDecoder.decode: first")
        if not self.fits(n):
            raise ValueError(f"GraphDecoder.decode: {n} positions after {self.length} exceed max_len {self.max_len}")
        if n == 0:
            return self.hidden[:, :0], self.tokens[:, :0]
        if self.length == 0:
            raise ValueError("GraphDecoder.decode: prefill first (the context is empty)")
        if self.capture and self.graph is None and self.capture_error is None:
            try:
                self._capture()
            except Exception as e:  # fail closed: the same step, eager
                self.capture_error = f"{type(e).__name__}: {e}"
                self.graph = None
                torch.cuda.synchronize(self.device)
        self.ids.copy_(first.reshape(1, 1))
        self.pos.fill_(self.length)
        self.slot.zero_()
        for _ in range(n):
            if self.graph is not None:
                self.graph.replay()
                self.replays += 1
            else:
                self._step()
                self.eager_steps += 1
        self.length += n
        return self.hidden[:, :n], self.tokens[:, :n]

    @torch.inference_mode()
    def serve(self, n: int, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
        """One second: prefill ``inputs``, the first token from the last hidden state, then ``n`` tokens replayed;
        (hidden (1, n + 1, H), tokens (1, n + 1)), the prefill's last position first."""
        h = self.prefill(**inputs)[:, -1:]
        first = self.first_token(h)
        hidden, tokens = self.decode(first, n)
        return torch.cat([h, hidden], 1), torch.cat([first, tokens], 1)

    def describe(self) -> dict:
        return dict(max_len=self.max_len, steps=self.steps, captured=self.graph is not None, replays=self.replays,
                    eager_steps=self.eager_steps, capture_error=self.capture_error)
