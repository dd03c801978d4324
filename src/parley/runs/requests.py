"""A send as read from the wire (the web UI's message, a program's completion request), and
its fingerprint, which an Idempotency-Key's retry must match."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields

from parley.engines.sampling import SamplingParams
from parley.runs.inputs import RunInput


@dataclass(frozen=True, slots=True)
class ProgramRequest:
    """A program's request (``/v1/chat/completions``), already read from the wire."""

    input: RunInput
    model: str | None = None
    max_tokens: int | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    store: bool = False  # keep it as a chat
    # a temporary chat's: its conversation kept only on the bus, its answer only on the
    # stream; nothing of its text reaches the database
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class SendRequest:
    content: str
    model: str | None = None
    max_tokens: int | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    edit_of: str | None = None  # a user message this one replaces: its sibling, a new branch
    regenerate: str | None = None  # a message whose answer is made again (content unused)
    continue_of: str | None = None  # an answer made longer: its text, then more (content unused)
    attachment_ids: tuple[str, ...] = ()  # the chat's waiting files sent with the message
    tools: tuple[str, ...] = ()  # the server's tools the answer may call
    tool_first: str = "auto"  # required: its first step must call one of them


def program_hash(req: ProgramRequest, encoded_input: str) -> str:
    fields = {"max_tokens": req.max_tokens, "sampling": req.sampling.model_dump()}
    if req.ephemeral:
        fields["ephemeral"] = True
    return digest({"input": encoded_input, "model": req.model, **fields})


def request_hash(chat_id: str, req: SendRequest) -> str:
    fields = {f.name: getattr(req, f.name) for f in dataclass_fields(req) if f.name != "sampling"}
    return digest({"chat_id": chat_id, **fields, "sampling": req.sampling.model_dump()})


def digest(body: dict[str, object]) -> str:
    """A request's fingerprint: its fields as canonical JSON, hashed."""
    text = json.dumps(body, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
