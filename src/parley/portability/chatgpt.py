"""ChatGPT's data export, read into import records.

Its ``conversations.json`` is a JSON array of conversations (newer exports split it into
``conversations-000.json``, ``conversations-001.json``..., each an array of the same shape;
``reader.py`` gathers the files)::

    {"id" | "conversation_id": "...", "title": "...", "create_time": 1700000000.0,
     "update_time": ..., "current_node": "<node id>",
     "mapping": {"<node id>": {"id", "parent": "<node id>" | null, "children": [...],
                               "message": null | {"id", "author": {"role"},
                                 "create_time": <unix seconds> | null,
                                 "content": {"content_type", "parts": [...]} | {"text"},
                                 "metadata": {"model_slug"?, "is_visually_hidden_..."?}}}}}

The mapping is a tree: editing a message or regenerating an answer adds a sibling. Only the
branch that was shown is kept: from ``current_node`` up through ``parent`` to the root,
reversed (no ``current_node``: the newest child all the way down). Of its messages only the
user's and the assistant's are kept, and of those not the hidden ones nor the empty ones;
``text``, ``multimodal_text`` (a part that is not text, an image, becomes a placeholder) and
``code`` (as its text) are read, other content types (browsing, tool output, reasoning) are
skipped. Fields are read leniently (the format is undocumented and changes); a file whose
shape is not this at all is ``Malformed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from parley.domain import MessageRole, utcnow
from parley.portability.document import ImportedChat, ImportedMessage
from parley.text import has_visible, storable

DEFAULT_TITLE = "Imported chat"
MAX_TITLE_CHARS = 200  # parley's default ``max_title_chars``
ROLES = {"user": MessageRole.USER, "assistant": MessageRole.ASSISTANT}
TEXT_TYPES = frozenset({"text", "multimodal_text"})
PLACEHOLDERS = {"image_asset_pointer": "[image]", "audio_asset_pointer": "[audio]"}

Node = Mapping[str, Any]


class Malformed(ValueError):
    """The data is not ChatGPT's conversations (the message says where it is not)."""


def is_conversation(value: object) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("mapping"), Mapping)


def conversation_id(conversation: Mapping[str, Any]) -> str | None:
    found = conversation.get("id") or conversation.get("conversation_id")
    return found if isinstance(found, str) else None


def read_conversations(value: object) -> list[ImportedChat]:
    """Every conversation of one file (a JSON array) with something to show, in order."""
    if not isinstance(value, list):
        raise Malformed("expected a JSON array of conversations")
    chats: list[ImportedChat] = []
    for index, item in enumerate(value):
        if not is_conversation(item):
            raise Malformed(f"item {index} is not a conversation (an object with a mapping)")
        chat = imported_conversation(item)
        if chat is not None:
            chats.append(chat)
    return chats


def imported_conversation(conversation: Mapping[str, Any]) -> ImportedChat | None:
    """The conversation's shown branch as a chat; None if nothing of it shows."""
    mapping: Mapping[str, Any] = conversation["mapping"]
    started = unix_time(conversation.get("create_time"))
    messages: list[ImportedMessage] = []
    for node in shown_branch(mapping, conversation.get("current_node")):
        previous = messages[-1].created_at if messages else started
        message = imported_message(node.get("message"), previous)
        if message is not None:
            messages.append(message)
    if not messages:
        return None
    created = started or messages[0].created_at
    updated = unix_time(conversation.get("update_time")) or messages[-1].created_at
    return ImportedChat(
        title=chat_title(conversation.get("title")),
        created_at=created,
        updated_at=max(updated, created),
        messages=tuple(messages),
        source_id=conversation_id(conversation),
    )


def shown_branch(mapping: Mapping[str, Any], current_node: object) -> list[Node]:
    """The nodes from the root to ``current_node`` (or, without one, to the newest leaf)."""
    leaf = current_node if isinstance(current_node, str) else None
    if leaf not in mapping:
        leaf = newest_leaf(mapping)
    branch: list[Node] = []
    seen: set[str] = set()
    while isinstance(leaf, str) and leaf not in seen and isinstance(mapping.get(leaf), Mapping):
        seen.add(leaf)
        node = mapping[leaf]
        branch.append(node)
        leaf = node.get("parent")
    branch.reverse()
    return branch


def newest_leaf(mapping: Mapping[str, Any]) -> str | None:
    """From the (first) root, the last child at every step: the newest edit or answer."""
    roots = [
        key
        for key, node in mapping.items()
        if isinstance(node, Mapping) and _text(node.get("parent")) not in mapping
    ]
    at = roots[0] if roots else None
    seen: set[str] = set()
    while at is not None and at not in seen:
        seen.add(at)
        children = [c for c in _children(mapping[at]) if isinstance(mapping.get(c), Mapping)]
        if not children:
            return at
        at = children[-1]
    return at


def _children(node: object) -> list[str]:
    children = node.get("children") if isinstance(node, Mapping) else None
    return [c for c in children if isinstance(c, str)] if isinstance(children, list) else []


def imported_message(message: object, previous: datetime | None) -> ImportedMessage | None:
    """The message as parley keeps it, or None when it is not shown: not the user's nor the
    assistant's, hidden, of a content type parley does not read, or empty. A message with
    no time of its own takes its predecessor's (or the conversation's)."""
    if not isinstance(message, Mapping):
        return None
    author = message.get("author")
    role = ROLES.get(_text(author.get("role"))) if isinstance(author, Mapping) else None
    metadata = message.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    if role is None or metadata.get("is_visually_hidden_from_conversation"):
        return None
    content = message_text(message.get("content"))
    if content is None or not content.strip():
        return None
    model = metadata.get("model_slug") if role is MessageRole.ASSISTANT else None
    return ImportedMessage(
        role=role,
        content=content,
        created_at=unix_time(message.get("create_time")) or previous or utcnow(),
        model=model if isinstance(model, str) and model else None,
    )


def message_text(content: object) -> str | None:
    """A message's text: its parts joined (a blank line between), code as its text; None
    for a content type parley does not show."""
    if not isinstance(content, Mapping):
        return None
    kind = _text(content.get("content_type"))
    if kind == "code":
        text = content.get("text")
        return storable(text) if isinstance(text, str) else None
    parts = content.get("parts")
    if kind not in TEXT_TYPES or not isinstance(parts, list):
        return None
    texts = [part_text(p) for p in parts]
    return storable("\n\n".join(t for t in texts if t))


def part_text(part: object) -> str:
    """A part as text: a string as it is, a transcription as its text, an image (or any
    other attachment) as a short placeholder."""
    if isinstance(part, str):
        return part
    if not isinstance(part, Mapping):
        return ""
    text = part.get("text")
    if isinstance(text, str):
        return text
    return PLACEHOLDERS.get(_text(part.get("content_type")), "[attachment]")


def _text(value: object) -> str:
    """A field that should be a string, or "" (so an odd value is never a dict key)."""
    return value if isinstance(value, str) else ""


def unix_time(value: object) -> datetime | None:
    """Unix seconds (ChatGPT's times) as a UTC datetime; None if absent or out of range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def chat_title(value: object) -> str:
    title = " ".join(value.split()) if isinstance(value, str) else ""
    title = storable(title)[:MAX_TITLE_CHARS].rstrip()
    return title if has_visible(title) else DEFAULT_TITLE
