# %%
w = profile.windows(trace, "chunk").iloc[-1]  # the chunk window
ws, we = int(w["start_ns"]), int(w["end_ns"])
spans = sorted(zip(host.kernels["start_ns"].clip(ws, we), (host.kernels["start_ns"] + host.kernels["dur_ns"]).clip(ws, we)))
busy_ns, cur = 0, None
for a, b in spans:  # the union of the innermost ops' intervals inside the window
    if cur is None or a > cur[1]:
        busy_ns += 0 if cur is None else cur[1] - cur[0]
        cur = [a, b]
    else:
        cur[1] = max(cur[1], b)
busy_ns += 0 if cur is None else cur[1] - cur[0]
answer = dict(busy_ms=busy_ns / 1e6, slack=1 - busy_ns / (we - ws))
