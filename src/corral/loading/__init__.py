"""Durable load jobs, each module named by its layer: one request's wait (`request_wait`, `request_waiters`,
`request_status`), the job a frontend claims and drives (`job`, `job_nodes`, `job_placement`, `job_hold`,
`job_progress`, `job_revision`: is the load's config revision still current), and one attempt on one node (`attempt`, `attempt_options`, `attempt_deadline`); what a
load needs (`context`), replay of what a model was loaded with (`replay`), the placement view (`fleet`).
It does not import `routing`.
"""
