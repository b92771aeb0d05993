# %%
from cadencelab.contract import Admission, Clock, Declaration, Fixed, Operator, Region, Ring, SlidingWindow
from cadencelab.course.capstone_models import attend_ring, decode, front, to_samples


def declare(s) -> Declaration:
    """The picked model's declaration, every size read from s."""
    if MODEL == "window":
        clocks = (Clock("calls", "decoder call"),
                  Clock("frames", "latent frame", parent="calls", ratio=s.chunk, offset=s.lookahead),
                  Clock("samples", "audio sample", parent="frames", ratio=s.hop))
        kv = Region("kv", clock="frames", shape=(2, s.heads, "frames", s.dim // s.heads),
                    policy=SlidingWindow(s.window), lifetime="turn", address_stable=True)
        tail = Region("tail", clock="samples", shape=(1, "samples"), policy=Fixed(s.taps - 1), lifetime="turn",
                      address_stable=True)
        op = Operator("decode", reads=("kv",), clock="frames", flush="lookahead")
        return Declaration("window-decoder", clocks, (kv, tail), (op,), admission=Admission("frames"),
                           call_clock="calls")
    clocks = (Clock("calls", "decoder call"), Clock("frames", "codec frame", parent="calls", ratio=s.chunk))
    kv = Region("kv", clock="frames", shape=(1, "frames", s.dim), policy=Ring(s.capacity), lifetime="turn")
    ctx = Region("ctx", clock="frames", shape=(1, "frames", s.dim), policy=Fixed(s.kernel - 1), lifetime="turn")
    op = Operator("decode", reads=("kv", "ctx"), clock="frames", flush=(1, s.chunk - 1, 1))
    return Declaration("codec-decoder", clocks, (kv, ctx), (op,), admission=Admission("frames"), call_clock="calls")


def make_step(model):
    """The views-form step: step(x, caches, last) -> (out, new frames per region)."""
    if MODEL == "window":
        def step(x, caches, last):
            out, kv, raw = decode(model, x, caches["kv"], caches["tail"], last)
            return out, {"kv": kv, "tail": raw}

        return step

    def step(x, caches, last):
        ring = caches["kv"]
        h = front(model, x, caches["ctx"])
        k = model.key(h)
        ring.write(k)  # the call's keys at the ring's next slots, on the device
        return to_samples(model, attend_ring(model, h, ring.buffer, ring.filled(k.shape[1]))), {"kv": k, "ctx": x}

    return step
