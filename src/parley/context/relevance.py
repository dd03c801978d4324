"""Whether an older message bears on a new one, and the part of it that does.

Full-text search ranks any message sharing one word with the new message; a retrieved
message rides after the prompt's cached prefix, so every token of it is prefilled on the
user's turn. Hence a found message is kept only if it shares enough of the new message's
words that the prompt does not hold already (``bears_on``), and only its sentences that
share them are sent (``excerpt``).
Words are compared by a crude stem (``cats`` and ``cat``, ``called`` and ``call``).
"""

from __future__ import annotations

import re

from parley.store.search import MAX_WORDS, query_words

_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|\n+")
ELLIPSIS = " … "


def stems(text: str, *, every: bool = False) -> set[str]:
    """The stems of the words ``text`` asks about (as a query: at most its first few
    dozen), or of ``every`` word in it."""
    return {_stem(w) for w in query_words(text, None if every else MAX_WORDS)}


def bears_on(
    new: str, older: str, wanted: int, share: float = 0.0, known: frozenset[str] = frozenset()
) -> bool:
    """Whether ``older`` shares at least ``wanted`` of the words ``new`` asks about (all of
    them if it has fewer), and at least ``share`` of them (one at least) that are not
    ``known`` (stems of what the prompt holds already: its verbatim turns, its summary). A
    word or two in common with a long message is usually chance; a message whose words in
    common the recent turns hold anyway adds little."""
    asked = stems(new)
    if not asked:
        return False
    shared = asked & stems(older)
    fresh = shared - known
    return len(shared) >= min(wanted, len(asked)) and len(fresh) >= max(1, share * len(asked))


def excerpt(new: str, older: str, max_chars: int) -> str:
    """``older`` itself if it fits ``max_chars``; else its sentences sharing most of
    ``new``'s words, in their order, within ``max_chars`` (joined by an ellipsis); at
    worst its head, cut."""
    if len(older) <= max_chars:
        return older
    asked = stems(new)
    sentences = [s for s in _SENTENCE_END.split(older) if s.strip()]
    ranked = sorted(range(len(sentences)), key=lambda i: (-len(asked & stems(sentences[i])), i))
    chosen: list[int] = []
    used = 0
    for i in ranked:
        if not asked & stems(sentences[i]):
            break
        cost = len(sentences[i]) + (len(ELLIPSIS) if chosen else 0)
        if used + cost <= max_chars:
            chosen.append(i)
            used += cost
    if not chosen:
        return older[:max_chars].rstrip() + "…"
    return ELLIPSIS.join(sentences[i].strip() for i in sorted(chosen))


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:6]
