"""corral: distributed LLM serving — frontends, workers and backend processes."""

__version__ = "0.1.0"
