# %%
def declaration(s: Sizes) -> Declaration:
    """The sample encoder's declaration, every size read from s."""
    clocks = (Clock("calls", "encoder call"),
              Clock("frames", "encoder frame", parent="calls", ratio=s.chunk, offset=s.lookahead),
              Clock("samples", "audio sample", parent="frames", ratio=s.hop))
    kv = Region("kv", clock="frames", shape=(2, s.heads, "frames", s.dim // s.heads),
                policy=PromptRetained(s.sink, s.window), lifetime="turn", address_stable=True)
    ctx = Region("ctx", clock="samples", shape=(1, "samples"), policy=Fixed(s.context), lifetime="turn",
                 address_stable=True)
    op = Operator("encode", reads=("kv",), clock="frames", flush="lookahead")
    return Declaration("sample-encoder", clocks, (kv, ctx), (op,), admission=Admission("frames"), call_clock="calls")
