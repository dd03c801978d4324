"""The texts the rule set reads: the usual ways to slip a word past a pattern undone.

Two foldings, character by character, and the rule set searches both:

- ``plain``: ASCII as it is; format characters (zero-width spaces and joiners, bidi
  controls: category Cf) removed; every other character in its NFKC form (fullwidth and
  mathematical letters, ligatures: their plain letters). Patterns in any script match it.
- ``skeleton``: the same, and then each letter that is confusable with ASCII as the ASCII
  it looks like (Unicode TR39's skeleton, from ICU's ``SpoofChecker``: Cyrillic i and a
  (U+0456, U+0430), Greek Alpha (U+0391), the dotless i (U+0131), the script l (U+2113) …);
  a letter whose skeleton is not plain ASCII (``é``, ``я``, CJK) is kept. ASCII patterns
  catch a word spelt with look-alike letters here (a Cyrillic word may look like Latin
  here, so a pattern in Cyrillic is matched against ``plain``).

Prompts are folded whole after a whole-text NFKC (which also composes decomposed accents);
answers are folded piece by piece as they stream, with ``fold_mapped`` telling where each
folded character came from, so that what is released is the text the model wrote, never
the folded one.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

import icu  # type: ignore[import-untyped]

_SPOOF = icu.SpoofChecker()


@lru_cache(maxsize=65_536)
def fold_char(ch: str, skeleton: bool) -> str:
    """One character as the rule set reads it ("" for a format character)."""
    if ch.isascii():
        return ch
    if unicodedata.category(ch) == "Cf":
        return ""
    return "".join(_plain(c, skeleton) for c in unicodedata.normalize("NFKC", ch))


def _plain(ch: str, skeleton: bool) -> str:
    if ch.isascii():
        return ch
    if unicodedata.category(ch) == "Cf":
        return ""
    if not skeleton:
        return ch
    looks_like = _SPOOF.getSkeleton(0, ch)
    return looks_like if looks_like.isascii() else ch


def fold(text: str, *, skeleton: bool) -> str:
    """A whole text (a prompt) as the rule set reads it."""
    if text.isascii():  # (NFKC leaves ASCII as it is, and it has no format characters)
        return text
    return "".join(fold_char(ch, skeleton) for ch in unicodedata.normalize("NFKC", text))


def fold_mapped(text: str, start: int, *, skeleton: bool) -> tuple[str, list[int]]:
    """``text`` (a piece that begins at ``start`` in the whole answer) folded, and for each
    folded character the position in the whole answer of the character it came from."""
    if text.isascii():
        return text, list(range(start, start + len(text)))
    out: list[str] = []
    origin: list[int] = []
    for i, ch in enumerate(text, start=start):
        folded = fold_char(ch, skeleton)
        out.append(folded)
        origin += [i] * len(folded)
    return "".join(out), origin
