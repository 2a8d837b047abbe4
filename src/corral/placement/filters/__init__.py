"""Placement filters: each returns None (node passes) or a Rejection; none does I/O or raises."""
