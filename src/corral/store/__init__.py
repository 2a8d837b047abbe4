"""PostgreSQL: the pool and forward-only migrations (`db`, `migrations/`), named queries in `queries/*.sql`,
one thin module per table family, advisory-lock keys (`locks`). It holds no decisions.
"""
