"""Full-text search over a chat's messages, kept current by the database (migration 0008).

SQLite ranks with FTS5's ``bm25`` over the user's shard of the message index,
``messages_fts_<n>`` (``fts_table``, migration 0013; porter stemming; its ``user_id``
column, migration 0012, narrows every lookup to one user); Postgres with ``ts_rank`` over
the generated ``messages.content_tsv`` (english; GIN-indexed with ``user_id``). The user's
free text is never handed to either query language: it is cut into words (letters and
digits), common English words dropped, and each word becomes a quoted FTS5 string or a
bound ``plainto_tsquery``; the words are OR'ed. Every query is scoped by user and chat.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    column,
    func,
    literal_column,
    or_,
    select,
    table,
    text,
)
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import MessageRole, MessageStatus, in_prompt
from parley.store.schema import Message

FTS_SHARDS = 16  # SQLite's message index, in this many tables by user (migration 0013)
_SHARD_DIGITS = "0123456789abcdef"
MAX_WORDS = 32  # the query's distinct words kept, first come first kept
MAX_WORD_CHARS = 64
_WORD = re.compile(r"[^\W_]+")  # runs of letters and digits, in any script
STOP_WORDS = frozenset(
    """a about above after again all am an and any are as at be been before being below
    between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we
    were what when where which while who whom why will with would you your yours yourself
    yourselves""".split()
)
_OVERFETCH = 2  # rows read per result wanted, should in_prompt refuse any the SQL let by


def query_words(query: str, limit: int | None = MAX_WORDS) -> list[str]:
    """The words a query searches for: lower-cased, distinct, in order, stop words and
    one-character words dropped, at most ``limit`` of at most ``MAX_WORD_CHARS``."""
    words: dict[str, None] = {}
    for match in _WORD.finditer(query.lower()):
        word = match.group()
        if 2 <= len(word) <= MAX_WORD_CHARS and word not in STOP_WORDS:
            words[word] = None
            if len(words) == limit:
                break
    return list(words)


def shard_of(user_id: str) -> int:
    """The shard of SQLite's message index that holds a user's messages: the place of the
    id's last character in ``0123456789abcdef``, plus one, modulo ``FTS_SHARDS`` (migration
    0013's triggers compute the same in SQL; any other character lands in 0)."""
    return (_SHARD_DIGITS.find(user_id[-1:]) + 1) % FTS_SHARDS


def fts_table(user_id: str) -> str:
    """The FTS5 table of a user's messages (migration 0013)."""
    return f"messages_fts_{shard_of(user_id)}"


def fts5_query(words: list[str], *, user_id: str, every: bool = False) -> str:
    """An FTS5 MATCH expression over ``fts_table(user_id)`` for one user's messages: the user's
    id in the ``user_id`` column (migration 0012: FTS5 intersects the user's posting list
    with the words', never reading another user's) AND the words in ``content``, OR'ed
    (every word must match when ``every``). Each word and the id is a double-quoted string
    (a word holds no quote: ``query_words``; one would be doubled all the same)."""
    return f"user_id : {_quoted(user_token(user_id))} AND content : ({fts5_words(words, every)})"


def fts5_words(words: list[str], every: bool) -> str:
    """The words as FTS5 strings, OR'ed, or AND'ed when ``every`` must match."""
    return (" AND " if every else " OR ").join(_quoted(w) for w in words)


def user_token(user_id: str) -> str:
    """The token of a user's id that FTS5 looks up: its random part (``user_<hex>`` is
    tokenized ``user`` and ``<hex>``; naming ``user`` too would make the lookup a phrase over
    every row). Two ids could only share it if they shared the random part, and every
    query still checks ``messages.user_id`` itself."""
    return user_id.rsplit("_", 1)[-1]


def _quoted(word: str) -> str:
    return '"' + word.replace('"', '""') + '"'


def in_prompt_clause() -> ColumnElement[bool]:
    """``domain.in_prompt`` in SQL: the user's messages; answers completed, or cancelled
    after saying something."""
    return or_(
        Message.role == MessageRole.USER,
        Message.status == MessageStatus.COMPLETED,
        and_(Message.status == MessageStatus.CANCELLED, Message.content != ""),
    )


async def search_messages(
    s: AsyncSession, *, user_id: str, chat_id: str, query: str, before_seq: int, limit: int
) -> list[Message]:
    """The user's messages of the chat before ``before_seq`` that go into prompts and match
    any of the query's words, best match first (ties: newest first); [] if the query has
    no words to search for."""
    words = query_words(query)
    if not words or limit <= 0:
        return []
    sqlite = _dialect(s) == "sqlite"
    ranked = _sqlite_search(words, user_id) if sqlite else _postgres_search(words)
    rows = await s.scalars(
        ranked.where(
            Message.user_id == user_id,
            Message.chat_id == chat_id,
            Message.seq < before_seq,
            in_prompt_clause(),
        ).limit(limit * _OVERFETCH)
    )
    found = [m for m in rows if in_prompt(m.role, m.status, m.content)]
    return found[:limit]


def _dialect(s: AsyncSession) -> str:
    return s.get_bind().dialect.name


def _sqlite_search(words: list[str], user_id: str) -> Select[Message]:
    """Messages joined to their FTS5 rows by rowid, matched and ranked by bm25 (lower is
    better; the ``user_id`` column weighs nothing)."""
    name = fts_table(user_id)
    fts = table(name, column("rowid"))
    match = text(f"{name} MATCH :fts_query").bindparams(
        fts_query=fts5_query(words, user_id=user_id)
    )
    return (
        select(Message)
        .join(fts, fts.c.rowid == literal_column("messages.rowid"))
        .where(match)
        .order_by(func.bm25(literal_column(name), 1.0, 0.0), Message.seq.desc())
    )


def _postgres_search(words: list[str]) -> Select[Message]:
    """Messages whose generated ``content_tsv`` matches any word, ranked by ``ts_rank``."""
    terms = [
        func.plainto_tsquery(literal_column("'english'::regconfig"), bindparam(f"w{i}", word))
        for i, word in enumerate(words)
    ]
    tsquery: ColumnElement[Any] = terms[0]
    for term in terms[1:]:
        tsquery = tsquery.op("||")(term)
    tsv: ColumnElement[Any] = literal_column("messages.content_tsv")
    return (
        select(Message)
        .where(tsv.op("@@")(tsquery))
        .order_by(func.ts_rank(tsv, tsquery).desc(), Message.seq.desc())
    )
