"""A chat as Markdown: for people to read, not for import (the JSON document is that).

```
# <title>

Created 2026-11-24 22:36 UTC · last activity 2026-11-25 08:01 UTC · 4 messages

---

### User · 2026-11-24 22:36 UTC

<the content, verbatim>

---

### Assistant (smollm2) · 2026-11-24 22:36 UTC

<the content, verbatim>
```

An answer that did not complete says so beside its role (``failed``, ``cancelled``...).
Message contents are kept exactly as written (they are often Markdown themselves), each
between horizontal rules so a message that contains headings still shows where it ends.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from parley.domain import MessageStatus
from parley.portability.document import ChatDocument, MessageDocument, ToolCallDocument

RULE = "---"
NAME_TITLE_CHARS = 60
_UNSAFE = re.compile(r"[^\w\- ]+")


def when(at: datetime) -> str:
    """A time as the Markdown shows it: to the minute, in UTC."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def chat_markdown(doc: ChatDocument) -> str:
    title = " ".join(doc.title.split()) or "Untitled chat"
    count = len(doc.messages)
    facts = [
        f"Created {when(doc.created_at)}",
        f"last activity {when(doc.last_activity_at)}",
        f"{count} message{'' if count == 1 else 's'}",
    ]
    if doc.archived:
        facts.append("archived")
    parts = [f"# {title}", " · ".join(facts)]
    for message in sorted(doc.messages, key=lambda m: m.seq):
        parts += [RULE, _heading(message), *_reasoning(message), message.content]
        parts += [_call(c) for c in message.tool_calls or ()]
    return "\n\n".join(parts) + "\n"


def _reasoning(message: MessageDocument) -> list[str]:
    """An answer's reasoning, folded (HTML's details: most Markdown viewers fold it)."""
    if not message.reasoning:
        return []
    return [f"<details><summary>Reasoning</summary>\n\n{message.reasoning}\n\n</details>"]


def _call(call: ToolCallDocument) -> str:
    fence = "````" if "```" in call.function.arguments else "```"
    head = f"Called `{call.function.name}` (`{call.id}`):"
    return f"{head}\n\n{fence}json\n{call.function.arguments}\n{fence}"


def _heading(message: MessageDocument) -> str:
    who = message.role.value.capitalize()
    if message.model:
        who += f" ({message.model})"
    if message.tool_call_id:
        who += f" (result of `{message.tool_call_id}`)"
    if message.status is not MessageStatus.COMPLETED:
        who += f", {message.status.value.replace('_', ' ')}"
    return f"### {who} · {when(message.created_at)}"


def markdown_name(doc: ChatDocument) -> str:
    """A file name for the chat's Markdown, unique within an export (it ends with the
    chat's id) and safe on every file system: ``2026-11-24-Trip-to-Lisbon-chat_….md``."""
    words = _UNSAFE.sub("", doc.title).split()
    slug = "-".join(words)[:NAME_TITLE_CHARS].strip("-") or "chat"
    return f"{doc.created_at.astimezone(UTC):%Y-%m-%d}-{slug}-{doc.id}.md"
