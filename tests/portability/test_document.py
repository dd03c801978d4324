"""parley's export document (``portability/document.py``) and a chat's Markdown
(``portability/markdown.py``), built from rows as the store returns them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from parley.domain import MessageRole, MessageStatus, RunSource, RunStatus
from parley.portability.document import (
    ChatDocument,
    ExportDocument,
    chat_document,
    export_document,
    export_json,
)
from parley.portability.markdown import chat_markdown, markdown_name
from parley.store.schema import Chat, Message, Run, User

T0 = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)


def rows() -> tuple[Chat, list[Message], list[Run]]:
    chat = Chat(
        id="chat_1",
        user_id="user_1",
        title="Tides",
        message_count=3,
        created_at=T0,
        updated_at=T0 + timedelta(minutes=5),
        last_activity_at=T0 + timedelta(minutes=2),
    )

    def message(seq: int, role: MessageRole, content: str, **more: object) -> Message:
        return Message(
            id=f"msg_{seq}",
            user_id="user_1",
            chat_id="chat_1",
            seq=seq,
            role=role,
            content=content,
            status=more.pop("status", MessageStatus.COMPLETED),
            created_at=T0 + timedelta(minutes=seq - 1),
            updated_at=T0,
            **more,
        )

    messages = [
        message(3, MessageRole.ASSISTANT, "", status=MessageStatus.FAILED, model="m", run_id="r"),
        message(1, MessageRole.USER, "Why are there tides?\n\n## really", run_id="run_1"),
        message(2, MessageRole.ASSISTANT, "The **Moon**.", model="smollm2", run_id="run_1"),
    ]

    def run(run_id: str, source: RunSource, at: datetime, **more: object) -> Run:
        return Run(
            id=run_id,
            user_id="user_1",
            chat_id="chat_1",
            source=source,
            status=RunStatus.COMPLETED,
            model="smollm2",
            tier="free",
            max_tokens=64,
            created_at=at,
            **more,
        )

    runs = [
        run("run_2", RunSource.CHAT, T0 + timedelta(minutes=2), error_code="engine_aborted"),
        run("run_s", RunSource.SUMMARY, T0 + timedelta(minutes=3)),
        run(
            "run_1",
            RunSource.CHAT,
            T0,
            prompt_tokens=12,
            completion_tokens=3,
            cached_tokens=0,
            finish_reason="stop",
            user_message_id="msg_1",
            assistant_message_id="msg_2",
        ),
    ]
    return chat, messages, runs


def test_a_chat_s_document_has_every_message_and_run_s_metadata_in_order() -> None:
    doc = chat_document(*rows(), archived=False)
    assert [m.seq for m in doc.messages] == [1, 2, 3]
    assert [(m.role, m.status, m.model, m.run_id) for m in doc.messages] == [
        (MessageRole.USER, MessageStatus.COMPLETED, None, "run_1"),
        (MessageRole.ASSISTANT, MessageStatus.COMPLETED, "smollm2", "run_1"),
        (MessageRole.ASSISTANT, MessageStatus.FAILED, "m", "r"),
    ]
    assert [r.id for r in doc.runs] == ["run_1", "run_2"]  # by time; no summary run
    first = doc.runs[0]
    assert (first.prompt_tokens, first.completion_tokens, first.finish_reason) == (12, 3, "stop")
    assert (first.user_message_id, first.assistant_message_id) == ("msg_1", "msg_2")
    assert doc.runs[1].error_code == "engine_aborted"


def test_the_document_survives_json_exactly() -> None:
    user = User(id="user_1", email="ada@example.com", tier="free", created_at=T0)
    doc = export_document(user, [chat_document(*rows(), archived=True)], exported_at=T0)
    text = doc.model_dump_json()
    assert '"format":"parley.export"' in text
    assert '"version":1' in text
    back = ExportDocument.model_validate_json(text)
    assert back == doc
    assert back.chats[0].messages[0].created_at == T0  # to the microsecond


async def test_the_document_written_a_chat_at_a_time_is_the_same_text() -> None:
    user = User(id="user_1", email="ada@example.com", tier="free", created_at=T0)
    chats = [chat_document(*rows(), archived=flag) for flag in (False, True)]
    for some in ([], chats[:1], chats):

        async def each(docs: list[ChatDocument] = some) -> AsyncIterator[ChatDocument]:
            for doc in docs:
                yield doc

        pieces = [p async for p in export_json(user, each(), exported_at=T0)]
        whole = export_document(user, some, exported_at=T0).model_dump_json()
        assert b"".join(pieces).decode() == whole
        assert len(pieces) == len(some) + 2


def test_times_without_an_offset_and_unknown_fields_are_refused() -> None:
    doc = chat_document(*rows(), archived=False).model_dump(mode="json")
    with pytest.raises(ValidationError, match="timezone"):
        ChatDocument.model_validate({**doc, "created_at": "2026-03-04T05:06:07"})
    with pytest.raises(ValidationError, match="Extra inputs"):
        ChatDocument.model_validate({**doc, "folder": "work"})


def test_markdown_has_the_title_dates_and_each_message_verbatim() -> None:
    doc = chat_document(*rows(), archived=True)
    doc = doc.model_copy(update={"created_at": T0.astimezone(timezone(timedelta(hours=2)))})
    assert chat_markdown(doc) == (
        "# Tides\n\n"
        "Created 2026-03-04 05:06 UTC · last activity 2026-03-04 05:08 UTC · 3 messages"
        " · archived\n\n"
        "---\n\n### User · 2026-03-04 05:06 UTC\n\nWhy are there tides?\n\n## really\n\n"
        "---\n\n### Assistant (smollm2) · 2026-03-04 05:07 UTC\n\nThe **Moon**.\n\n"
        "---\n\n### Assistant (m), failed · 2026-03-04 05:08 UTC\n\n\n"
    )


def test_markdown_of_an_empty_chat() -> None:
    chat, _, _ = rows()
    text = chat_markdown(chat_document(chat, [], [], archived=False))
    assert text.startswith("# Tides\n\nCreated 2026-03-04 05:06 UTC")
    assert "0 messages" in text


@pytest.mark.parametrize(
    ("title", "name"),
    [
        ("Tides", "2026-03-04-Tides-chat_1.md"),
        ("../../etc/passwd: a *plan*?", "2026-03-04-etcpasswd-a-plan-chat_1.md"),
        ("Überfahrt nach Lissabon", "2026-03-04-Überfahrt-nach-Lissabon-chat_1.md"),
        ("???", "2026-03-04-chat-chat_1.md"),
        ("x" * 100, f"2026-03-04-{'x' * 60}-chat_1.md"),
    ],
)
def test_markdown_file_names_are_safe_and_unique(title: str, name: str) -> None:
    chat, _, _ = rows()
    chat.title = title
    assert markdown_name(chat_document(chat, [], [], archived=False)) == name
