"""Placement scorers: each returns 0–100 for a node that passed the filters; no I/O."""
