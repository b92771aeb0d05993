# %%
def make_wrapper(model, capture):
    """One captured graph per exact input shape: copy_ in, replay, clone out."""
    graphs = {}

    def run(x):
        key = tuple(x.shape)
        if key not in graphs:
            static_x = x.clone()
            graphs[key] = (static_x, *capture(model, static_x))
        static_x, graph, static_y = graphs[key]
        static_x.copy_(x)
        graph.replay()
        return static_y.clone()

    return run
