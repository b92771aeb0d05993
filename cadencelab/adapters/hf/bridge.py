"""transformers' cache objects over the kit's regions: a step hands the model its own cache types.

One :class:`Bridge` per call, in one of two modes:

* over the kit's carries (a views-form step, ``own=False``): :meth:`Bridge.padding` is a conv padding cache
  whose per-layer left context is a region's view, :meth:`Bridge.kv` a ``transformers.Cache`` whose layers'
  keys and values are views of regions (dynamic and sliding layers: the call's new keys and values appended
  in place, no copy of the cache; static layers: a :class:`~cadencelab.contract.Ring` region written at its
  device end, as ``StaticCache`` writes at its count), and :meth:`Bridge.positions` the RoPE positions read from a
  :class:`~cadencelab.contract.Counter` region on the device. :meth:`Bridge.result` is then what the call adds
  to each region, recorded as the model handed it to its caches (no subclass of the model's caches to write);
* as the model's own step (``own=True``): the same calls build the model's own cache objects
  (``DynamicCache``, ``StaticCache``, its padding cache) from the state tensors, run the model's own update code, and
  :meth:`Bridge.result` is the model's state afterwards, the counter included: the kit's stock step.

Where a region is absent or empty (a turn's start) the model starts it itself (its own ``_cache_init``,
an uninitialised layer): the initial state is the model's, never one the declaration invents. A region
holding K and V is declared ``(2, batch, kv_heads, clock, head_dim)``; a padding region ``(batch,
channels, clock)``; a counter ``(1, clock)`` of int64.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

__all__ = ["Bridge", "CarriedLayer", "StaticCarriedLayer", "cache_layers", "kv_shape", "padding_init"]


#: the release whose cache and Mimi streaming API the adapters are written against (5.25 renamed
#: ``past_key_values`` to ``cache`` and gave Mimi's encoder and decoder their own configs and caches)
TRANSFORMERS_MIN = (5, 25)

try:
    import transformers
    import transformers.cache_utils as _cu
except ImportError as e:  # the test extra installs it
    raise ImportError("cadencelab.adapters.hf needs HF transformers: `pip install 'transformers>=5.25'`") from e


def _release(version: str) -> tuple:
    parts = []
    for p in version.split(".")[:2]:
        digits = "".join(c for c in p if c.isdigit()) if p else ""
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


if _release(transformers.__version__) < TRANSFORMERS_MIN:  # fail at import, not as a wrong call deep inside
    raise ImportError(f"cadencelab.adapters.hf needs transformers>={'.'.join(map(str, TRANSFORMERS_MIN))} "
                      f"(found {transformers.__version__}): `pip install 'transformers>=5.25'`")


def _transformers():
    return _cu


def _extent(t) -> int:
    return 0 if t is None else t.shape[-1 if t.dim() == 3 else -2]


def cache_layers(config) -> list:
    """The model's own cache layers for ``config`` (what ``DynamicCache(config=config)`` holds), unfilled."""
    return list(_transformers().DynamicCache(config=config).layers)


def kv_shape(config, batch: int = 1) -> tuple:
    """(kv_heads, head_dim) of a decoder ``config`` (for a K/V region's declared shape)."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return heads, head_dim


class CarriedLayer(_cu.CacheLayerMixin):
    """One attention layer's cache whose keys and values are a region's view (``(2, B, H, T, D)``).

    ``update`` appends the call's keys and values into the carry in place (``Caches.append``: the region is
    declared with ``envelope="attended"``) and returns the attended keys and values as views; the mask
    sizes are the cache's extent (the relative offsets the model's own layer gives)."""

    is_compileable = False
    is_croppable = False

    def __init__(self, bridge: Bridge, region: str, sliding_window: int | None):
        super().__init__()
        view = bridge.caches[region]
        self.bridge, self.region, self.sliding_window = bridge, region, sliding_window
        self.is_sliding = sliding_window is not None
        self.length = view.shape[-2]
        self.keys, self.values = view[0], view[1]
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        new = torch.stack((key_states, value_states))
        self.bridge.new[self.region] = new
        caches = self.bridge.caches
        full = caches.append(self.region, new) if hasattr(caches, "append") else \
            torch.cat((caches[self.region], new), dim=-2)
        self.keys, self.values = full[0], full[1]
        return self.keys, self.values

    def lazy_initialization(self, key_states, value_states) -> None:
        return None

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_max_length(self) -> int:
        return self.sliding_window if self.sliding_window is not None else -1

    def reset(self) -> None:
        raise RuntimeError(f"the kit resets region '{self.region}' at a turn's start, not the model")


class StaticCarriedLayer(_cu.CacheLayerMixin):
    """A static layer (as transformers' ``StaticLayer``: ``L`` slots preallocated, the call's keys and values
    written at the count, all ``L`` attended under a mask) over a :class:`~cadencelab.contract.Ring` region of
    capacity ``L``: its keys and values are the ring's buffer, written through its
    :class:`~cadencelab.adapters.kit.RingView` at the ring's device end (the count, never read on the host)."""

    is_compileable = True
    is_croppable = False
    is_sliding = False

    def __init__(self, bridge: Bridge, region: str):
        super().__init__()
        ring = bridge.caches[region]
        if not hasattr(ring, "write"):
            raise ValueError(f"a static layer's region '{region}' must be a Ring region (the step gets its RingView)")
        self.bridge, self.region, self.ring = bridge, region, ring
        self.keys, self.values = ring.buffer[0], ring.buffer[1]
        self.max_cache_len, self.is_initialized = ring.capacity, True

    def update(self, key_states, value_states, *args, **kwargs):
        new = torch.stack((key_states, value_states))
        self.ring.write(new)
        self.bridge.new[self.region] = new
        return self.keys, self.values

    def lazy_initialization(self, key_states, value_states) -> None:
        return None

    def get_seq_length(self):
        return self.ring.end

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.max_cache_len, 0

    def get_max_length(self) -> int:
        return self.max_cache_len

    def reset(self) -> None:
        raise RuntimeError(f"the kit resets region '{self.region}' at a turn's start, not the model")


class Bridge:
    """One call's caches as the model's cache objects (see the module docstring)."""

    def __init__(self, caches: Mapping, own: bool = False):
        self.caches, self.own, self.new = caches, own, {}
        self._padding = self._kv = self._pos = None

    def _given(self, name: str):
        t = self.caches.get(name)
        return None if t is None or _extent(t) == 0 else t

    # -- conv padding ---------------------------------------------------------------------
    def padding(self, template, regions: Mapping[int, str]):
        """A padding cache like ``template`` (the model's own, e.g. ``MimiConv1dPaddingCache``) whose layer
        ``i``'s left context is region ``regions[i]``; layers without a region must have no padding."""
        missing = [i for i, p in enumerate(template.per_layer_padding) if int(p) > 0 and i not in regions]
        if missing:
            raise ValueError(f"conv layers {missing} keep left context (padding "
                             f"{[int(template.per_layer_padding[i]) for i in missing]}) but no region holds it")
        pc = type(template)(len(template.per_layer_padding), template.per_layer_padding,
                            template.per_layer_padding_mode, template.per_layer_in_channels)
        if self.own:
            for i, name in regions.items():
                pc.padding_cache[i] = self._given(name)
            self._padding = (pc, regions)
            return pc
        return _PaddingView(self, pc, regions)

    # -- attention K/V ----------------------------------------------------------------------
    def kv(self, regions: Sequence[str], config, max_cache_len: int | None = None, count: str | None = None):
        """A ``transformers.Cache`` whose layer ``i`` holds region ``regions[i]`` (K and V stacked): the model's
        dynamic or sliding layers; with ``max_cache_len``, its static layers (``StaticCache``) over Ring regions
        of that capacity, ``count`` naming the counter region that holds the frames written (the own mode's
        ``cumulative_length``)."""
        cu = _transformers()
        if max_cache_len is not None:
            return self._static(regions, config, max_cache_len, count)
        layers = cache_layers(config)
        if len(layers) != len(regions):
            raise ValueError(f"the model's cache has {len(layers)} layers; {len(regions)} K/V regions given")
        if self.own:
            for layer, name in zip(layers, regions):
                t = self._given(name)
                if t is not None:  # the model's own layer, filled with the state (its count: the cache's extent)
                    layer.lazy_initialization(t[0], t[1])
                    layer.keys, layer.values = t[0], t[1]
                    if hasattr(layer, "cumulative_length"):
                        layer.cumulative_length = t.shape[-2]
            cache = cu.DynamicCache(config=config)
            cache.layers = layers
            self._kv = (cache, regions)
            return cache
        return cu.Cache(layers=[CarriedLayer(self, n, getattr(la, "sliding_window", None) if getattr(la, "is_sliding",
                                                                                                     False) else None)
                                for la, n in zip(layers, regions)])

    def _static(self, regions, config, max_cache_len: int, count: str | None):
        if not self.own:
            return _cu.Cache(layers=[StaticCarriedLayer(self, n) for n in regions])
        cache = _cu.StaticCache(config=config, max_cache_len=max_cache_len)
        if len(cache.layers) != len(regions):
            raise ValueError(f"the model's cache has {len(cache.layers)} layers; {len(regions)} K/V regions given")
        n = self.caches.get(count) if count is not None else None
        for layer, name in zip(cache.layers, regions):
            t = self.caches.get(name)
            if t is not None:  # the model's own static layer, filled with the state and its count
                layer.lazy_initialization(t[0], t[1])
                layer.keys.copy_(t[0])
                layer.values.copy_(t[1])
                if n is not None:
                    layer.cumulative_length.copy_(n.reshape(()))
        self._kv = (cache, regions)
        return cache

    # -- counters ---------------------------------------------------------------------------
    def positions(self, region: str, n: int, device=None) -> torch.Tensor:
        """Positions of the call's ``n`` frames, ``(1, n)`` int64 on the device: the counter region's value
        plus 0..n-1 (the model's own start, 0, where the region is absent)."""
        start = self.caches.get(region)
        if start is not None and start.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"region '{region}' holds positions: declare it an int64 Counter, got {start.dtype}")
        dev = start.device if start is not None else device
        pos = torch.arange(n, device=dev).unsqueeze(0)
        pos = pos + start.reshape(1, 1).to(torch.int64) if start is not None else pos
        self._pos = (region, pos)
        return pos

    # -- what the call leaves ---------------------------------------------------------------
    def result(self) -> dict:
        """Views mode: the frames the call adds to each region (a counter: none, the runtime advances it).
        Own mode: the model's state after the call, one tensor per region (its count included)."""
        if not self.own:
            return dict(self.new)
        out = {}
        if self._padding is not None:
            pc, regions = self._padding
            out.update({name: pc.padding_cache[i] for i, name in regions.items()})
        if self._kv is not None:
            cache, regions = self._kv
            out.update({name: torch.stack((la.keys, la.values)) for la, name in zip(cache.layers, regions)
                        if la.is_initialized})
        if self._pos is not None:
            region, pos = self._pos
            out[region] = pos[:, -1:] + 1
        return out


class _PaddingView:
    """The padding cache's protocol (``update(hidden_states, layer_idx)``) over the regions' views: returns
    a layer's left context and records the layer's input as the frames the call adds to its region. An
    empty region (a turn's first call) is started by the model's own ``_cache_init``."""

    def __init__(self, bridge: Bridge, template, regions: Mapping[int, str]):
        self.bridge, self.template, self.regions = bridge, template, regions

    def update(self, hidden_states, layer_idx: int):
        name = self.regions.get(layer_idx)
        cached = self.bridge._given(name) if name is not None else None
        if cached is None:
            cached = self.template._cache_init(hidden_states, layer_idx)
            pad = int(self.template.per_layer_padding[layer_idx])
            if name is not None and hidden_states.shape[-1] < pad:
                raise ValueError(f"region '{name}' (conv layer {layer_idx}) starts from the model's own padding; "
                                 f"this call gives it {hidden_states.shape[-1]} frames, fewer than the {pad} it keeps")
        if name is not None:
            self.bridge.new[name] = hidden_states
        return cached


def padding_init(template, regions: Mapping[int, str]):
    """``init`` for the kit: each constant-padded layer's region starts as the model's own ``_cache_init``
    gives it (zeros of its shape); replicate-padded ones are left out (the model starts them from its first
    call's input, see :class:`Bridge`)."""
    modes = template.per_layer_padding_mode

    def init(prompt=None) -> dict:
        out = {}
        for i, name in regions.items():
            if modes[i] == "constant":
                probe = torch.zeros(1, int(template.per_layer_in_channels[i]), 1)
                out[name] = template._cache_init(probe, i)
        return out

    return init
