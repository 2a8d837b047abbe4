"""`corral up`: the embedded default — PostgreSQL and NATS found and started on this machine (`embedded`,
shared with the tests), one frontend and N workers (`stack`), and the approval of the workers it started
itself (`approval`). The only package that imports `worker`.
"""
