"""Config revisions end to end: edits applied in commit order across frontends (`edits`), a load refused
when its revision went stale (`stale`), and the exact stop of replicas quarantined by an edit (`cleanup`).
The hash itself is `models.revision`; the rows are `store.revisions`.
"""
