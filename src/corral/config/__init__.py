"""The declarative settings of every command: each command's settings are one frozen class whose body is its
table (`settings`: flag, `LOCALAI_*`/`CORRAL_*` env vars exactly as the specification names them, default,
parser, help), shared groups mixed in (`process`, `security`, `staging`, ...), and the one parser of each kind
(`parse`, `sizes`). No I/O.
"""
