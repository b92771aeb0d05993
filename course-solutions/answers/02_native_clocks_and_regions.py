# %%
from cadencelab.contract import verdict as classes

d = token2wav_declaration(**EXERCISE)
answer_extents = {r: sorted(trajectory(d, r)["shape_extent"].unique().tolist()) for r in exercises.EXTENT_REGIONS}

# %%
v = classes(token2wav_declaration(**EXERCISE))
answer_K = dict(zip(v["operator"], v["K"].astype(int)))

# %%
rt = region_table(token2wav_declaration(**EXERCISE)).set_index("region")
answer_rho = {r: round(float(rt.loc[r, "rho"]), 2) for r in exercises.RHO_REGIONS}
