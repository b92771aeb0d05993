"""The soak's stream: its turns (lengths about ``turn_every`` with a deterministic jitter, each ending with a
flush) and their tokens, planned from a :class:`~cadencelab.bench.soak.SoakConfig` (``cfg``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..adapters.token2wav.turns import turn_tokens
from .common import CALL_TOKENS, LOOKAHEAD

__all__ = ["Turn", "plan_turns", "turn_seed", "warmup_chunks"]


@dataclass
class Turn:
    turn: int
    start: int  # global index of the turn's first chunk
    calls: int  # steady chunks + the flush
    flush_tokens: int
    seed: int
    tokens: list = field(repr=False, default_factory=list)

    @property
    def stop(self) -> int:
        return self.start + self.calls


def turn_seed(cfg, turn: int) -> int:
    return 1_000_003 * (cfg.seed + 1) + 7919 * turn + 17


def plan_turns(cfg, vocab: int | None = None) -> list[Turn]:
    """The stream's turns: lengths about ``turn_every`` (deterministic jitter), tokens per turn.

    A turn of n calls holds n - 1 steady calls (a chunk plus its lookahead) and a final flush of
    ``flush_tokens[turn % 2]`` tokens; its generated tokens number ``turn_tokens(n - 1, flush)``
    (the buffer starts with the lookahead's silence tokens).
    """
    if vocab is None:  # the declared model's speech-token vocabulary
        from ..adapters.token2wav.configs import REAL

        vocab = REAL.vocab_size
    if cfg.chunks < 1 or cfg.turn_every < 1:
        raise ValueError("chunks and turn_every must be positive")
    for r in cfg.flush_tokens:
        if not LOOKAHEAD <= r < CALL_TOKENS:
            raise ValueError(f"flush tokens must be in [{LOOKAHEAD}, {CALL_TOKENS}), got {r}")
    rng = np.random.default_rng([cfg.seed, 0x50AC])
    jitter = cfg.jitter_calls()
    turns: list[Turn] = []
    start = 0
    while start < cfg.chunks:
        left = cfg.chunks - start
        n = cfg.turn_every + (int(rng.integers(-jitter, jitter + 1)) if jitter else 0)
        n = max(3, n) if cfg.turn_every >= 3 else max(1, n)
        if left - n < min(3, cfg.turn_every):  # never leave a stub turn behind
            n = left
        t = len(turns)
        r = cfg.flush_tokens[t % len(cfg.flush_tokens)]
        toks = np.random.default_rng([cfg.seed, 1 + t]).integers(0, vocab, turn_tokens(n - 1, r))
        turns.append(Turn(t, start, n, r, turn_seed(cfg, t), toks.tolist()))
        start += n
    return turns


def warmup_chunks(cfg, turns: list[Turn]) -> int:
    w = min(cfg.warmup_turns, len(turns))
    return turns[w - 1].stop if w > 0 else 0
