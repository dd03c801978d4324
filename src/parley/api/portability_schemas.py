"""The bodies of a user's data routes: exports, imports, deleting the account."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from parley.api.schemas import Strict, Text
from parley.domain import ExportStatus


class ExportOut(BaseModel):
    """An export of all the user's chats: a zip of ``parley-export.json`` (every message
    and run's metadata) and one Markdown file per chat."""

    id: str
    object: Literal["export"] = "export"
    status: ExportStatus
    chats: int | None = None
    messages: int | None = None
    bytes: int | None = None
    error: str | None = None
    created_at: datetime
    finished_at: datetime | None = None
    expires_at: datetime | None = Field(default=None, description="The file is deleted then.")
    download_url: str | None = Field(
        default=None,
        description="Once ready: a link that needs no session, valid until "
        "download_url_expires_at (minutes); GET this export again for a fresh one.",
    )
    download_url_expires_at: datetime | None = None


class ExportList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ExportOut]


class ImportOut(BaseModel):
    object: Literal["import"] = "import"
    source: str = Field(description="parley or chatgpt: what the file was read as")
    chats: int
    messages: int
    chat_ids: list[str]
    skipped: int = Field(0, description="chats of the file imported before: not added again")
    skipped_chat_ids: list[str] = Field(
        default_factory=list, description="the chats that already hold the skipped ones"
    )


class AccountDelete(Strict):
    password: Annotated[Text, Field(min_length=1, max_length=1024)]
