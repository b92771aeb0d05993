# %%
answer = dict(elementwise=0, frames=2, output=3)  # read off the audits' records and the outputs above
