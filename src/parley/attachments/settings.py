"""``[attachments]``: what a file attached to a message may be, and how much of the prompt
the files may take."""

from __future__ import annotations

from pydantic import BaseModel, Field


class AttachmentSettings(BaseModel):
    model_config = {"extra": "forbid"}

    max_bytes: int = Field(
        default=10 * 1024 * 1024, ge=1, description="a file larger than this is refused (413)"
    )
    max_chars: int = Field(
        default=400_000, ge=1, description="a file whose text is longer than this is refused (413)"
    )
    max_pdf_pages: int = Field(
        default=500, ge=1, description="a PDF with more pages is refused (413) before reading"
    )
    max_files: int = Field(
        default=10, ge=1, description="files waiting to be sent with a chat's next message"
    )
    prompt_share: float = Field(
        default=0.6,
        gt=0,
        le=1,
        description="of a prompt's input budget, the most its message's files may take; "
        "files that do not fit whole are sent as their chunks that match the message best",
    )
    chunk_tokens: int = Field(default=500, ge=50, description="a large file's chunks, about")
