# %%
second = data.duplex_summary(duplex)
b0, src = second.loc["B0"], second.loc["SRc"]
b0_idle_ms = b0["synthesis_ms_median"] * b0["synthesis_slack_frac"]
per_launch_us = b0_idle_ms * 1e3 / b0["synthesis_launches"]
answer = dict(b0_idle_ms=b0_idle_ms, per_launch_us=per_launch_us,
              src_predicted_idle_ms=src["synthesis_launches"] * per_launch_us / 1e3)
