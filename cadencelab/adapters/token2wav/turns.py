"""A turn of Token2wav stream calls: a chunk plus its lookahead per steady call, then the flush.

    chunk_pieces(tokens)           the calls ``(piece, last_chunk)`` a turn's generated tokens make
    turn_tokens(n_chunks, flush)   how many generated tokens give ``n_chunks`` steady calls and a
                                   flush of ``flush`` tokens
Every size comes from the clocks (:data:`cadencelab.contract.T2W_CLOCKS` unless given).
"""

from __future__ import annotations

from ...contract import T2W_CLOCKS

__all__ = ["chunk_pieces", "turn_tokens"]


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
