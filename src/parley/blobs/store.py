"""The blob store over obstore: one async API to a local directory and S3-compatible
services (and, by the same class, GCS and Azure were they configured).

obstore (Rust's ``object_store`` behind Python bindings, 5 MB, no Python dependencies)
was chosen over aioboto3/s3fs: those pull in botocore (~100 MB of service models) and
aiohttp, and s3fs adds fsspec's caching layers that parley does not want; obstore's calls
are native async and release the GIL while bytes move.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import obstore
from obstore.exceptions import BaseError
from obstore.store import LocalStore, S3Store

from parley.blobs.interface import BlobInfo, BlobNotFound, BlobStore, BlobStoreError
from parley.blobs.settings import BlobKind, BlobSettings

_PROBE = "_parley/probe-"


class ObjectBlobStore:
    """A ``BlobStore`` over an obstore store; keys below ``prefix``."""

    def __init__(self, store: Any, *, prefix: str, description: str) -> None:
        self._store = store
        self._prefix = f"{prefix}/" if prefix else ""
        self._description = description

    @property
    def description(self) -> str:
        return self._description

    async def put(self, key: str, data: bytes) -> None:
        try:
            await obstore.put_async(self._store, self._path(key), data)
        except (BaseError, OSError) as e:
            raise BlobStoreError(f"cannot write {key} to {self._description}: {e}") from e

    async def get(self, key: str) -> bytes:
        try:
            result = await obstore.get_async(self._store, self._path(key))
            return bytes(await result.bytes_async())
        except FileNotFoundError as e:
            raise BlobNotFound(key) from e
        except (BaseError, OSError) as e:
            raise BlobStoreError(f"cannot read {key} from {self._description}: {e}") from e

    async def delete(self, key: str) -> None:
        try:
            await obstore.delete_async(self._store, self._path(key))
        except FileNotFoundError:
            return
        except (BaseError, OSError) as e:
            raise BlobStoreError(f"cannot delete {key} from {self._description}: {e}") from e

    async def list(self, prefix: str) -> list[BlobInfo]:
        cut = len(self._prefix)
        try:
            stream = obstore.list(self._store, prefix=self._path(prefix))
            found = await stream.collect_async()
        except FileNotFoundError:
            return []
        except (BaseError, OSError) as e:
            raise BlobStoreError(f"cannot list {prefix} on {self._description}: {e}") from e
        return [BlobInfo(key=m["path"][cut:], size=int(m["size"])) for m in found]

    async def delete_prefix(self, prefix: str) -> int:
        if not prefix.strip("/"):
            raise ValueError("refusing to delete every object: give a non-empty prefix")
        found = await self.list(prefix)
        for info in found:
            await self.delete(info.key)
        return len(found)

    async def check(self) -> None:
        key = _PROBE + secrets.token_hex(8)
        payload = secrets.token_bytes(16)
        await self.put(key, payload)
        try:
            if await self.get(key) != payload:
                raise BlobStoreError(f"{self._description} returned other bytes than written")
        finally:
            await self.delete(key)

    def _path(self, key: str) -> str:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"invalid blob key {key!r}")
        return self._prefix + key


def build_blob_store(settings: BlobSettings, data_dir: Path) -> BlobStore:
    """The configured store. Builds no connection: call ``check`` to try it."""
    if settings.kind is BlobKind.LOCAL:
        root = (settings.dir or data_dir / "blobs").resolve()
        root.mkdir(parents=True, exist_ok=True)
        local = LocalStore(root, mkdir=True)
        return ObjectBlobStore(local, prefix=settings.prefix, description=f"directory {root}")
    return _s3(settings)


def _s3(settings: BlobSettings) -> BlobStore:
    assert settings.bucket is not None  # BlobSettings checks it
    options: dict[str, Any] = {"region": settings.region}
    if settings.endpoint:
        options["endpoint"] = settings.endpoint
        options["virtual_hosted_style_request"] = False
    if settings.access_key_id is not None and settings.secret_access_key is not None:
        options["access_key_id"] = settings.access_key_id
        options["secret_access_key"] = settings.secret_access_key.get_secret_value()
    client: Any = {"allow_http": True} if settings.allow_http else {}
    try:
        s3 = S3Store(settings.bucket, client_options=client, **options)
    except (BaseError, ValueError) as e:
        raise BlobStoreError(f"invalid s3 settings: {e}") from e
    where = settings.endpoint or f"AWS {settings.region}"
    return ObjectBlobStore(
        s3, prefix=settings.prefix, description=f"s3://{settings.bucket} at {where}"
    )
