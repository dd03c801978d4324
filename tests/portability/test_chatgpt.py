"""ChatGPT's export read (``portability/chatgpt.py``) from a fixture written by hand after its
documented shape (``chatgpt_conversations.json``): a conversation whose user edited a message
and regenerated an answer (siblings in the mapping; ``current_node`` picks the branch shown),
an image part, hidden system and context nodes, a tool call and its output, browsing; one
without a title nor a ``current_node``; one with nothing shown."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parley.domain import MessageRole, MessageStatus
from parley.portability.chatgpt import (
    DEFAULT_TITLE,
    Malformed,
    imported_conversation,
    read_conversations,
    shown_branch,
)
from parley.portability.document import ImportedChat

FIXTURE = Path(__file__).with_name("chatgpt_conversations.json")
USER, ASSISTANT = MessageRole.USER, MessageRole.ASSISTANT


def conversations() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = json.loads(FIXTURE.read_text())
    return loaded


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def said(chat: ImportedChat) -> list[tuple[MessageRole, str]]:
    return [(m.role, m.content) for m in chat.messages]


def test_the_branch_shown_is_kept_and_only_what_shows() -> None:
    lisbon, _ = read_conversations(conversations())
    assert said(lisbon) == [
        (USER, "What should I see in Lisbon?"),
        (
            ASSISTANT,
            "Belém Tower, the Alfama and *pastéis de nata*.\n\n- tram 28\n- São Jorge castle",
        ),
        (USER, "And where should I eat fish?"),  # the edit, not the first question
        (ASSISTANT, "Cervejaria Ramiro, for seafood."),  # the regenerated answer kept
        (USER, "[image]\n\nIs this the tram I should take?"),
        (ASSISTANT, "print(20 + 8)"),  # code kept as text; the tool's output and browsing not
        (ASSISTANT, "Yes: that is tram 28."),
    ]


def test_times_models_and_the_chat_s_own_facts() -> None:
    lisbon, _ = read_conversations(conversations())
    assert lisbon.title == "Trip to Lisbon"
    assert lisbon.source_id == "conv-lisbon"
    assert lisbon.created_at == at(1700000000.5)
    assert lisbon.updated_at == at(1700000095.25)
    assert [m.created_at for m in lisbon.messages] == [
        at(t) for t in (1700000010, 1700000020, 1700000040, 1700000060, 1700000070, 1700000080)
    ] + [at(1700000090)]
    assert [m.model for m in lisbon.messages] == [
        None,
        "gpt-4",
        None,
        "gpt-4o",
        None,
        "gpt-4o",
        "gpt-4o",
    ]
    assert {m.status for m in lisbon.messages} == {MessageStatus.COMPLETED}
    assert all(m.created_at.tzinfo is UTC for m in lisbon.messages)


def test_without_a_current_node_the_newest_leaf_and_without_a_title_the_default() -> None:
    _, untitled = read_conversations(conversations())
    assert untitled.title == DEFAULT_TITLE
    assert untitled.source_id == "conv-untitled"
    assert said(untitled) == [(USER, "Say hi."), (ASSISTANT, "Hi!")]
    # a message without a time takes its conversation's; no update_time: the last message's
    assert [m.created_at for m in untitled.messages] == [at(1710000000), at(1710000020)]
    assert untitled.updated_at == at(1710000020)


def test_a_conversation_with_nothing_shown_is_left_out() -> None:
    assert [c.source_id for c in read_conversations(conversations())] == [
        "conv-lisbon",
        "conv-untitled",
    ]


def test_a_current_node_that_is_not_in_the_mapping_falls_back_to_the_newest_leaf() -> None:
    _, untitled, _ = conversations()
    untitled["current_node"] = "nowhere"
    chat = imported_conversation(untitled)
    assert chat is not None
    assert said(chat)[-1] == (ASSISTANT, "Hi!")
    untitled["current_node"] = "hi-old"
    chat = imported_conversation(untitled)
    assert chat is not None
    assert said(chat)[-1] == (ASSISTANT, "Hello.")


def test_a_parent_cycle_ends_the_walk() -> None:
    mapping = {
        "a": {"message": None, "parent": "b", "children": ["b"]},
        "b": {"message": None, "parent": "a", "children": ["a"]},
    }
    assert len(shown_branch(mapping, "a")) == 2
    assert shown_branch(mapping, None) == []  # no root at all


@pytest.mark.parametrize(
    ("part", "text"),
    [
        ({"content_type": "audio_transcription", "text": "spoken words"}, "spoken words"),
        ({"content_type": "audio_asset_pointer"}, "[audio]"),
        ({"content_type": "something_new"}, "[attachment]"),
        (None, ""),
    ],
)
def test_parts_that_are_not_text(part: object, text: str) -> None:
    _, untitled, _ = conversations()
    question = untitled["mapping"]["q"]["message"]
    question["content"] = {"content_type": "multimodal_text", "parts": [part, "and this"]}
    chat = imported_conversation(untitled)
    assert chat is not None
    assert chat.messages[0].content == (f"{text}\n\nand this" if text else "and this")


def test_titles_are_one_line_and_stored_text_has_no_nul() -> None:
    _, untitled, _ = conversations()
    untitled["title"] = "  two\nlines\x00 "
    untitled["mapping"]["q"]["message"]["content"]["parts"] = ["a\x00b \ud800"]
    chat = imported_conversation(untitled)
    assert chat is not None
    assert chat.title == "two lines"
    assert chat.messages[0].content == "ab \ufffd"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"mapping": {}}, "expected a JSON array"),
        ([{"title": "no mapping"}], "item 0 is not a conversation"),
        ([{"mapping": {}}, 3], "item 1 is not a conversation"),
    ],
)
def test_what_is_not_conversations_is_malformed(value: object, problem: str) -> None:
    with pytest.raises(Malformed, match=problem):
        read_conversations(value)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=30,
)
FIELDS = st.sampled_from(["a", "b", "c"])
NODE = st.fixed_dictionaries(
    {},
    optional={
        "message": JSON
        | st.fixed_dictionaries(
            {},
            optional={
                "author": st.fixed_dictionaries({"role": JSON | st.sampled_from(["user"])}),
                "content": JSON,
                "create_time": JSON,
                "metadata": JSON,
            },
        ),
        "parent": JSON | FIELDS,
        "children": st.lists(JSON | FIELDS, max_size=3),
    },
)


@settings(max_examples=300, deadline=None)
@given(
    mapping=st.dictionaries(FIELDS, NODE | JSON, max_size=3),
    current=JSON | FIELDS,
    extra=st.dictionaries(st.sampled_from(["title", "create_time", "update_time", "id"]), JSON),
)
def test_odd_fields_never_raise(mapping: dict[str, Any], current: object, extra: Any) -> None:
    """The format is read leniently: whatever the fields hold, a chat or None, no error."""
    chat = imported_conversation({**extra, "mapping": mapping, "current_node": current})
    assert chat is None or chat.messages
