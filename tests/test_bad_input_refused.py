"""A refused call leaves no trace (issue 39): a step that writes into its carries (``Caches.append``, a
``RingView.write``) and then fails or returns a bad shape is refused, the runtime undoes what it wrote, and the
rest of the turn equals the stock step's; a write the runtime cannot undo (an in-place step's own code) refuses
every call until ``reset()``. One test per form: views (newest-first append, ring), stock, inplace. CPU."""

from __future__ import annotations

import pytest
import torch
from kit_models import RingStreamer, SelfRing
from test_kit_inplace import _runtime as inplace_runtime
from test_kit_operators import ring_declaration, ring_steps, ring_traffic

from cadencelab.adapters import teaching
from cadencelab.adapters.kit import KitModel, StreamingRuntime, Traffic, run_stock

KV, CONTEXT = teaching.KV, teaching.CONTEXT


def _failing(step, at: int, how: str):
    """``step``, except that its ``at``-th call (from 0) writes as usual, then raises or returns a bad shape."""
    seen = [0]

    def wrapped(x, caches, last):
        i, seen[0] = seen[0], seen[0] + 1
        out, new = step(x, caches, last)
        if i != at:
            return out, new
        if how == "raise":
            raise RuntimeError("the user's step failed after writing")
        name = next(iter(new))
        return out, {**new, name: new[name][..., :1]}  # a region of the wrong shape

    return wrapped


def _turn_without(runtime, turn, prompt, skip: int):
    """The turn's outputs with call ``skip`` refused (each refusal checked), the others as returned."""
    runtime.reset(prompt)
    outs = []
    for i, x in enumerate(turn):
        last = i == len(turn) - 1
        if i == skip:
            before = {n: c.view().clone() for n, c in runtime.carries.items()}
            lengths = {n: c.length for n, c in runtime.carries.items()}
            ends = {n: (e.host, int(e.buffer)) for n, e in runtime.ends.items()}
            calls, ended = runtime.calls, set(runtime.ended)
            with pytest.raises((ValueError, RuntimeError)) as err:
                runtime(x, last)
            assert "as they were before it" in "".join(getattr(err.value, "__notes__", []))
            assert {n: c.length for n, c in runtime.carries.items()} == lengths
            assert all(torch.equal(before[n], c.view()) for n, c in runtime.carries.items())
            assert {n: (e.host, int(e.buffer)) for n, e in runtime.ends.items()} == ends
            assert runtime.calls == calls and runtime.ended == ended
            continue
        outs.append(runtime(x, last))
    return outs


def _teaching():
    cfg = teaching.TeachingConfig()
    model, stream = teaching.TinyStreamer(cfg), teaching.make_stream(cfg)
    step, stock = teaching.kit_steps(model)
    return model, stream, step, stock


@pytest.mark.parametrize("how", ["raise", "shape"])
@pytest.mark.parametrize("replay", [False, True], ids=["S", "SRc"])
def test_views_form_a_refused_append_is_undone(how, replay):
    """The teaching model's step appends its new K|V into the newest-first carry, then fails: the carry is shifted
    back and calls 3.. equal the stock step's on the same turn without the refused call."""
    model, stream, step, stock = _teaching()
    decl, init = teaching.declaration(model.cfg), teaching.prime_init(model)
    turn = stream.turns[0]
    spec = KitModel(decl, _failing(step, 1, how), stock, init=init, modules=[model])
    rt = StreamingRuntime(spec, "SRc" if replay else "S", backend="eager")
    got = _turn_without(rt, turn, stream.prompt, skip=1)
    want, _ = run_stock(KitModel(decl, stock=stock, traffic=Traffic([turn[:1] + turn[2:]], [stream.prompt]),
                                 init=init))
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(want, got))


def test_views_form_a_refused_ring_write_is_undone():
    """A ring step writes its keys through its RingView (overwriting the oldest slots once the ring wraps), then
    fails: the slots are restored and the ring position stays; the rest equals the stock step."""
    model = RingStreamer()
    step, stock = ring_steps(model)
    traffic = ring_traffic()
    turn = max(traffic.turns, key=len)
    skip = len(turn) - 2  # late in the turn: the ring has wrapped
    rt = StreamingRuntime(KitModel(ring_declaration(), _failing(step, skip, "raise"), stock, modules=[model]),
                          backend="eager")
    got = _turn_without(rt, turn, None, skip=skip)
    want, _ = run_stock(KitModel(ring_declaration(), stock=stock, traffic=Traffic([turn[:skip] + turn[skip + 1:]])))
    assert all(torch.equal(a, b) for a, b in zip(want, got))


def test_stock_form_a_refused_append_is_undone():
    """A stock-form step attends over its carry with the new frames appended in place (returning the view),
    then returns a context of the wrong shape: the append is undone, the turn goes on as the stock step's."""
    model, stream, _, stock = _teaching()
    decl, init = teaching.declaration(model.cfg), teaching.prime_init(model)

    def step(x, caches, last):
        y, q, new, nxt = model.project(x, caches[CONTEXT])
        kv = caches.append(KV, new)
        return model.attend(q, kv, y), {KV: kv, CONTEXT: nxt}

    turn = stream.turns[0]
    rt = StreamingRuntime(KitModel(decl, _failing(step, 2, "shape"), stock, form="stock", init=init), backend="eager")
    got = _turn_without(rt, turn, stream.prompt, skip=2)
    want, _ = run_stock(KitModel(decl, stock=stock, traffic=Traffic([turn[:2] + turn[3:]], [stream.prompt]),
                                 init=init))
    assert all(torch.equal(a, b) for a, b in zip(want, got))


def test_inplace_form_a_step_failing_before_writing_leaves_the_turn_exact():
    model = SelfRing()
    turn = ring_traffic().turns[0]
    seen = [0]

    def step(x, caches, last):
        seen[0] += 1
        if seen[0] == 2:
            raise RuntimeError("refused before any write")
        return model(x)

    rt = inplace_runtime(model)
    rt.ops["attend"].step = step
    got = _turn_without(rt, turn, None, skip=1)
    alone = SelfRing()
    alone.reset_state()
    with torch.inference_mode():
        want = [alone(x).clone() for i, x in enumerate(turn) if i != 1]
    assert all(torch.equal(a, b) for a, b in zip(want, got))


def test_inplace_form_a_step_that_wrote_then_failed_refuses_the_turn_until_reset():
    """The model's own code wrote its ring and position in place, then raised: that cannot be undone, so every
    later call is refused (naming the regions and reset()) until reset(); the next turn is exact."""
    model = SelfRing()
    turn = ring_traffic().turns[0]
    seen = [0]

    def step(x, caches, last):
        seen[0] += 1
        out = model(x)
        if seen[0] == 2:
            raise RuntimeError("failed after writing in place")
        return out

    rt = inplace_runtime(model)
    rt.ops["attend"].step = step
    rt.reset()
    rt(turn[0])
    with pytest.raises(RuntimeError) as err:
        rt(turn[1])
    assert "state is lost" in "".join(err.value.__notes__) and "'kv'" in "".join(err.value.__notes__)
    with pytest.raises(ValueError, match=r"wrote \['kv', 'kv.end'\] in place.*call reset\(\)"):
        rt(turn[2])
    got = _turn_without(rt, turn, None, skip=-1)
    alone = SelfRing()
    alone.reset_state()
    with torch.inference_mode():
        want = [alone(x).clone() for x in turn]
    assert all(torch.equal(a, b) for a, b in zip(want, got))


def test_views_form_a_write_through_a_view_refuses_until_reset():
    """A views-form step writing its carry through the view it was given (not Caches.append) and then failing:
    the runtime sees the write (version counters) and refuses the turn rather than go on from moved state."""
    model, stream, _, _ = _teaching()

    def sneaky(x, caches, last):
        caches[KV].mul_(2)
        raise RuntimeError("failed after writing through the view")

    rt = StreamingRuntime(KitModel(teaching.declaration(model.cfg), sneaky, init=teaching.prime_init(model)),
                          backend="eager")
    rt.reset(stream.prompt)
    with pytest.raises(RuntimeError):
        rt(stream.turns[0][0])
    with pytest.raises(ValueError, match=r"wrote \['kv_cache'\] in place"):
        rt(stream.turns[0][1])


def test_a_second_append_of_one_region_in_a_call_then_a_failure_refuses_until_reset():
    """Two newest-first appends of one region in one call cannot be undone exactly: a failure then refuses the
    turn (naming the region) rather than go on from a carry that lost frames."""
    model, stream, _, _ = _teaching()

    def twice(x, caches, last):
        _, _, new, _ = model.project(x, caches[CONTEXT])
        caches.append(KV, new)
        caches.append(KV, new)
        raise RuntimeError("failed after two appends")

    rt = StreamingRuntime(KitModel(teaching.declaration(model.cfg), twice, init=teaching.prime_init(model)),
                          backend="eager")
    rt.reset(stream.prompt)
    with pytest.raises(RuntimeError):
        rt(stream.turns[0][0])
    with pytest.raises(ValueError, match=r"wrote \['kv_cache'\] in place"):
        rt(stream.turns[0][1])
