"""Settings of `corral nats-auth-setup` (operator/account material and a server config for NATS JWT mode)."""

from __future__ import annotations

from pathlib import Path

from corral.config.parse import parse_bool, parse_path
from corral.config.settings import setting, settings_class


@settings_class
class NatsAuthSetupSettings:
    """`corral nats-auth-setup`."""

    out: Path = setting("--out", default=Path("nats-auth"), parse=parse_path, help="output directory")
    account_name: str = setting("--account-name", default="corral", help="name of the account")
    force: bool = setting(
        "--force", default=False, parse=parse_bool, help="overwrite existing material", is_switch=True
    )
