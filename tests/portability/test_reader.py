"""``read_import`` (``portability/reader.py``): ChatGPT's export as one file, as its split
``conversations-NNN.json`` files (uploaded as files or zipped), as the export's zip; parley's
own export as JSON or in its zip; formats told apart by content; malformed input and
limits refused with errors that say what and where."""

from __future__ import annotations

import io
import json
import zipfile
from datetime import UTC, datetime
from typing import Any

import pytest

from parley.domain import MessageRole, MessageStatus
from parley.errors import ValidationFailed
from parley.portability.document import (
    EXPORT_FILE_NAME,
    ChatDocument,
    ExportDocument,
    MessageDocument,
    UserDocument,
)
from parley.portability.reader import ImportLimits, read_import, read_import_files
from tests.portability.test_chatgpt import FIXTURE, conversations

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def dumped(value: object) -> bytes:
    return json.dumps(value).encode()


def zipped(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def split_files() -> dict[str, bytes]:
    lisbon, untitled, empty = conversations()
    return {
        "conversations-001.json": dumped([untitled, empty]),
        "conversations-000.json": dumped([lisbon]),
    }


def ids(name: str, data: bytes, **limits: int) -> list[str | None]:
    batch = read_import(name, data, limits=ImportLimits(**limits))
    assert batch.source == "chatgpt"
    return [c.source_id for c in batch.chats]


BOTH = ["conv-lisbon", "conv-untitled"]


def test_chatgpt_s_single_file_whatever_its_name() -> None:
    assert ids("conversations.json", FIXTURE.read_bytes()) == BOTH
    assert ids("upload.bin", b"\xef\xbb\xbf\n  " + FIXTURE.read_bytes()) == BOTH  # BOM, space


def test_chatgpt_s_split_files_uploaded_together_in_the_order_given() -> None:
    files = split_files()
    batch = read_import_files(sorted(files.items()))
    assert [c.source_id for c in batch.chats] == BOTH
    assert ids("conversations-001.json", files["conversations-001.json"]) == ["conv-untitled"]


def test_chatgpt_s_zip_with_the_split_files_read_by_number() -> None:
    files = {f"export/{name}": data for name, data in split_files().items()}
    files["export/chat.html"] = b"<html></html>"
    files["export/user.json"] = b"{}"
    files["__MACOSX/export/._conversations-000.json"] = b"\x00\x05\x16\x07"
    assert ids("export.zip", zipped(files)) == BOTH


def test_chatgpt_s_zip_with_one_file_or_both_forms_each_conversation_once() -> None:
    assert ids("x", zipped({"conversations.json": FIXTURE.read_bytes()})) == BOTH
    both = {"conversations.json": FIXTURE.read_bytes(), **split_files()}
    assert ids("x", zipped(both)) == BOTH


def test_a_single_conversation_object() -> None:
    assert ids("one.json", dumped(conversations()[0])) == ["conv-lisbon"]


def export_document() -> ExportDocument:
    message = MessageDocument(
        id="msg_1",
        seq=1,
        role=MessageRole.USER,
        content="hello\n\n# not a heading of the export",
        status=MessageStatus.COMPLETED,
        created_at=T0,
    )
    answer = message.model_copy(
        update={
            "id": "msg_2",
            "seq": 2,
            "role": MessageRole.ASSISTANT,
            "content": "still streaming",
            "status": MessageStatus.IN_PROGRESS,
            "model": "smollm2",
        }
    )
    chat = ChatDocument(
        id="chat_1",
        title="A chat",
        created_at=T0,
        updated_at=T0,
        last_activity_at=T0,
        archived=True,
        messages=[answer, message],
    )
    user = UserDocument(id="user_1", email="ada@example.com", tier="free", created_at=T0)
    return ExportDocument(exported_at=T0, user=user, chats=[chat])


def test_parley_s_export_as_json_and_in_its_zip() -> None:
    data = export_document().model_dump_json().encode()
    archive = zipped({EXPORT_FILE_NAME: data, "chats/a-chat.md": b"# A chat\n"})
    for batch in (read_import("anything", data), read_import("anything.zip", archive)):
        assert batch.source == "parley"
        (chat,) = batch.chats
        assert (chat.title, chat.created_at, chat.archived, chat.source_id) == (
            "A chat",
            T0,
            True,
            "chat_1",
        )
        assert [(m.role, m.content, m.created_at, m.model) for m in chat.messages] == [
            (MessageRole.USER, "hello\n\n# not a heading of the export", T0, None),
            (MessageRole.ASSISTANT, "still streaming", T0, "smollm2"),
        ]
        # no run will ever finish an answer exported mid-stream
        assert chat.messages[1].status is MessageStatus.CANCELLED


def refused(data: bytes, code: str, *, name: str = "upload.json") -> str:
    with pytest.raises(ValidationFailed) as e:
        read_import(name, data, limits=ImportLimits(max_chats=5, max_messages=50))
    assert e.value.code == code
    assert e.value.param == "file"
    return e.value.message


@pytest.mark.parametrize(
    "data",
    [
        b"%PDF-1.7 ...",
        b"",
        b'"just a string"',
        b'{"format": "something.else", "chats": []}',
        b'{"title": "an object with no mapping"}',
        zipped({"notes.txt": b"hello"}),
    ],
)
def test_what_is_neither_export_is_unsupported(data: bytes) -> None:
    message = refused(data, "unsupported_import")
    assert "parley's export" in message
    assert "conversations.json" in message


def test_another_version_of_parley_s_export_is_unsupported() -> None:
    document = json.loads(export_document().model_dump_json())
    message = refused(dumped({**document, "version": 2}), "unsupported_import")
    assert "version '2'" in message


def test_both_sources_in_one_import_are_refused() -> None:
    archive = zipped(
        {EXPORT_FILE_NAME: export_document().model_dump_json().encode(), **split_files()}
    )
    assert "not both" in refused(archive, "unsupported_import", name="mixed.zip")


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b'[{"mapping": {}},', "'upload.json': malformed JSON at line 1 column"),
        (b'{"format": "parley.export", "version": 1', "'upload.json': malformed JSON"),
        (b'["caf\xe9"]', "'upload.json': not UTF-8 text (byte 5)"),
        (b"[" * 100_000 + b"]" * 100_000, "'upload.json': "),
        (b'[{"mapping": {}}, {"title": "x"}]', "'upload.json': item 1 is not a conversation"),
    ],
)
def test_malformed_input_is_invalid_naming_the_file(data: bytes, problem: str) -> None:
    assert refused(data, "invalid_import").startswith(problem)


def test_a_parley_document_that_does_not_fit_says_where() -> None:
    document: dict[str, Any] = json.loads(export_document().model_dump_json())
    document["chats"][0]["messages"][0]["created_at"] = "2026-01-02T03:04:05"  # no offset
    del document["chats"][0]["title"]
    message = refused(dumped(document), "invalid_import")
    assert "chats.0.title: Field required" in message
    assert "chats.0.messages.0.created_at" in message


def test_a_broken_zip_is_invalid_naming_the_member() -> None:
    good = zipped({"conversations.json": b"[{]"})
    assert "'x.zip': 'conversations.json': malformed JSON" in refused(
        good, "invalid_import", name="x.zip"
    )
    cut = zipped({"conversations.json": FIXTURE.read_bytes()})
    cut = cut[:60] + bytes(len(cut) - 60 - 200) + cut[-200:]  # the central directory kept
    assert refused(cut, "invalid_import", name="x.zip").startswith("'x.zip': ")
    whole = zipped({"conversations.json": FIXTURE.read_bytes()})
    message = refused(whole[: len(whole) // 2], "invalid_import", name="x.zip")
    assert message == "'x.zip': a zip that cannot be read (cut short?)"


def test_limits_on_chats_messages_and_bytes_unpacked() -> None:
    data = FIXTURE.read_bytes()
    assert ids("c.json", data, max_chats=2, max_messages=9) == BOTH
    for limits, what in [
        ({"max_chats": 1}, "more than 1 chats"),
        ({"max_messages": 8}, "more than 8 messages"),
    ]:
        with pytest.raises(ValidationFailed, match=what) as e:
            ids("c.json", data, **limits)
        assert e.value.code == "import_too_large"
    archive = zipped({"conversations.json": data})
    assert ids("c.zip", archive, max_unpacked_bytes=len(data)) == BOTH
    with pytest.raises(ValidationFailed, match="unpacks to more than") as e:
        ids("c.zip", archive, max_unpacked_bytes=len(data) - 1)
    assert e.value.code == "import_too_large"
