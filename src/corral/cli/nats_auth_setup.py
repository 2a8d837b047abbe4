"""`corral nats-auth-setup`: operator, account and system-account material plus a nats-server
config for JWT (operator) mode, made with the `nkeys` library — no `nsc` needed.

Writes into `--out` (default `./nats-auth`):
  nats-server.conf   operator mode, memory resolver preloaded with both account JWTs
  operator.jwt       the operator JWT the server trusts
  frontend.env       LOCALAI_NATS_ACCOUNT_SEED, LOCALAI_NATS_SERVICE_JWT, LOCALAI_NATS_SERVICE_SEED (0600)
  seeds.txt          operator, account and system seeds — keep offline (0600)
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from corral.bus import natsauth
from corral.config.nats_auth_setup import NatsAuthSetupSettings
from corral.config.settings import load


@dataclass(frozen=True)
class AuthMaterial:
    operator: natsauth.KeyPair
    account: natsauth.KeyPair
    system: natsauth.KeyPair
    operator_jwt: str
    account_jwt: str
    system_jwt: str
    service_jwt: str
    service_seed: str


def generate(account_name: str = "corral") -> AuthMaterial:
    operator, account, system = (natsauth.create_pair(k) for k in ("operator", "account", "account"))
    service = natsauth.create_pair("user")
    return AuthMaterial(
        operator=operator,
        account=account,
        system=system,
        operator_jwt=natsauth.operator_jwt(operator, system.public_key),
        account_jwt=natsauth.account_jwt(account, operator, account_name),
        system_jwt=natsauth.account_jwt(system, operator, "SYS"),
        service_jwt=natsauth.user_jwt(
            service.public_key,
            account,
            name="localai-frontend",
            pub=natsauth.SERVICE_PUB,
            sub=natsauth.SERVICE_SUB,
        ),
        service_seed=service.seed,
    )


def server_config(material: AuthMaterial, operator_jwt_path: Path) -> str:
    return (
        f'operator: "{operator_jwt_path}"\n'
        f"system_account: {material.system.public_key}\n"
        "resolver: MEMORY\n"
        "resolver_preload: {\n"
        f'  {material.system.public_key}: "{material.system_jwt}"\n'
        f'  {material.account.public_key}: "{material.account_jwt}"\n'
        "}\n"
    )


def _write(path: Path, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    path.chmod(mode)


def write(material: AuthMaterial, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    operator_path = (out / "operator.jwt").resolve()
    _write(operator_path, material.operator_jwt + "\n", 0o644)
    _write(out / "nats-server.conf", server_config(material, operator_path), 0o644)
    _write(
        out / "frontend.env",
        f"LOCALAI_NATS_ACCOUNT_SEED={material.account.seed}\n"
        f"LOCALAI_NATS_SERVICE_JWT={material.service_jwt}\n"
        f"LOCALAI_NATS_SERVICE_SEED={material.service_seed}\n",
        0o600,
    )
    _write(
        out / "seeds.txt",
        f"operator {material.operator.seed}\naccount {material.account.seed}\nsystem {material.system.seed}\n",
        0o600,
    )


def main(argv: list[str]) -> int:
    args = load(NatsAuthSetupSettings, "corral nats-auth-setup", __doc__ or "", argv)
    if (args.out / "seeds.txt").exists() and not args.force:
        print(
            f"corral nats-auth-setup: {args.out} already holds material; pass --force to replace it "
            "(every minted credential stops working)",
            file=sys.stderr,
        )
        return 2
    write(generate(args.account_name), args.out)
    print(
        f"wrote {args.out}/nats-server.conf, operator.jwt, frontend.env (0600), seeds.txt (0600)\n"
        f"start NATS:  nats-server -c {args.out}/nats-server.conf\n"
        f"frontend:    load {args.out}/frontend.env into its environment and set LOCALAI_NATS_REQUIRE_AUTH=true\n"
        "workers:     LOCALAI_NATS_REQUIRE_AUTH=true (credentials are minted at approval)"
    )
    return 0
