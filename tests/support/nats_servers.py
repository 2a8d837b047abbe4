"""Start a throwaway nats-server with a given config (operator/JWT mode, TLS) on a free port."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from corral.cli import nats_auth_setup as auth_setup
from corral.runtime.processes import free_port, stop_process
from corral.up.embedded import _wait_port, find_nats_server


@dataclass
class NatsServer:
    config: Path
    port: int
    process: subprocess.Popen[bytes] | None = None
    scheme: str = "nats"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self) -> NatsServer:
        log = self.config.with_suffix(".log")
        self.process = subprocess.Popen(
            [
                str(find_nats_server()),
                "-c",
                str(self.config),
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-l",
                str(log),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_port("127.0.0.1", self.port, "nats-server", self.process)
        return self

    def stop(self) -> None:
        if self.process:
            stop_process(self.process)


def nats_server(directory: Path, config_text: str, scheme: str = "nats") -> NatsServer:
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "nats-server.conf"
    config.write_text(config_text)
    return NatsServer(config=config, port=free_port(), scheme=scheme)


def jwt_nats_server(directory: Path, material: auth_setup.AuthMaterial) -> NatsServer:
    """A started nats-server in operator/JWT mode for `corral nats-auth-setup` material."""
    auth_setup.write(material, directory)
    return nats_server(directory, (directory / "nats-server.conf").read_text()).start()


async def connect_refused(url: str, **options: object) -> Exception:
    """Try a connection that the server must refuse; returns the error.

    nats-py leaves the socket of a refused connection for the garbage collector; collect it
    here, with ResourceWarning ignored, so the leak is not reported against a later test.
    """
    import gc
    import warnings

    import nats

    try:
        nc = await nats.connect(
            url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=3, **options
        )
    except Exception as exc:  # the refusal is what we want
        error: Exception = exc
    else:
        await nc.close()
        raise AssertionError(f"{url} accepted a connection it should refuse")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    return error


def jwt_frontend_env(material: auth_setup.AuthMaterial, **extra: str) -> dict[str, str]:
    """A frontend's environment on that server: it mints worker credentials and requires them."""
    return {
        "LOCALAI_NATS_ACCOUNT_SEED": material.account.seed,
        "LOCALAI_NATS_SERVICE_JWT": material.service_jwt,
        "LOCALAI_NATS_SERVICE_SEED": material.service_seed,
        "LOCALAI_NATS_REQUIRE_AUTH": "true",
        **extra,
    }
