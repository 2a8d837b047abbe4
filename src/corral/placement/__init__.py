"""The scheduling pipeline as pure functions over a snapshot of the fleet: filters (each a `Rejection` with
its reason), scorers, selection and eviction candidates, scheduling rules and governance, cluster sizing.
No I/O: `loading.job_placement` feeds it a snapshot.
"""
