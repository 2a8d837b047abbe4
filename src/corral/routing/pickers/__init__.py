"""Warm-path pickers: which routable replica of a model serves a request (one module per picker).

The model's scheduling rule names the picker (`route_policy`); "" inherits the process default
(`prefix_cache` when LOCALAI_DISTRIBUTED_PREFIX_CACHE is on, else `least_loaded`). Every pick is
O(replicas of the model) and reads memory only; it returns a `Decision` the explain endpoint shows.
"""
