"""How a NATS connection authenticates (user JWT + nkey seed) and encrypts (TLS / mTLS)."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass

from corral.bus.natsauth import NatsAuthError, pair_from_seed, sign_nonce


@dataclass
class NatsCredentials:
    """A user JWT and its seed. The JWT is read through a provider on every (re)connect, so a
    refreshed JWT is used by the next reconnect without rebuilding the connection."""

    jwt: Callable[[], str]
    seed: Callable[[], str]

    @classmethod
    def static(cls, jwt: str, seed: str, *, setting: str = "LOCALAI_NATS_USER_SEED") -> NatsCredentials:
        pair_from_seed(seed, kind="user", setting=setting)  # fail at start, not at the first connect
        return cls(jwt=lambda: jwt, seed=lambda: seed)

    def connect_options(self) -> dict[str, object]:
        return {
            "user_jwt_cb": lambda: self.jwt().encode(),
            "signature_cb": lambda nonce: sign_nonce(self.seed(), nonce),
        }


@dataclass(frozen=True)
class TlsFiles:
    ca: str = ""
    cert: str = ""
    key: str = ""

    def context(self, url: str) -> ssl.SSLContext | None:
        """An SSL context for `tls://` URLs or when any file is set; None for plain `nats://`."""
        if not (self.ca or self.cert or self.key or "tls://" in url):
            return None
        if bool(self.cert) != bool(self.key):
            raise NatsAuthError("LOCALAI_NATS_TLS_CERT and LOCALAI_NATS_TLS_KEY must be set together")
        try:
            ctx = ssl.create_default_context(cafile=self.ca or None)
        except (OSError, ssl.SSLError) as exc:
            raise NatsAuthError(f"cannot read LOCALAI_NATS_TLS_CA {self.ca!r}: {exc}") from None
        if self.cert:
            try:
                ctx.load_cert_chain(self.cert, self.key)
            except (OSError, ssl.SSLError) as exc:
                raise NatsAuthError(
                    f"cannot load LOCALAI_NATS_TLS_CERT/LOCALAI_NATS_TLS_KEY: {exc}"
                ) from None
        return ctx
