"""Model-family adapters: each wraps one vendor runtime behind declared configs and a stock (B0) arm."""
