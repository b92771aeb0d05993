"""A turn of Token2wav stream calls: a chunk plus its lookahead per steady call, then the flush.

    chunk_pieces(tokens)           the calls ``(piece, last_chunk)`` a turn's generated tokens make
    turn_tokens(n_chunks, flush)   how many generated tokens give ``n_chunks`` steady calls and a
                                   flush of ``flush`` tokens
    check_tokens(tokens, vocab)    one call's token ids, refused with one line unless each is in the vocabulary
Every size comes from the clocks (:data:`cadencelab.adapters.token2wav.clocks.T2W_CLOCKS` unless given).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .clocks import T2W_CLOCKS

__all__ = ["chunk_pieces", "turn_tokens", "check_tokens", "check_flag"]


def chunk_pieces(tokens, clocks=T2W_CLOCKS):
    """A turn's stream calls behind a lookahead of silence tokens: ``(piece, last_chunk)``,
    steady calls of a chunk plus its lookahead (the chunk dropped after each) while that many
    tokens are left, then the flush (``last_chunk=True``) of the rest."""
    buf = [clocks.silence_token] * clocks.lookahead_tokens + list(tokens)
    while len(buf) >= clocks.call_tokens:
        yield buf[:clocks.call_tokens], False
        buf = buf[clocks.tokens_per_chunk:]
    yield buf, True


def turn_tokens(n_chunks: int, flush_tokens: int, clocks=T2W_CLOCKS) -> int:
    """Generated tokens of a turn that ``chunk_pieces`` streams as ``n_chunks`` steady calls and a flush of
    ``flush_tokens`` (the flush includes the lookahead the priming silence started)."""
    return clocks.tokens_per_chunk * n_chunks + flush_tokens - clocks.lookahead_tokens


def check_tokens(tokens, vocab: int, where: str) -> list[int]:
    """``tokens`` (a sequence, array or 1-D tensor of speech-token ids) as a list of ints, each in
    ``0 .. vocab - 1`` and at least one; ValueError naming ``where``, what was given and what is allowed."""
    import torch  # here, not at the top: the turn plans (a study's --help) need no torch

    if isinstance(tokens, torch.Tensor):
        if tokens.dim() > 1 or tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
            raise ValueError(f"{where}: tokens must be a 1-D integer tensor, got {tuple(tokens.shape)} {tokens.dtype}")
        tokens = tokens.tolist()
    elif isinstance(tokens, np.ndarray):
        if tokens.ndim > 1 or tokens.dtype.kind not in "iu":
            raise ValueError(f"{where}: tokens must be a 1-D integer array, got {tokens.shape} {tokens.dtype}")
        tokens = tokens.tolist()
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Sequence):
        raise ValueError(f"{where}: tokens must be a sequence of token ids, got {type(tokens).__name__}")
    bad = next((i for i, t in enumerate(tokens)
                if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < vocab), None)
    if bad is not None:
        raise ValueError(f"{where}: token {bad} is {tokens[bad]!r}; token ids are integers in 0..{vocab - 1}")
    if not tokens:
        raise ValueError(f"{where}: no tokens (a chunk has at least one token id in 0..{vocab - 1})")
    return [int(t) for t in tokens]


def check_flag(value, name: str, where: str) -> bool:
    """``value`` when it is a bool (numpy's too); ValueError otherwise (a string such as "no" is not False)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{where}: {name} must be True or False, got {value!r}")
    return bool(value)
