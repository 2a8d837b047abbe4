"""Replica upkeep: declarative scheduling rules seeded at boot (`scheduling_seed`), the reconciler that keeps
every rule satisfied (`reconciler`), and the reclaim of replica rows stuck in staging or loading (`stuck`).
"""
