"""Which failures are expected at startup (printed as one line) rather than bugs (traceback)."""

from __future__ import annotations


def is_expected(exc: BaseException) -> bool:
    from corral.cli.client import ClientError
    from corral.node.errors import WorkerError
    from corral.store.db import DatabaseUnavailable

    expected: tuple[type[BaseException], ...] = (DatabaseUnavailable, WorkerError, OSError, ClientError)
    try:
        from nats.errors import NoServersError

        expected += (NoServersError,)
    except ImportError:
        pass
    return isinstance(exc, expected)
