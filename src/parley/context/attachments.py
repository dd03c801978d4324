"""How a message's files enter its prompt (``context.prompts`` calls ``files_text``).

The files ride in the message they were sent with, after its own text (like retrieved
snippets: the next turn's prompt holds the message without them, and shares its tokens up
to where they begin), each named so that the model can cite it: ``File: report.pdf``.
Within the files' room (``attachments.prompt_share`` of the input budget, less what the
message itself and the system prompt take):

* every file whole, when they all fit;
* else the files that fit an even share of the room whole, and of each other file the
  chunks (about ``chunk_tokens`` each, cut at line ends) that best match the message,
  ranked by term overlap: the message's word stems (``context.relevance.stems``, as
  retrieval compares words) found in the chunk, each weighted by how rare it is among the
  file's chunks (``log(1 + n / df)``); only chunks that match are sent (when none does,
  the file's first chunks). The chosen chunks are sent in their order in the file, marked
  ``[part i of n]``.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from parley.attachments.settings import AttachmentSettings
from parley.context.assembly import MESSAGE_OVERHEAD, PROMPT_OVERHEAD, Limits, NewMessage
from parley.context.relevance import stems
from parley.engines.estimate import CHARS_PER_TOKEN  # a chunk's length, cut before counting
from parley.qos.prompt_counter import PromptCounter
from parley.store import attachments
from parley.store.prompts import ChatRef

CountTexts = Callable[[list[str]], Awaitable[list[int]]]

HEADING = "\n\nAttached files:"
# each block's own tokens beyond its text (heading, name, separators), a generous guess
BLOCK_OVERHEAD = 16


@dataclass(frozen=True, slots=True)
class FileText:
    name: str
    text: str


@dataclass(frozen=True, slots=True)
class _Chunk:
    file: int
    part: int
    text: str


async def attached(
    s: AsyncSession,
    chat: ChatRef,
    seq: int | None,
    ids: Sequence[str],
    earlier: Sequence[int] = (),
) -> list[FileText]:
    """The files of the chat's message ``seq``, or (not stored yet) its waiting ``ids``;
    then those sent with the ``earlier`` messages of its branch, newest first (a follow-up
    question still sees them)."""
    user_id, chat_id = chat.user_id, chat.chat_id
    rows = []
    if seq is not None:
        rows = await attachments.of_message_seqs(s, user_id=user_id, chat_id=chat_id, seqs=[seq])
    elif ids:
        rows = await attachments.pending(s, user_id=user_id, chat_id=chat_id, ids=ids)
    if earlier:
        before = await attachments.of_message_seqs(
            s, user_id=user_id, chat_id=chat_id, seqs=sorted(earlier, reverse=True)
        )
        rows += before
    return [FileText(row.name, row.text) for row in rows]


async def files_text(
    files: Sequence[FileText],
    new: NewMessage,
    limits: Limits,
    system_tokens: int,
    settings: AttachmentSettings,
    counter: PromptCounter,
) -> str:
    """The text appended to the new message: its files, within their room."""
    if not files:
        return ""

    async def count(texts: list[str]) -> list[int]:
        return await counter.count_texts_async(new.model, texts)

    asked = (await count([new.content]))[0] + MESSAGE_OVERHEAD
    room = min(int(limits.budget * settings.prompt_share), limits.budget - asked - system_tokens)
    room -= PROMPT_OVERHEAD
    return await fit(files, new.content, room, settings.chunk_tokens, count)


async def fit(
    files: Sequence[FileText], question: str, room: int, chunk_tokens: int, count: CountTexts
) -> str:
    """The files within ``room`` tokens: whole, or their chunks that bear on ``question``."""
    if not files or room <= BLOCK_OVERHEAD:
        return ""
    blocks = [f"File: {f.name}\n{f.text}" for f in files]
    sizes = [n + BLOCK_OVERHEAD for n in await count(blocks)]
    if sum(sizes) + BLOCK_OVERHEAD <= room:
        return HEADING + "".join(f"\n\n{b}" for b in blocks)
    share = (room - BLOCK_OVERHEAD) // len(files)
    whole = {i for i, size in enumerate(sizes) if size <= share}
    left = room - BLOCK_OVERHEAD - sum(sizes[i] for i in whole)
    chunks = [
        _Chunk(i, part, text)
        for i, f in enumerate(files)
        if i not in whole
        for part, text in enumerate(split(f.text, chunk_tokens * CHARS_PER_TOKEN))
    ]
    chosen = await _best(chunks, question, left, count)
    out = [HEADING]
    for i, f in enumerate(files):
        if i in whole:
            out.append(f"\n\n{blocks[i]}")
            continue
        total = sum(1 for c in chunks if c.file == i)
        mine = sorted((c for c in chosen if c.file == i), key=lambda c: c.part)
        parts = "\n\n".join(f"[part {c.part + 1} of {total}]\n{c.text}" for c in mine)
        out.append(f"\n\nFile: {f.name} (the parts that bear on the message; the rest left out)")
        out.append(f"\n{parts}" if parts else "\n(none fit)")
    return "".join(out)


def split(text: str, max_chars: int) -> list[str]:
    """``text`` in pieces of at most ``max_chars``, cut at line ends where there are any."""
    pieces: list[str] = []
    current = ""
    for line in text.splitlines(keepends=True):
        while len(line) > max_chars:  # a line longer than a piece: cut it
            if current:
                pieces.append(current)
                current = ""
            pieces.append(line[:max_chars])
            line = line[max_chars:]
        if len(current) + len(line) > max_chars:
            pieces.append(current)
            current = ""
        current += line
    if current.strip():
        pieces.append(current)
    return [p.strip("\n") for p in pieces if p.strip()]


def rank(question: str, texts: Sequence[str]) -> list[int]:
    """The indexes of the ``texts`` that match ``question``, best first (see the module);
    all of them in order when none does."""
    asked = stems(question)
    held = [stems(t, every=True) & asked for t in texts]
    df = {w: sum(1 for h in held if w in h) for w in asked}
    n = len(texts)
    scores = [sum(math.log(1 + n / df[w]) for w in h) for h in held]
    matching = [i for i in range(n) if scores[i] > 0]
    return sorted(matching, key=lambda i: (-scores[i], i)) if matching else list(range(n))


async def _best(chunks: list[_Chunk], question: str, room: int, count: CountTexts) -> list[_Chunk]:
    if not chunks:
        return []
    sizes = await count([c.text for c in chunks])
    chosen: list[_Chunk] = []
    used = 0
    for i in rank(question, [c.text for c in chunks]):
        cost = sizes[i] + BLOCK_OVERHEAD
        if used + cost <= room:
            chosen.append(chunks[i])
            used += cost
    return chosen
