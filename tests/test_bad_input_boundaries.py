"""Bad input at the library's boundaries, each refused with one line naming what was given and what is
allowed: declarations (zero extents, NaN scalars, names), allocations past free memory (state.alloc,
the carry), profile windows whose end precedes their start, and ``cadencelab catalog`` values far past
the stock (refused past available memory, else a warning naming the region; never "ρ 0.00" silently).
"""

from __future__ import annotations

import pandas as pd
import pytest

from cadencelab import cli
from cadencelab.contract import DeclarationError, Fixed
from cadencelab.adapters.registry import DECLARATIONS, load
from cadencelab.profile import busy_ns, windows
from cadencelab.state import AllocationRefused, Carry, allocate

#: every registered declaration by name (the registry's, loaded)
EXAMPLES = {name: load(target) for name, target in DECLARATIONS.items()}

# ---------------------------------------------------------------------------------------
# declarations
# ---------------------------------------------------------------------------------------


def _decl(**region):
    """The token2wav declaration with its first region changed (``Region`` fields), validated."""
    import dataclasses

    d = EXAMPLES["token2wav"]()
    r0 = dataclasses.replace(d.regions[0], **region)
    return dataclasses.replace(d, regions=(r0, *d.regions[1:]))


def _op(**op):
    import dataclasses

    d = EXAMPLES["token2wav"]()
    o0 = dataclasses.replace(d.operators[0], **op)
    return dataclasses.replace(d, operators=(o0, *d.operators[1:]))


@pytest.mark.parametrize("make, field, says", [
    (lambda: Fixed(0).validate("p"), "p.extent", "integer >= 1, got 0"),
    (lambda: Fixed(-2).validate("p"), "p.extent", "got -2"),
    (lambda: Fixed(2.5).validate("p"), "p.extent", "got 2.5"),
    (lambda: _decl(policy=Fixed(0)), "policy.extent", "got 0"),
    (lambda: _op(scalars={"cfg_rate": float("nan")}), "scalars.cfg_rate", "must be finite"),
    (lambda: _op(scalars={"scale": float("inf")}), "scalars.scale", "must be finite"),
    (lambda: _op(scalars={"scale": -float("inf")}), "scalars.scale", "must be finite"),
    (lambda: _decl(name=""), ".name", "non-empty string name"),
    (lambda: _decl(name=" estimator"), ".name", "surrounding whitespace"),
    (lambda: _decl(name="a\nb"), ".name", "unprintable"),
    (lambda: _decl(name="x" * 500), ".name", "500 characters"),
    (lambda: _decl(name=5), ".name", "non-empty string name"),
    (lambda: _op(name="op\t1"), ".name", "unprintable"),
    (lambda: EXAMPLES["token2wav"]().__class__(**{**EXAMPLES["token2wav"]().__dict__, "model": "  "}),
     "model", "surrounding whitespace"),
])
def test_declarations_refuse_zero_extents_nan_scalars_and_bad_names(make, field, says):
    with pytest.raises(DeclarationError) as e:
        make()
    assert field in e.value.field and says in e.value.reason and "\n" not in str(e.value), str(e.value)


def test_good_declarations_still_pass():
    for make in EXAMPLES.values():
        assert make().regions  # every shipped declaration validates under the new checks


# ---------------------------------------------------------------------------------------
# allocations past free memory
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("params, region", [
    (dict(f_prompt=10**12), "'solver_workspace'"),
    (dict(n_steps=10**9), "'solver_workspace'"),
    (dict(f_retained=10**11), "'solver_workspace'"),
])
def test_allocate_refuses_past_free_memory_naming_the_region(params, region):
    d = EXAMPLES["token2wav"](**params)
    with pytest.raises(AllocationRefused) as e:
        allocate(d)
    msg = str(e.value)
    assert region in msg and "free on cpu" in msg and "TiB" in msg and "\n" not in msg, msg


def test_allocate_refuses_unbounded_and_unknown_regions():
    with pytest.raises(AllocationRefused, match="'kv_cache'.*unbounded"):
        allocate(EXAMPLES["unbounded-backbone"]())
    with pytest.raises(KeyError, match="no region 'nope'"):
        allocate(EXAMPLES["token2wav"](), regions=["nope"])
    assert allocate(EXAMPLES["token2wav"](), regions=["vocoder_mel_cache"])["vocoder_mel_cache"].shape == (1, 80, 8)


@pytest.mark.parametrize("shape, dim, says", [
    ((10**8, 10**8), 1, "needs"),  # 1.6e16 bytes of float32
    ((4, 2**62), 1, "needs"),
    ((4, -1), 1, "non-negative whole extents"),
    ((4, 2.5), 1, "non-negative whole extents"),
    ((4, 8), 5, "dim 5 outside"),
])
def test_a_carry_too_large_or_malformed_is_refused_before_allocating(shape, dim, says):
    with pytest.raises((AllocationRefused, ValueError), match=says) as e:
        Carry.allocate("big", Fixed(3), shape, dim)
    assert "'big'" in str(e.value)


# ---------------------------------------------------------------------------------------
# profile windows
# ---------------------------------------------------------------------------------------

KERNELS = pd.DataFrame(dict(name=["a", "b"], start_ns=[0, 100], end_ns=[40, 110], cat="kernel"))


@pytest.mark.parametrize("window, says", [
    ((100, 50), "end 50 ns precedes start 100 ns"),
    ((0.5, 10), "start must be a whole number of ns, got 0.5"),
    ((float("nan"), 10), "got nan"),
    ((0, float("inf")), "end must be a whole number"),
    (("0", 10), "start must be a whole number"),
    ((True, 10), "got True"),
    (pd.DataFrame(dict(start_ns=[0, 90], end_ns=[10, 80])), "row 1, start_ns 90, end_ns 80"),
    (pd.DataFrame(dict(start_ns=[0, None], end_ns=[10, 80])), "start_ns of row 1"),
    (pd.DataFrame(dict(start_ns=[0, 1.5], end_ns=[10, 80])), "start_ns of row 1 is 1.5"),
    (pd.DataFrame(dict(start_ns=["x"], end_ns=[10])), "start_ns of row 0 is 'x'"),
])
def test_windows_whose_end_precedes_start_are_refused(window, says):
    with pytest.raises(ValueError, match=None) as e:
        windows(None, window)
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_busy_and_span_refuse_backwards_bounds():
    assert busy_ns(KERNELS, 0, 200) == 50
    with pytest.raises(ValueError, match="busy_ns: end 10 ns precedes start 20 ns"):
        busy_ns(KERNELS, 20, 10)
    with pytest.raises(ValueError, match="span: end 0 ns precedes start 5 ns"):
        windows(None, None, span=(5, 0))
    assert windows(None, (0, 0))["end_ns"].tolist() == [0]  # an empty window is a window


# ---------------------------------------------------------------------------------------
# catalog values far past the stock
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, names", [
    (["--steps", "1000000000"], ["--steps 1000000000", "'solver_workspace'", "free"]),
    (["--f-prompt", "1000000000000"], ["--f-prompt 1000000000000", "'solver_workspace'"]),
    (["--f-retained", "100000000000"], ["--f-retained 100000000000", "TiB"]),
    (["--f-prompt", "100000000", "--steps", "16"], ["--f-prompt 100000000, --steps 16"]),
])
def test_catalog_refuses_a_state_past_free_memory(capsys, argv, names):
    assert cli.main(["catalog", *argv]) == 2
    out = capsys.readouterr()
    line = [ln for ln in out.err.splitlines() if ln.strip()]
    assert len(line) == 1 and not out.out, out
    for n in names:
        assert n in line[0], line[0]


@pytest.mark.parametrize("argv, regions", [
    (["--steps", "20"], ["'estimator_att_cache'", "'estimator_cnn_cache'"]),
    (["--f-prompt", "1000"], ["'estimator_step_workspace'"]),
])
def test_catalog_warns_per_region_past_the_stock(capsys, argv, regions):
    assert cli.main(["catalog", *argv]) == 0
    out = capsys.readouterr()
    warnings = [ln for ln in out.err.splitlines() if "warning" in ln]
    assert len(warnings) == len(regions)
    for w, r in zip(warnings, regions):
        assert r in w and "the stock runtime cannot hold it" in w and " ".join(argv) in w
    assert " 0.00 " not in out.out  # a ρ below 0.01 prints its digits


@pytest.mark.parametrize("model", sorted(EXAMPLES))
def test_catalog_at_the_stock_warns_nothing(capsys, model):
    """Every shipped declaration at its own values (an unbounded region is C2's finding, not a size refused)."""
    assert cli.main(["catalog", "--model", model]) == 0
    assert "warning" not in capsys.readouterr().err
