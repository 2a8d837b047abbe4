"""The frontend (`corral run`): the ASGI application and its shell — start-up (`main`, `startup`, `state`),
the app and its layers (`app`, `limits`, `access`, `errors`, `unavailable`), metrics — with the routes grouped
by who calls them: `inference/` (applications, the µs-budget path), `admin/` (operators), `node_api/` (workers).
Nothing imports it but `cli` and `up`.
"""
