# %%
window = anatomy.profiled_window(duplex).set_index(["arm", "range"])
b0, src = window.loc[("B0", "synthesis")], window.loc[("SRc", "synthesis")]
b0_idle_ms = b0["wall_ms"] * b0["slack_frac"]  # both from the profiled second
per_launch_us = b0_idle_ms * 1e3 / b0["launches"]
answer = dict(b0_idle_ms=b0_idle_ms, per_launch_us=per_launch_us,
              src_predicted_idle_ms=src["launches"] * per_launch_us / 1e3)
