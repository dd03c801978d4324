"""Search across all of a user's chats: titles and messages, ranked, with highlighted snippets.

Messages are matched through the index retrieval uses (migration 0008: SQLite's
``messages_fts``, in 16 tables by user since migration 0013; Postgres's
``messages.content_tsv``), titles through migration 0011's (``chats_fts``,
``chats.title_tsv``); both are kept current by the database on every write.
Migration 0012 puts the user first in both databases' message indexes (SQLite: a
``user_id`` column of ``messages_fts``; Postgres: a GIN index on ``(user_id, content_tsv)``),
so a common word costs the user's matches, not the table's.
The user's text never reaches a query language: ``search.query_words`` cuts it into words
(letters and digits, stemmed by the index), each a quoted FTS5 string or a bound
``plainto_tsquery``, and every word must match (AND). Every query is scoped by user first.

Order: relevance (FTS5 ``bm25``, Postgres ``ts_rank``; a title's weighted ``TITLE_WEIGHT``
times a message's), then newest first, then id. Pages are offsets sealed into a cursor bound
to the query's words (``pages.Cursors``), at most ``MAX_OFFSET`` deep. A message hit is any
message of any branch (``chat_id``, ``message_id`` and ``seq`` locate it); a title hit has
no message. An archived chat's messages live in the blob store, not in the index: only
its title is found (``archived: true``) until it is restored (a new message in it brings it
back, and its messages into the index with it).

Snippets come from FTS5 ``snippet()`` / Postgres ``ts_headline`` with private-use marker
characters, turned here into plain text plus ``[start, end)`` ranges (in code points) of
the matched words: the caller renders text, never markup from a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, String, TextClause, TextualSelect, bindparam, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.types import TypeEngine

from parley.errors import InvalidRequest
from parley.store.pages import Cursors, Page, invalid_cursor
from parley.store.schema import UTCDateTime
from parley.store.search import fts5_query, fts5_words, fts_table, query_words

MAX_QUERY_CHARS = 200
MAX_OFFSET = 1000  # results beyond the first thousand are not paged to
TITLE_WEIGHT = 2.0
SNIPPET_TOKENS = 24  # FTS5 snippet length, in tokens
HEADLINE_CHARS = 20_000  # Postgres highlights this much of a message (ts_headline parses it)
START, STOP = "\ue000", "\ue001"  # marker characters (Unicode private use) around matches
_ELLIPSIS = "…"
SEARCH_CURSOR = "search"


@dataclass(frozen=True, slots=True)
class Hit:
    chat_id: str
    chat_title: str
    message_id: str | None  # None: the chat's title matched
    seq: int | None
    role: str | None
    snippet: str
    highlights: list[tuple[int, int]]  # [start, end) in code points of ``snippet``
    created_at: datetime  # the message's; a title hit's: the chat's last activity
    archived: bool


@dataclass(frozen=True, slots=True)
class _Row:
    kind: str  # "m" a message, "t" a title
    id: str
    rowid: int
    chat_id: str
    seq: int | None
    role: str | None
    created_at: datetime


def search_words(query: str) -> list[str]:
    """The query's words, or InvalidRequest (400 ``invalid_query``) when it is too long or
    has nothing to search for."""
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidRequest(
            f"the search query is longer than {MAX_QUERY_CHARS} characters",
            code="query_too_long",
            param="q",
        )
    words = query_words(query)
    if not words:
        raise InvalidRequest(
            "the search query has no words to search for (single letters and very common "
            "words are skipped)",
            code="query_empty",
            param="q",
        )
    return words


async def search_chats(
    s: AsyncSession,
    *,
    user_id: str,
    query: str,
    limit: int,
    cursor: str | None,
    cursors: Cursors,
) -> Page[Hit]:
    """One page of the user's titles and messages matching every word of ``query``."""
    words = search_words(query)
    kind = _cursor_kind(words)
    offset = _offset_of(cursors, kind, cursor) if cursor else 0
    sqlite = s.get_bind().dialect.name == "sqlite"
    page = _sqlite_page if sqlite else _postgres_page
    rows = await page(s, user_id, words, limit + 1, offset)
    more = len(rows) > limit and offset + limit < MAX_OFFSET
    rows = rows[:limit]
    hits = await _hits(s, sqlite, words, user_id, rows)
    next_cursor = cursors.seal(kind, [offset + limit]) if more else None
    return Page(hits, next_cursor)


def _cursor_kind(words: list[str]) -> str:
    """A cursor is bound to its query's words: another query's is refused."""
    return SEARCH_CURSOR + "\n" + " ".join(words)


def _offset_of(cursors: Cursors, kind: str, cursor: str) -> int:
    """The one decoder of a search cursor: the offset of the next page."""
    match cursors.open(kind, cursor):
        case [int() as offset] if 0 < offset <= MAX_OFFSET:
            return offset
    raise invalid_cursor()


_RANKED_COLUMNS: dict[str, TypeEngine[Any]] = {
    "kind": String(),
    "id": String(),
    "rowid": Integer(),
    "chat_id": String(),
    "seq": Integer(),
    "role": String(),
    "created_at": UTCDateTime(),
}
_OUTER = "kind, id, rowid, chat_id, seq, role, created_at"
_ORDER = " ORDER BY score DESC, created_at DESC, id DESC LIMIT :limit OFFSET :offset"


# SQLite: the FTS tables drive (a user's filter as the outer loop would run the whole
# full-text query once per row of the user's). Messages: the user's shard of the index
# (``search.fts_table``, migration 0013: bm25 counts a word's frequency there, not in every
# user's rows), whose MATCH names the user's id in its ``user_id`` column (migration 0012),
# so FTS5 reads only where the user's posting list and the words' meet; bm25 weighs that
# column nothing. Titles: the user's rowids read from the covering index on user_id. Equal
# ranks by rowid (the order rows were written in), then only the page's rows are read.
def _sqlite_ranked(fts: str) -> TextClause:
    """The page's (kind, rowid), best first, with the user's messages in ``fts``."""
    return text(
        "SELECT kind, rowid FROM ("  # noqa: S608 (a table name of fts_table's)
        f"SELECT 'm' AS kind, rowid, -bm25({fts}, 1.0, 0.0) AS score FROM {fts}"
        f" WHERE {fts} MATCH :messages_fts"
        f" UNION ALL SELECT 't', rowid, -bm25(chats_fts) * {TITLE_WEIGHT} FROM chats_fts"
        " WHERE chats_fts MATCH :fts"
        " AND +rowid IN (SELECT rowid FROM chats WHERE user_id = :user_id))"
        " ORDER BY score DESC, rowid DESC, kind LIMIT :limit OFFSET :offset"
    )


_SQLITE_ROWS = text(
    "SELECT 'm', id, rowid, chat_id, seq, role, created_at FROM messages"
    " WHERE user_id = :user_id AND rowid IN :messages"
    " UNION ALL SELECT 't', id, rowid, id, NULL, NULL, last_activity_at FROM chats"
    " WHERE user_id = :user_id AND rowid IN :chats"
).bindparams(bindparam("messages", expanding=True), bindparam("chats", expanding=True))


async def _sqlite_page(
    s: AsyncSession, user_id: str, words: list[str], limit: int, offset: int
) -> list[_Row]:
    """The page's messages (the user's ``messages_fts_<n>``) and titles (``chats_fts``) of the user
    matching every word, by bm25 (lower is better, hence negated)."""
    params = {
        "user_id": user_id,
        "messages_fts": fts5_query(words, user_id=user_id, every=True),
        "fts": fts5_words(words, every=True),
        "limit": limit,
        "offset": offset,
    }
    result = await s.execute(_sqlite_ranked(fts_table(user_id)), params)
    ranked = [(kind, rowid) for kind, rowid in result.all()]
    if not ranked:
        return []
    messages = [rowid for kind, rowid in ranked if kind == "m"] or [-1]
    chats = [rowid for kind, rowid in ranked if kind == "t"] or [-1]
    sql = _SQLITE_ROWS.columns(**_RANKED_COLUMNS)
    params = {"user_id": user_id, "messages": messages, "chats": chats}
    rows = {(r[0], r[2]): _Row(*r) for r in (await s.execute(sql, params)).all()}
    return [rows[key] for key in ranked if key in rows]


async def _postgres_page(
    s: AsyncSession, user_id: str, words: list[str], limit: int, offset: int
) -> list[_Row]:
    """The page's rows, read through the GIN indexes on ``(user_id, *_tsv)`` (migration
    0012). The planner prices ``@@`` as cheap and, for a user whose rows lie together,
    prefers reading all of them by ``ix_messages_user_id`` and testing each: 65 ms for a
    common word at 100,000 messages (``bench/search.py``), where the GIN index intersects
    the user with the words in 2 ms and the whole query takes 23. Index scans are off for
    this one statement (``SET LOCAL``, put back after it; a failure rolls it back)."""
    params = {"user_id": user_id, "limit": limit, "offset": offset}
    await s.execute(text("SET LOCAL enable_indexscan = off"))
    rows = [_Row(*r) for r in (await s.execute(_postgres_ranked(words), params)).all()]
    await s.execute(text("SET LOCAL enable_indexscan = on"))
    return rows


def _tsquery(words: list[str]) -> str:
    """Every word's ``plainto_tsquery``, AND'ed (each word a bound parameter)."""
    terms = [f"plainto_tsquery('english'::regconfig, :w{i})" for i in range(len(words))]
    return "(" + " && ".join(terms) + ")"


def _word_params(words: list[str]) -> list[Any]:
    return [bindparam(f"w{i}", word, type_=String()) for i, word in enumerate(words)]


def _postgres_ranked(words: list[str]) -> TextualSelect:
    """Messages (``content_tsv``) and titles (``title_tsv``) of the user matching every
    word, by ``ts_rank``."""
    q = _tsquery(words)
    messages = (
        "SELECT 'm' AS kind, m.id AS id, 0 AS rowid, m.chat_id AS chat_id, m.seq AS seq,"  # noqa: S608
        " m.role AS role, m.created_at AS created_at,"
        f" ts_rank(m.content_tsv, {q}) AS score"
        f" FROM messages m WHERE m.user_id = :user_id AND m.content_tsv @@ {q}"
    )
    titles = (
        "SELECT 't', c.id, 0, c.id, NULL, NULL, c.last_activity_at,"  # noqa: S608
        f" ts_rank(c.title_tsv, {q}) * {TITLE_WEIGHT}"
        f" FROM chats c WHERE c.user_id = :user_id AND c.title_tsv @@ {q}"
    )
    sql = text(f"SELECT {_OUTER} FROM ({messages} UNION ALL {titles}) AS hits{_ORDER}")  # noqa: S608
    return sql.bindparams(*_word_params(words)).columns(**_RANKED_COLUMNS)


async def _hits(
    s: AsyncSession, sqlite: bool, words: list[str], user_id: str, rows: list[_Row]
) -> list[Hit]:
    """The page's rows with their chats' titles and archived flags and their snippets."""
    if not rows:
        return []
    chat_ids = sorted({r.chat_id for r in rows})
    chats = await _chats(s, user_id, chat_ids)
    snippets = await (
        _sqlite_snippets(s, words, fts_table(user_id), rows)
        if sqlite
        else _pg_snippets(s, words, rows)
    )
    hits = []
    for r in rows:
        title, archived = chats[r.chat_id]
        marked = snippets.get((r.kind, r.id), "")
        snippet, highlights = unmark(marked) if marked else (title, [])
        message_id = r.id if r.kind == "m" else None
        hits.append(
            Hit(r.chat_id, title, message_id, r.seq, r.role, snippet, highlights,
                r.created_at, archived)
        )  # fmt: skip
    return hits


async def _chats(s: AsyncSession, user_id: str, chat_ids: list[str]) -> dict[str, tuple[str, bool]]:
    sql = text(
        "SELECT id, title, archived_at IS NOT NULL FROM chats"
        " WHERE user_id = :user_id AND id IN :ids"
    ).bindparams(bindparam("ids", expanding=True))
    result = await s.execute(sql, {"user_id": user_id, "ids": chat_ids})
    return {chat_id: (title, bool(archived)) for chat_id, title, archived in result.all()}


async def _sqlite_snippets(
    s: AsyncSession, words: list[str], messages_fts: str, rows: list[_Row]
) -> dict[tuple[str, str], str]:
    """FTS5 ``snippet()`` of the page's messages and ``highlight()`` of its titles, computed
    for these rows only (by rowid)."""
    out: dict[tuple[str, str], str] = {}
    every = fts5_words(words, every=True)
    plan = (("m", messages_fts, f"snippet({messages_fts}, 0, :a, :b, :e, {SNIPPET_TOKENS})",
             f"content : ({every})"),
            ("t", "chats_fts", "highlight(chats_fts, 0, :a, :b)", every))  # fmt: skip
    for kind, fts, marked, match in plan:
        by_rowid = {r.rowid: r.id for r in rows if r.kind == kind}
        if not by_rowid:
            continue
        sql = text(
            f"SELECT rowid, {marked} FROM {fts} WHERE {fts} MATCH :fts AND rowid IN :rowids"  # noqa: S608
        ).bindparams(bindparam("rowids", expanding=True))
        params = {"a": START, "b": STOP, "e": _ELLIPSIS, "fts": match}
        result = await s.execute(sql, {**params, "rowids": list(by_rowid)})
        out.update({(kind, by_rowid[rowid]): snippet for rowid, snippet in result.all()})
    return out


_HEADLINE_OPTIONS = (
    f'StartSel="{START}", StopSel="{STOP}", MaxWords=30, MinWords=12, ShortWord=2, '
    f'MaxFragments=2, FragmentDelimiter=" {_ELLIPSIS} "'
)

_TITLE = f'HighlightAll=true, StartSel="{START}", StopSel="{STOP}"'


async def _pg_snippets(
    s: AsyncSession, words: list[str], rows: list[_Row]
) -> dict[tuple[str, str], str]:
    """``ts_headline`` of the page's messages (their first ``HEADLINE_CHARS``) and titles."""
    q = _tsquery(words)
    messages = [r.id for r in rows if r.kind == "m"] or [""]
    titles = [r.id for r in rows if r.kind == "t"] or [""]
    sql = text(
        "SELECT 'm', id, ts_headline('english'::regconfig, left(content, :chars),"  # noqa: S608
        f" {q}, :options) FROM messages WHERE id IN :messages"
        " UNION ALL SELECT 't', id, ts_headline('english'::regconfig, title,"
        f" {q}, :title_options)"
        " FROM chats WHERE id IN :titles"
    ).bindparams(
        *_word_params(words),
        bindparam("messages", expanding=True),
        bindparam("titles", expanding=True),
    )
    params = {"chars": HEADLINE_CHARS, "options": _HEADLINE_OPTIONS, "title_options": _TITLE}
    result = await s.execute(sql, {**params, "messages": messages, "titles": titles})
    return {(kind, hit_id): headline for kind, hit_id, headline in result.all()}


def unmark(marked: str) -> tuple[str, list[tuple[int, int]]]:
    """Text with marker pairs → the text without markers and the marked [start, end)
    ranges (code points). A marker character a message itself held only ever shifts a
    highlight: the result is text either way."""
    out: list[str] = []
    ranges: list[tuple[int, int]] = []
    start: int | None = None
    length = 0
    for ch in marked:
        if ch == START:
            start = length
        elif ch == STOP:
            if start is not None and length > start:
                ranges.append((start, length))
            start = None
        else:
            out.append(ch)
            length += 1
    return "".join(out), ranges
