"""S3-compatible object storage for staging (``LOCALAI_STORAGE_URL`` and friends), used by frontend and worker.

Objects are stored under the staging key itself (``models/<trackingKey>/<path>``) with the file's
sha256 in the object metadata (``x-amz-meta-sha256``), so an upload is skipped when the bucket already
holds the same content, and a worker can verify what it fetched. Large files go up in parallel
multipart uploads. All calls block; async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.config.errors import ConfigError
from corral.staging.errors import ObjectStoreFailed

SHA256_METADATA_KEY = "sha256"
MULTIPART_THRESHOLD_BYTES = 64 << 20
MULTIPART_CHUNK_BYTES = 64 << 20
TRANSFER_THREADS = 4

BytesCallback = Callable[[int], None]
"""Called with the number of bytes just transferred (from boto3's worker threads)."""


@dataclass(frozen=True)
class StorageConfig:
    url: str
    bucket: str
    region: str
    access_key: str
    secret_key: str

    @classmethod
    def from_settings(cls, settings: Any) -> StorageConfig | None:
        """None when ``LOCALAI_STORAGE_URL`` is unset (HTTP staging); ConfigError on half-set keys."""
        url = getattr(settings, "storage_url", "") or ""
        if not url:
            return None
        access, secret = settings.storage_access_key or "", settings.storage_secret_key or ""
        if bool(access) != bool(secret):
            raise ConfigError(
                "LOCALAI_STORAGE_ACCESS_KEY and LOCALAI_STORAGE_SECRET_KEY must be set together "
                "(or both left empty to use the environment's AWS credentials)"
            )
        if not settings.storage_bucket:
            raise ConfigError("LOCALAI_STORAGE_BUCKET is empty; name the bucket staged files go to")
        return cls(url, settings.storage_bucket, settings.storage_region or "us-east-1", access, secret)


@dataclass(frozen=True)
class StoredObject:
    size_bytes: int
    sha256: str | None


class ObjectStore:
    """One bucket on one S3-compatible endpoint."""

    def __init__(self, config: StorageConfig) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.config = config
        self.bucket = config.bucket
        credentials = (
            {"aws_access_key_id": config.access_key, "aws_secret_access_key": config.secret_key}
            if config.access_key
            else {}
        )
        self._client = boto3.session.Session().client(
            "s3",
            endpoint_url=config.url,
            region_name=config.region,
            **credentials,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 5, "mode": "standard"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                max_pool_connections=TRANSFER_THREADS * 2,
            ),
        )
        self._transfer = TransferConfig(
            multipart_threshold=MULTIPART_THRESHOLD_BYTES,
            multipart_chunksize=MULTIPART_CHUNK_BYTES,
            max_concurrency=TRANSFER_THREADS,
            use_threads=True,
        )

    def close(self) -> None:
        self._client.close()

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (first start of a fresh deployment)."""
        from botocore.exceptions import ClientError

        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError:
            try:
                self._client.create_bucket(Bucket=self.bucket)
            except ClientError as exc:
                raise self._failed("(bucket)", "cannot create or reach the bucket", exc) from None

    def head(self, key: str) -> StoredObject | None:
        from botocore.exceptions import ClientError

        try:
            answer = self._client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _status(exc) == 404:
                return None
            raise self._failed(key, "HEAD object failed", exc) from None
        except Exception as exc:  # endpoint unreachable, DNS, TLS
            raise self._failed(key, "HEAD object failed", exc) from None
        sha = (answer.get("Metadata") or {}).get(SHA256_METADATA_KEY)
        return StoredObject(int(answer.get("ContentLength", 0)), sha.lower() if sha else None)

    def upload(self, local_path: Path, key: str, sha256: str, on_bytes: BytesCallback | None = None) -> None:
        try:
            self._client.upload_file(
                str(local_path),
                self.bucket,
                key,
                ExtraArgs={"Metadata": {SHA256_METADATA_KEY: sha256}},
                Callback=on_bytes,
                Config=self._transfer,
            )
        except Exception as exc:
            raise self._failed(key, f"uploading {str(local_path)!r} failed", exc) from None

    def download(self, key: str, target: Path, on_bytes: BytesCallback | None = None) -> None:
        """Fetch ``key`` into ``target`` atomically (a temp file next to it, then a rename)."""
        fd, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".download")
        os.close(fd)
        try:
            self._client.download_file(self.bucket, key, temp_name, Callback=on_bytes, Config=self._transfer)
            os.chmod(temp_name, 0o644)
            os.replace(temp_name, target)
        except Exception as exc:
            raise self._failed(key, f"downloading into {str(target)!r} failed", exc) from None
        finally:
            if os.path.exists(temp_name):
                os.unlink(temp_name)

    def _failed(self, key: str, what: str, exc: BaseException) -> ObjectStoreFailed:
        return ObjectStoreFailed(
            f"S3 key {key!r} in bucket {self.bucket!r} at {self.config.url}: {what}: {exc}; "
            "check LOCALAI_STORAGE_URL/_BUCKET/_ACCESS_KEY/_SECRET_KEY"
        )


def _status(exc: Any) -> int:
    try:
        return int(exc.response["ResponseMetadata"]["HTTPStatusCode"])
    except (KeyError, TypeError, ValueError):
        return 0
