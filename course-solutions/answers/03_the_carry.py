# %%
answer = dict(elementwise=0, frames=2, output=3)  # read off the audits' records and the outputs above

# %%
def retain(buf, n, new, sink, window):
    """PromptRetained(sink, window) in place: append while it fits; else keep the sink, slide the newest frames."""
    k, cap = new.shape[0], sink + window
    if n + k <= cap:
        buf[n:n + k] = new
        return n + k
    keep = window - k  # the held frames after the sink that stay
    buf[sink:sink + keep] = buf[n - keep:n].clone()  # out first: source and destination overlap
    buf[sink + keep:cap] = new
    return cap
