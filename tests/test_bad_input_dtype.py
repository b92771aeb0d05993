"""dtype, device and NaN (issue 39): a region's tensor is checked for its declared dtype and the carries' device,
naming the region (nothing is cast into a carry); outputs are compared as bytes (identical NaNs equal, a NaN
against a number not) and NaN is named in the detail. CPU."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from kit_models import StreamingConformer
from test_kit import conformer_declaration, conformer_steps, conformer_traffic

from cadencelab.adapters.kit import KitModel, StreamingRuntime, Traffic, certify, exact_table, run_block
from cadencelab.contract import SlidingWindow
from cadencelab.state import Carry, ShadowAuditor, bitwise_equal, nan_detail

NAN = float("nan")


def _runtime(step=None, decl=None, **spec):
    model = StreamingConformer()
    good, stock = conformer_steps(model)
    spec = KitModel(decl or conformer_declaration(), step or good, stock, modules=[model], **spec)
    return StreamingRuntime(spec, backend="eager"), good


def _x():
    return conformer_traffic().turns[0][0]


def _refused_without_a_trace(rt, x, match):
    rt.reset()
    before = {n: c.view().clone() for n, c in rt.carries.items()}
    with pytest.raises(ValueError, match=match):
        rt(x)
    assert rt.calls == 0 and all(torch.equal(before[n], c.view()) for n, c in rt.carries.items())


def test_a_step_returning_float64_for_a_float32_region_is_refused_by_name():
    def wide(x, caches, last):
        out, new = good(x, caches, last)
        return out, {**new, "kv": new["kv"].double()}

    rt, good = _runtime()
    rt.ops["encode"].step = wide
    _refused_without_a_trace(rt, _x(), r"region 'kv' is torch.float64;.*dtype='float32'.*nothing is cast")


def test_a_region_declared_int64_is_not_given_floats():
    """A counter region declared int64 (RoPE positions, say): a step returning floats for it is refused."""
    decl = conformer_declaration()
    conv = next(r for r in decl.regions if r.name == "conv")
    decl = dataclasses.replace(decl, regions=tuple(dataclasses.replace(r, dtype="int64") if r is conv else r
                                                   for r in decl.regions))
    rt, _ = _runtime(decl=decl)
    _refused_without_a_trace(rt, _x(), r"region 'conv' is torch.float32;.*dtype='int64'")


def test_init_of_the_wrong_dtype_is_refused():
    decl = conformer_declaration()
    rt, _ = _runtime(init=lambda prompt: {"conv": torch.zeros(1, 8, 14, dtype=torch.float16)})
    with pytest.raises(ValueError, match=r"init for region 'conv' is torch.float16"):
        rt.reset()
    assert decl.region("conv").dtype == "float32"


def test_a_step_output_on_another_device_is_refused_by_name():
    def elsewhere(x, caches, last):
        out, new = good(x, caches, last)
        return out, {**new, "conv": torch.empty(new["conv"].shape, device="meta")}

    rt, good = _runtime()
    rt.ops["encode"].step = elsewhere
    _refused_without_a_trace(rt, _x(), r"region 'conv' is on meta; the runtime's carries are on cpu")


def test_the_dim_order_hint_is_given_only_when_the_dims_are_reordered():
    def transposed(x, caches, last):
        out, new = good(x, caches, last)
        return out, {**new, "conv": new["conv"].transpose(1, 2)}

    def wider(x, caches, last):
        out, new = good(x, caches, last)
        return out, {**new, "conv": torch.cat([new["conv"]] * 2, dim=1)}

    rt, good = _runtime()
    rt.ops["encode"].step = transposed
    _refused_without_a_trace(rt, _x(), "declare the region's dims in the order")
    rt.ops["encode"].step = wider
    with pytest.raises(ValueError) as err:
        rt(_x())
    assert "has shape (1, 16, 16)" in str(err.value) and "order" not in str(err.value)


def test_bitwise_equal_compares_bytes():
    a = torch.tensor([1.0, NAN, 3.0])
    assert bitwise_equal(a, a.clone()) and not torch.equal(a, a.clone())  # identical NaNs: equal bytes
    assert not bitwise_equal(a, torch.tensor([1.0, 2.0, 3.0]))  # a NaN where the other has a number
    assert not bitwise_equal(torch.tensor([0.0]), torch.tensor([-0.0]))  # equal values, other bytes
    assert not bitwise_equal(a, a.double()) and not bitwise_equal(a, a[:2])
    assert bitwise_equal(torch.ones(2, 3).t(), torch.ones(3, 2)) and bitwise_equal(torch.zeros(0), torch.zeros(0))
    assert bitwise_equal(torch.tensor([True, False]), torch.tensor([True, False]))
    assert nan_detail(torch.ones(2), torch.ones(2)) == ""
    assert nan_detail(a, torch.tensor([1.0, 2.0, 3.0])) == \
        "NaN: stock 1, got 0 elements, first where one side is NaN at (1,)"


def test_exact_table_names_nan_dtype_and_missing_calls():
    a = torch.tensor([1.0, NAN])
    t = exact_table([a, a, a, a], [a.clone(), torch.tensor([1.0, 2.0]), a.double()])
    assert t["equal"].tolist() == [True, False, False, False]
    assert "NaN: stock 1, got 0" in t["detail"][1] and t["max_abs_diff"][1] == 0.0  # over the numbers on both sides
    assert "dtype torch.float64 where the stock step gives torch.float32" in t["detail"][2]
    assert "no output" in t["detail"][3] and t["max_abs_diff"][3] == float("inf")


def _nan_traffic():
    """The conformer's traffic with one NaN in one call's input: every later output holds NaN, on both sides."""
    turns = [[x.clone() for x in turn] for turn in conformer_traffic().turns]
    turns[0][2][0, 3, 1] = NAN
    return Traffic(turns)


def test_identical_nan_outputs_certify_and_count_as_exact():
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    traffic = _nan_traffic()
    spec = KitModel(conformer_declaration(), step, stock, traffic, modules=[model])
    cert = certify(spec, backend="eager")
    assert any(torch.isnan(o).any() for o in cert.outputs)
    assert cert.exact["equal"].all() and cert.ok, cert.table
    b0 = StreamingRuntime(spec, "B0")
    res = run_block(b0, traffic, cert.stock_outputs)
    assert res["equal"] == res["calls"] == traffic.calls  # B0 equals its own stock outputs, NaN and all


def test_a_nan_where_the_stock_step_has_a_number_is_named():
    model = StreamingConformer()
    step, stock = conformer_steps(model)

    def poisoned(x, caches, last):
        out, new = step(x, caches, last)
        out = out.clone()
        out[0, 0, 0] = NAN
        return out, new

    cert = certify(KitModel(conformer_declaration(), poisoned, stock, conformer_traffic(), modules=[model]),
                   backend="eager")
    assert not cert.ok and not cert.exact["equal"].any()
    assert cert.exact["detail"].str.startswith("NaN: stock 0, got 1 elements").all()


def test_the_audit_agrees_on_identical_nan_state():
    aud = ShadowAuditor()
    c = Carry.allocate("kv", SlidingWindow(2), (2,), 0)
    c.reset_in_place(torch.tensor([NAN, 1.0]))
    assert aud.compare_with(c, torch.tensor([NAN, 1.0]), 0)
    c.reset_in_place(torch.tensor([0.0, 1.0]))
    assert not aud.compare_with(c, torch.tensor([-0.0, 1.0]), 1)
    assert "other bytes" in aud.records[-1]["detail"]
