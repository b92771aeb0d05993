"""Token2wav's one clocks object: everything Token2wav-sized derives from it, and the CLI and the
notebook's sliders derive the same catalog for every slider value."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from cadencelab import cli
from cadencelab.course import frames, panels
from cadencelab.adapters.token2wav.runtime import ARMS, chunk_frames, declaration_for, runtime_envelope
from cadencelab.adapters.token2wav.configs import TEACHING
from cadencelab.adapters.token2wav.envelopes import demand_frames
from cadencelab.adapters.token2wav.turns import chunk_pieces, turn_tokens
from cadencelab.bench.common import CALL_TOKENS, LOOKAHEAD, STRIDE_TOKENS
from cadencelab.contract import DeclarationError, PromptRetained, derive
from cadencelab.adapters.token2wav.clocks import T2W_CLOCKS, token2wav_declaration

C = T2W_CLOCKS


def test_declaration_params_come_from_the_clocks():
    p = token2wav_declaration().params
    assert (p["f_prompt"], p["f_retained"], p["n_steps"]) == (C.prompt_frames, C.retained_frames, C.n_steps)
    assert (p["f_chunk"], p["f_call"]) == (C.chunk_frames, C.call_frames)
    assert p["f_call"] == p["f_chunk"] + C.frames_per_token * C.lookahead_tokens
    small = replace(C, prompt_frames=12, retained_frames=8, tokens_per_chunk=2, n_steps=3)
    q = token2wav_declaration(clocks=small).params
    assert (q["f_prompt"], q["f_retained"], q["f_chunk"], q["n_steps"]) == (12, 8, 4, 3)
    assert q["f_call"] == small.call_frames == 4 + C.frames_per_token * C.lookahead_tokens
    # a clock argument replaces that field; f_chunk gives the chunk's tokens
    assert token2wav_declaration(f_chunk=40).params["tokens_per_chunk"] == 40 // C.frames_per_token
    assert C.with_(f_chunk=40).tokens_per_chunk == 40 // C.frames_per_token
    with pytest.raises(DeclarationError, match="whole number of tokens"):
        C.with_(f_chunk=41)


def test_policies_envelopes_and_plans_derive_from_the_clocks():
    d = declaration_for(TEACHING, clocks=replace(C, retained_frames=20))
    for name in ("estimator_att_cache", "conformer_att_cache"):
        pol = d.region(name).policy
        assert isinstance(pol, PromptRetained) and (pol.prompt, pol.retained) == (C.prompt_frames, 20)
    env = runtime_envelope("S", clocks=replace(C, n_steps=4))
    assert (env.n_slots, env.max_frames) == (4, C.demand_frames)
    assert runtime_envelope("B0") is not None and not ARMS["B0"].state_rule
    assert demand_frames() == C.prompt_frames + C.retained_frames + C.call_frames
    assert chunk_frames(C.call_tokens, False) == C.chunk_frames
    assert chunk_frames(C.call_tokens, True) == C.call_frames
    assert (CALL_TOKENS, STRIDE_TOKENS, LOOKAHEAD) == (C.call_tokens, C.tokens_per_chunk, C.lookahead_tokens)
    # a turn streamed as n steady calls and a flush of r tokens: the plan follows the clocks
    tiny = replace(C, tokens_per_chunk=4, lookahead_tokens=1)
    pieces = list(chunk_pieces(list(range(turn_tokens(2, 3, tiny))), tiny))
    assert [len(p) for p, _ in pieces] == [5, 5, 3] and [last for _, last in pieces] == [False, False, True]
    assert pieces[0][0][0] == C.silence_token and pieces[1][0][:1] == pieces[0][0][4:]


def test_stock_cut_through_the_declared_policy_matches_the_stock_cat():
    """The runtime's stock cut (the declared PromptRetained) equals the vendor's cat([:P], [-R:])."""
    p, r = 5, 3
    pol = replace(C, prompt_frames=p, retained_frames=r).retention()
    x = torch.randn(2, 3, 13)
    assert torch.equal(pol.apply(x, 2), torch.cat([x[:, :, :p], x[:, :, -r:]], dim=2))
    short = x[:, :, :p + r]
    assert pol.apply(short, 2) is short  # within prompt + retained: no cut, as the stock ``if`` does not cat


def _slider_grid():
    """Every f_chunk slider value; f_retained and n_steps at their ends and a few inside."""
    (r0, r1, rs), (c0, c1, cs), (s0, s1, _) = (frames.SLIDER_RANGES[k] for k in ("f_retained", "f_chunk", "n_steps"))
    d = frames.clock_params()
    grid = [(d["f_retained"], c, d["n_steps"]) for c in range(c0, c1 + 1, cs)]
    grid += [(r, d["f_chunk"], d["n_steps"]) for r in sorted({r0, r0 + rs, 150, r1 - rs, r1})]
    grid += [(d["f_retained"], 40, s) for s in sorted({s0, 4, s1})]
    grid += [(r0, c1, s1), (r1, c0, s0), (r1, c1, s0)]
    return grid


def test_cli_and_notebook_sliders_derive_the_same_catalog(tmp_path, capsys):
    sliders = panels.ClockSliders(build=False)
    for i, (r, c, s) in enumerate(_slider_grid()):
        path = tmp_path / f"{i}.json"
        rc = cli.main(["catalog", "--model", "token2wav", "--f-retained", str(r), "--f-chunk", str(c),
                       "--steps", str(s), "--json", str(path)])
        capsys.readouterr()
        assert rc == 0, (r, c, s)
        got = json.loads(path.read_text())
        sliders.update(f_retained=r, f_chunk=c, n_steps=s)
        want = json.loads(json.dumps(cli.derivation_dict(derive(sliders.decl))))
        assert got["params"] == want["params"], (r, c, s)
        assert got["params"]["f_chunk"] == c and got["params"]["f_call"] == c + C.frames_per_token * C.lookahead_tokens
        assert got["catalog"] == want["catalog"], (r, c, s)
        assert got["verdict"] == want["verdict"], (r, c, s)
        k_cli = {row["region"]: row["K"] for row in got["region_table"]}
        k_nb = {k: int(v) for k, v in sliders.table.set_index("region")["K"].items()}
        assert k_cli == k_nb, (r, c, s)
        assert k_cli["estimator_att_cache"] == len(sliders.extents)


def test_one_clock_conversion():
    """convert (a scale taken now) and scaled (a scale a caller keeps) are one arithmetic, one error."""
    from cadencelab.contract.clocks import convert, scale, scaled
    from cadencelab.adapters.mimi import moshi_mimi_declaration

    clocks = moshi_mimi_declaration().clock_map
    assert convert(clocks, 1, "frames", "samples") == scaled(1, scale(clocks, "frames", "samples"), "frames", "samples")
    assert convert(clocks, 3840, "samples", "frames") == 2
    with pytest.raises(ValueError, match=r"kit: 1921 'samples' ticks are not whole 'frames' ticks \(1920 'samples' "
                                         r"per 1 'frames'\)"):
        scaled(1921, scale(clocks, "samples", "frames"), "samples", "frames", "kit")
