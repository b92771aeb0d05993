# %%
r = data.factorial(CONDITION).set_index("arm").loc["S"]
lo, hi = r["latency_delta_lo"], r["latency_delta_hi"]
answer = {"lo": lo, "hi": hi, "verdict": "faster" if hi < 0 else ("slower" if lo > 0 else "no clear difference")}
