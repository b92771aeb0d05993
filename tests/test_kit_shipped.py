"""Shipped models as a declaration plus a step on the adapter kit, each bit-exact with its recorded reference:
the Freeze-Omni-style decoder's carry path (every conv's left context a declared region) against the
full-history decode and the hand-wired CarryStream. CPU, eager backend."""

from __future__ import annotations

import torch

from cadencelab.adapters import freeze_style as F
from cadencelab.adapters.kit import factorial


def _turn_tokens(m):
    return [torch.cat(list(turn), dim=1) for turn in m.traffic.turns]


def test_freeze_style_on_the_kit_is_certified_and_equals_full_history():
    m = F.kit_model()
    assert [x.shape[1] for x in m.traffic.turns[0]] == [20, 20, 20, 7] and len(m.traffic.turns[1]) == 2
    cert = m.certify(backend="eager")
    assert cert.ok, cert.table
    assert sorted(cert.catalog.loc[cert.catalog["kind"] == "steady", "label"]) == [(0, 20), (20, 20)]  # width 2
    tokens = _turn_tokens(m)
    model = m.modules[0]
    full = F.stream_reference(model, tokens, F.FULL_HISTORY)
    carry = F.stream_with_carry(model, tokens)
    assert len(full) == len(carry) == len(cert.outputs) == m.traffic.calls
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(full, cert.outputs, carry))
    rt = cert.runtime
    assert [rt.carries[n].capacity for n in F.KIT_REGIONS] == list(model.cfg.contexts)


def test_freeze_style_factorial_on_the_kit():
    df = factorial(F.kit_model(), arms=["B0", "S", "SRc"], blocks=1, warmup=0, backend="eager")
    assert df["bit_exact"].all() and df.attrs["certified"]
    s = df.set_index("arm")["state_bytes"]
    assert s["S"] == s["SRc"] == sum(c.buffer.numel() * c.buffer.element_size()
                                     for c in F.kit_model().runtime("S").carries.values())
