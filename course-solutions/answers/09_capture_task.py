# %%
def make_wrapper(model, graphs):
    """One captured graph per exact input shape: warm up, capture, then copy_ in, replay, clone out."""
    cache = {}

    def run(x):
        key = tuple(x.shape)
        if key not in cache:
            static_x = x.clone()
            with graphs.side_stream():  # warm-up: lazy init, autotuning, the allocator, before the capture
                for _ in range(3):
                    model(static_x)
            graph = graphs.graph()
            with graph.capture():
                static_y = model(static_x)
            cache[key] = (static_x, graph, static_y)
        static_x, graph, static_y = cache[key]
        static_x.copy_(x)
        graph.replay()
        return static_y.clone()

    return run
