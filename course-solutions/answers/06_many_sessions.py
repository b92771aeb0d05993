# %%
cap = data.sessions_capacity("speak_heavy", dataset="sessions")
mine = cap[cap["arm"] == "SRc"]
answer = {"sessions": int(mine.loc[mine["all_hold"].astype(bool), "sessions"].max()),
          "plateau": float(mine["goodput"].max())}
