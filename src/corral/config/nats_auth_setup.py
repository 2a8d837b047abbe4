"""Settings of `corral nats-auth-setup` (operator/account material and a server config for NATS JWT mode)."""

from __future__ import annotations

from pathlib import Path

from corral.config.parse import parse_bool, parse_path
from corral.config.settings import Setting

NATS_AUTH_SETUP_SETTINGS: tuple[Setting, ...] = (
    Setting("out", "--out", (), Path("nats-auth"), parse_path, "output directory"),
    Setting("account_name", "--account-name", (), "corral", help="name of the account"),
    Setting("force", "--force", (), False, parse_bool, "overwrite existing material", is_switch=True),
)
