# %%
def busy_and_slack(starts_ns, ends_ns, window_start_ns, window_end_ns):
    """Busy ms (the union of the intervals inside the window) and slack (the idle share of the window)."""
    spans = sorted(zip(starts_ns.clip(window_start_ns, window_end_ns), ends_ns.clip(window_start_ns, window_end_ns)))
    busy_ns, cur = 0, None
    for a, b in spans:  # merge overlapping intervals, adding each merged run once
        if cur is None or a > cur[1]:
            busy_ns += 0 if cur is None else cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    busy_ns += 0 if cur is None else cur[1] - cur[0]
    wall = window_end_ns - window_start_ns
    return dict(busy_ms=busy_ns / 1e6, slack=(wall - busy_ns) / wall)
