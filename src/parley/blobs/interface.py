"""The blob store interface: objects (bytes) by key, flat, '/' only a convention."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from parley.errors import DependencyUnavailable


class BlobNotFound(Exception):
    """No object under this key."""


class BlobStoreError(DependencyUnavailable):
    """The store could not do what was asked (unreachable, refused, misconfigured): a 503
    with Retry-After where it reaches a client (an upload, an export's download)."""

    code = "blob_store_unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message, retry_after=5)


@dataclass(frozen=True, slots=True)
class BlobInfo:
    key: str
    size: int


class BlobStore(Protocol):
    """Every method raises ``BlobStoreError`` when the store fails, and ``get``
    ``BlobNotFound`` for a missing key; ``delete`` of a missing key does nothing."""

    @property
    def description(self) -> str: ...

    async def put(self, key: str, data: bytes) -> None: ...

    async def get(self, key: str) -> bytes: ...

    async def delete(self, key: str) -> None: ...

    async def list(self, prefix: str) -> list[BlobInfo]: ...

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every object whose key starts with ``prefix``; how many there were."""
        ...

    async def check(self) -> None:
        """Write, read back and delete a probe object: raise ``BlobStoreError`` saying
        why when that fails (start-up calls it, so bad credentials stop the process)."""
        ...
