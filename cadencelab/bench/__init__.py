"""Studies that run in one call and write their full results (JSON/CSV, traces) to a folder."""
