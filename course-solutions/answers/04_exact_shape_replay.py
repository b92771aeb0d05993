# %%
answer = dict(new_turn="replay", flush_above_f_chunk="outside_catalog", host_noise="host_rng",
              weights_reloaded="invalidated")
