"""Where parley keeps objects (archived chats, exports): its ``blobs`` settings."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, Field, SecretStr, model_validator


class BlobKind(StrEnum):
    LOCAL = "local"  # a directory (the embedded default: <data_dir>/blobs)
    S3 = "s3"  # any S3-compatible service (AWS, MinIO, SeaweedFS, R2, ...)


class BlobSettings(BaseModel):
    """``[blobs]``: a local directory, or a bucket (and a key prefix) on an S3 service."""

    model_config = {"extra": "forbid"}

    kind: BlobKind = Field(
        default=BlobKind.LOCAL, description="local: a directory (under data_dir); s3: a bucket."
    )
    dir: Path | None = Field(
        default=None, description="local: the directory (default: <data_dir>/blobs)"
    )
    bucket: str | None = Field(default=None, description="s3: the bucket")
    prefix: str = Field(default="", description="every key starts with this (s3 and local)")
    endpoint: str | None = Field(
        default=None, description="s3: the service's URL (default: AWS for the region)"
    )
    region: str = Field(default="us-east-1", description="The bucket's region (s3).")
    access_key_id: str | None = Field(
        default=None,
        description="s3: the access key; give both it and secret_access_key, or neither.",
    )
    secret_access_key: SecretStr | None = Field(default=None, description="s3: its secret.")
    allow_http: bool = Field(
        default=False, description="s3: allow an http:// endpoint (a service on localhost)"
    )
    check_on_start: bool = Field(
        default=True,
        description="write, read and delete a probe object at start-up: bad credentials or a "
        "missing bucket stop the process with a clear error rather than the first archive run",
    )

    @model_validator(mode="after")
    def _complete(self) -> BlobSettings:
        if self.kind is BlobKind.S3:
            if not self.bucket:
                raise ValueError("blobs.kind s3 needs blobs.bucket")
            if (self.access_key_id is None) != (self.secret_access_key is None):
                raise ValueError("give both blobs.access_key_id and blobs.secret_access_key")
            if self.endpoint and self.endpoint.startswith("http://") and not self.allow_http:
                raise ValueError("blobs.endpoint is http://: set blobs.allow_http to use it")
        self.prefix = self.prefix.strip("/")
        return self


class ArchiveSettings(BaseModel):
    """``[archive]``: chats idle this long move to the blob store (``parley archive``)."""

    model_config = {"extra": "forbid"}

    after_days: float = Field(default=365, gt=0, description="idle this long, a chat moves")
    periodic: bool = Field(
        default=False, description="workers run an archive pass every interval_seconds"
    )
    interval_seconds: float = Field(default=3600, gt=0)
    batch: int = Field(default=100, gt=0, description="chats looked at per query")
    read_cache_chats: int = Field(
        default=64, ge=0, description="archived chats kept decoded in memory for reads"
    )


class PortabilitySettings(BaseModel):
    """``[portability]``: export links and import limits."""

    model_config = {"extra": "forbid"}

    export_link_seconds: int = Field(default=900, gt=0, description="an export's link lives")
    export_keep_seconds: int = Field(
        default=24 * 3600, gt=0, description="a finished export's file is kept this long"
    )
    export_stale_seconds: float = Field(
        default=3600, gt=0, description="an export pending this long is failed (its process died)"
    )
    max_import_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    max_import_unpacked_bytes: int = Field(
        default=256 * 1024 * 1024, gt=0, description="an import's zip members, uncompressed"
    )
    max_import_message_chars: int = Field(
        default=200_000, gt=0, description="an imported message longer than this: 413"
    )
    max_import_chats: int = Field(default=10_000, gt=0)
    max_import_messages: int = Field(default=500_000, gt=0)
