"""The relational schema, one table per stored concept.

Every table carries ``user_id`` (``users.id`` on the users table itself) and
is queried by it first, so the schema can be distributed by user. Enums are
stored as checked strings (portable across SQLite and Postgres, cheap to
extend in a migration). Changes go through Alembic migrations in
``parley/store/migrations``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    Boolean,
    DateTime,
    Enum,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from parley.domain import ExportStatus, MessageRole, MessageStatus, RunSource, RunStatus
from parley.engines.sampling import SamplingParams

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID = String(40)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite keeps no zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime stored; use parley.domain.utcnow()")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class SamplingColumn(TypeDecorator[SamplingParams]):
    """A run's sampling parameters, whole, as one JSON text column (only what is set)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: SamplingParams | None, dialect: Dialect) -> str:
        return "{}" if value is None else value.to_json()

    def process_result_value(self, value: str | None, dialect: Dialect) -> SamplingParams:
        return SamplingParams.from_json(value)


def str_enum(enum: type[StrEnum], name: str) -> Enum:
    return Enum(
        enum,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=20,
        values_callable=lambda e: [m.value for m in e],
    )


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: dict[Any, Any] = {datetime: UTCDateTime()}


class User(Base):
    __tablename__ = "users"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    tier: Mapped[str] = mapped_column(String(40))
    # a ``domain.UserRole``
    role: Mapped[str] = mapped_column(String(20), default="user", server_default="user")
    # set: the user cannot sign in, and their sessions and keys stop at once
    disabled_at: Mapped[datetime | None]
    # a ``domain.Theme``: how the web client looks for them, on every device
    theme: Mapped[str] = mapped_column(String(10), default="system", server_default="system")
    # when the user followed the mailed link (accounts.confirm_email); None: not (yet)
    email_confirmed_at: Mapped[datetime | None]
    # what the user asks of every answer (the account page; added to each prompt's system)
    instructions: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class Session(Base):
    """A login: its token is stored only as a SHA-256 hash."""

    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # where it was opened from: the browser or program, the address (to tell sessions apart)
    user_agent: Mapped[str | None] = mapped_column(String(300))
    address: Mapped[str | None] = mapped_column(String(100))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    # refreshed at most once a minute (store.credentials.LAST_USED_GRANULARITY)
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class ApiKey(Base):
    """A program's credential: shown once, stored only as a SHA-256 hash."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    hint: Mapped[str] = mapped_column(String(20))
    # JSON lists: its ``domain.KeyScope``s (NULL: all but admin) and models (NULL: any)
    scopes: Mapped[str | None] = mapped_column(Text)
    models: Mapped[str | None] = mapped_column(Text)
    expires_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    last_used_at: Mapped[datetime | None]
    last_used_address: Mapped[str | None] = mapped_column(String(100))
    revoked_at: Mapped[datetime | None]


class Chat(Base):
    __tablename__ = "chats"
    __table_args__ = (
        Index("ix_chats_user_activity", "user_id", "last_activity_at", "id"),
        Index("ix_chats_user_import_key", "user_id", "import_key"),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    title: Mapped[str] = mapped_column(Text)
    message_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    last_activity_at: Mapped[datetime]
    # the rolling summary of the chat's messages up to summary_through_seq (0: none yet),
    # folded further by summary_run_id while one is under way (``context/summaries.py``)
    summary: Mapped[str | None] = mapped_column(Text)
    summary_through_seq: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    summary_run_id: Mapped[str | None] = mapped_column(ID)
    summary_updated_at: Mapped[datetime | None]
    # archived (``archive/``): its messages and runs live in one compressed object of
    # archive_bytes under archive_key, and no longer in this database
    archived_at: Mapped[datetime | None]
    archive_key: Mapped[str | None] = mapped_column(String(300))
    archive_bytes: Mapped[int | None] = mapped_column(Integer)
    # the newest message of the branch shown (messages form a tree: ``parent_id``)
    active_leaf_id: Mapped[str | None] = mapped_column(ID)
    # an imported chat: ``<source>:<its id there>`` (re-importing the file skips it)
    import_key: Mapped[str | None] = mapped_column(String(300))
    # the user's own: pinned to the top of the list; shelved (the UI's "Archive": out of the
    # list, kept and searchable, unlike archived_at's storage move); what its answers heed
    pinned_at: Mapped[datetime | None]
    shelved_at: Mapped[datetime | None]
    instructions: Mapped[str | None] = mapped_column(Text)


class Message(Base):
    """One turn of a chat; ``seq`` orders a chat's messages without ties."""

    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("chat_id", "seq", name="uq_messages_chat_seq"),
        Index("ix_messages_chat_parent", "chat_id", "parent_id"),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    chat_id: Mapped[str] = mapped_column(ForeignKey("chats.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    # the message before this one on its branch (None: the chat's first); siblings share it
    parent_id: Mapped[str | None] = mapped_column(ID)
    role: Mapped[MessageRole] = mapped_column(str_enum(MessageRole, "message_role"))
    content: Mapped[str] = mapped_column(Text)
    # what it holds beyond its text: reasoning, tool calls, the call it answers (parts.py)
    parts: Mapped[str | None] = mapped_column(Text)
    status: Mapped[MessageStatus] = mapped_column(str_enum(MessageStatus, "message_status"))
    run_id: Mapped[str | None] = mapped_column(ID)
    model: Mapped[str | None] = mapped_column(String(200))
    # an answer's model asked for, when a busy service answered with its downgrade model
    downgraded_from: Mapped[str | None] = mapped_column(String(200))
    token_count: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class Run(Base):
    """One generation of one assistant message (written by the run lifecycle)."""

    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_status_lease", "status", "lease_expires_at"),
        Index("ix_runs_user_chat", "user_id", "chat_id"),
        Index("ix_runs_user_created", "user_id", "created_at", "id"),
        UniqueConstraint("user_id", "idempotency_key", name="uq_runs_user_idempotency_key"),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    # a program's run (``source`` api) has no chat unless it asked for one (``store``)
    chat_id: Mapped[str | None] = mapped_column(ForeignKey("chats.id", ondelete="CASCADE"))
    user_message_id: Mapped[str | None] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE")
    )
    assistant_message_id: Mapped[str | None] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE")
    )
    source: Mapped[RunSource] = mapped_column(
        str_enum(RunSource, "run_source"), default=RunSource.CHAT, server_default="chat"
    )
    # a program's request: its messages (JSON, ``runs/inputs.py``)
    input: Mapped[str | None] = mapped_column(Text)
    # the API key the run was asked with (None: a login session or the service itself)
    api_key_id: Mapped[str | None] = mapped_column(String(40))
    # the answer of a run with no assistant message to hold it
    output: Mapped[str | None] = mapped_column(Text)
    # the server's tools a chat's run may call ({"names", "first"}: JSON; None: none)
    tools: Mapped[str | None] = mapped_column(Text)
    # the W3C trace context of the request that made the run (api → queue → worker)
    traceparent: Mapped[str | None] = mapped_column(String(55))
    status: Mapped[RunStatus] = mapped_column(str_enum(RunStatus, "run_status"))
    model: Mapped[str] = mapped_column(String(200))
    # the model the run asked for, when load shedding served it by its tier's downgrade model
    downgraded_from: Mapped[str | None] = mapped_column(String(200))
    # a continued answer: the answer whose text its own begins with (``runs/rules.place``)
    continues_id: Mapped[str | None] = mapped_column(String(40))
    # a temporary chat's run: no text of it in the database (its input on the bus)
    ephemeral: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    tier: Mapped[str] = mapped_column(String(40))
    max_tokens: Mapped[int] = mapped_column(Integer)
    # how the answer is sampled (``engines.sampling.SamplingParams``, whole)
    sampling: Mapped[SamplingParams] = mapped_column(
        SamplingColumn(), default=SamplingParams, server_default="{}"
    )
    priority: Mapped[int] = mapped_column(Integer, default=0)
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    # the token budget reservation the run holds; NULL once settled (or never reserved)
    reserved_tokens: Mapped[int | None] = mapped_column(Integer)
    finish_reason: Mapped[str | None] = mapped_column(String(20))
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    # what went into the prompt (JSON, ``context.assembly.Composition``): tokens per part
    prompt_parts: Mapped[str | None] = mapped_column(Text)
    # of the prompt's tokens, those the engine found in its prefix cache
    cached_tokens: Mapped[int | None] = mapped_column(Integer)
    # a summary run's fold: the chat's messages up to this seq
    summary_through_seq: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    worker_id: Mapped[str | None] = mapped_column(String(100))
    lease_expires_at: Mapped[datetime | None]
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class Export(Base):
    """A user's export of all their chats (``portability/jobs.py``): made in the background,
    its file kept in the blob store under ``blob_key`` until ``expires_at``."""

    __tablename__ = "exports"
    __table_args__ = (Index("ix_exports_user_created", "user_id", "created_at"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    status: Mapped[ExportStatus] = mapped_column(str_enum(ExportStatus, "export_status"))
    blob_key: Mapped[str | None] = mapped_column(String(300))
    bytes: Mapped[int | None] = mapped_column(Integer)
    chats: Mapped[int | None] = mapped_column(Integer)
    messages: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    # moved on while the job works: a job silent for long is failed by the sweeper
    updated_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    expires_at: Mapped[datetime | None]


class Share(Base):
    """A read-only snapshot of a chat at an unguessable URL (``/s/<token>``)."""

    __tablename__ = "shares"
    __table_args__ = (Index("ix_shares_user_created", "user_id", "created_at"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    chat_id: Mapped[str] = mapped_column(ForeignKey("chats.id", ondelete="CASCADE"))
    token: Mapped[str] = mapped_column(String(64), unique=True)
    title: Mapped[str] = mapped_column(Text)
    # the messages of the branch shown when it was published (JSON)
    snapshot: Mapped[str] = mapped_column(Text)
    message_count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class Attachment(Base):
    """A file uploaded to a chat: its bytes in the blob store, its text for the prompt;
    ``message_id`` set once the message it was attached to is sent."""

    __tablename__ = "attachments"
    __table_args__ = (Index("ix_attachments_user_chat", "user_id", "chat_id"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    chat_id: Mapped[str] = mapped_column(ForeignKey("chats.id", ondelete="CASCADE"))
    message_id: Mapped[str | None] = mapped_column(ID, index=True)
    name: Mapped[str] = mapped_column(String(255))
    media_type: Mapped[str] = mapped_column(String(100))
    size: Mapped[int] = mapped_column(Integer)
    blob_key: Mapped[str] = mapped_column(String(300))
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]


class Feedback(Base):
    """A user's rating of one answer (+1 or -1) with an optional note; the answer's model
    is kept so feedback counts by model after the message is gone."""

    __tablename__ = "feedback"
    __table_args__ = (Index("ix_feedback_user_chat", "user_id", "chat_id"),)

    message_id: Mapped[str] = mapped_column(ID, primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    chat_id: Mapped[str] = mapped_column(ID)
    rating: Mapped[int] = mapped_column(SmallInteger)
    note: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
