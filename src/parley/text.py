"""Rules about user text that do not depend on settings: whether it shows anything at all.

Titles and passwords of only invisible characters are refused: spaces, controls, format
characters (zero-width spaces and joiners, bidi marks, embeddings, overrides and isolates,
the BOM, tags), combining marks with nothing to combine with, and the letters and symbols
that render as blanks (Hangul fillers, the braille blank). Text with something visible is
kept as written, bidi controls included: the web UI isolates user and model text when it
shows it, so a control reorders only the text it is in.
"""

from __future__ import annotations

import re
import unicodedata

from parley.errors import ValidationFailed

_SURROGATE = re.compile("[\ud800-\udfff]")
# Letters and symbols that are drawn as nothing.
BLANKS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u17b4\u17b5\u180e")
# General categories of visible characters: letters, numbers, punctuation, symbols, and
# private use (icon fonts draw them).
VISIBLE_CATEGORIES = frozenset("LNPS") | {"Co"}


def is_visible(char: str) -> bool:
    if char in BLANKS:
        return False
    category = unicodedata.category(char)
    return category[0] in VISIBLE_CATEGORIES or category in VISIBLE_CATEGORIES


def has_visible(text: str) -> bool:
    """Whether any character of ``text`` shows."""
    return any(is_visible(c) for c in text)


DEFAULT_TITLE = "New chat"
TITLE_FROM_CHARS = 60  # a title made from a message, at most


def title_from(message: str, max_title_chars: int) -> str:
    """A chat's title from its first message: the message's first line that shows
    something, its whitespace collapsed, cut to ``TITLE_FROM_CHARS`` characters (or the
    titles' own limit, if lower; an ellipsis marks the cut); the default title when no line
    shows anything. The one rule, for the web UI's new chats (``title_from``) and for the
    chats programs keep (``store``)."""
    limit = min(max_title_chars, TITLE_FROM_CHARS)
    line = next((one for one in message.splitlines() if has_visible(one)), "")
    line = " ".join(line.split())
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    return line or DEFAULT_TITLE


def check_title(title: str) -> None:
    """ValidationFailed (``invalid_title``) for a title of only invisible characters; a
    blank title is left to the caller (a new chat may take the default title)."""
    if title and not has_visible(title):
        raise ValidationFailed(
            "title must contain a visible character, not only invisible or formatting ones",
            code="invalid_title",
            param="title",
        )


def storable(text: str) -> str:
    """Text every backend can store: NUL characters dropped (Postgres refuses them), lone
    surrogates (JSON can spell them, UTF-8 cannot) replaced by U+FFFD. Applied to text that
    comes from outside without a 400 to give: imports, and what an engine generates."""
    return _SURROGATE.sub("\ufffd", text.replace("\x00", ""))
