"""Config revisions end to end: edits applied in commit order across frontends (`edits`) and the exact stop
of replicas quarantined by an edit (`cleanup`). The hash itself is `models.revision`, the rows
`store.revisions`, and a load's check that its revision is still current `loading.job_revision` (a load
step: `loading` must not depend on the edit machinery, which drives the router).
"""
