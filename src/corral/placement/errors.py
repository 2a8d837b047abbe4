"""Placement errors."""


class PlacementError(Exception):
    """No node can take the model; the message says why and what to do."""


class NoNodeAvailable(PlacementError):
    """No healthy, approved worker node is registered; start or approve a worker."""
