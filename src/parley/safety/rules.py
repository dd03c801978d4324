"""The built-in rule set: patterns per category and prompt-injection heuristics, no model.

Each stage's categories are compiled once into one alternation (a named group per category),
so a check is one regular-expression search whatever the number of categories. A prompt is
checked whole, and an answer piece by piece, on the same two folded texts (``normalize.py``:
NFKC, format characters such as zero-width spaces removed, and in the second letters
confusable with ASCII as the ASCII they look like: the usual ways to slip a word past a
pattern); a match in either blocks. What users see is the text as written. An answer is
scanned as it streams (``OutputScan``): each new piece is searched from where a match could
still begin, and a partial match at the end (``regex``'s ``partial=True``: "the text so far
could be the start of a match") holds back only the text from where it starts, until the
next piece decides it. So no piece of a blocked phrase is ever released, nothing else waits,
and each step costs a search over the new text and what is held back, not over the whole
answer.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import regex

from parley.safety.interface import ALLOWED, Sample, Stage, Verdict
from parley.safety.normalize import fold, fold_mapped
from parley.safety.settings import RuleCategory, RulesSettings

PROMPT_INJECTION = "prompt_injection"
INJECTION_REASON = "the message tries to override the assistant's instructions"

# Heuristics: the phrasings that try to make a model drop its instructions, reveal them,
# or take on an unrestricted persona, and chat-template markers pasted into a message to
# forge a system or assistant turn.
INJECTION_PATTERNS = (
    r"\b(?:ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}?\b(?:all|any|every|the|your"
    r"|previous|prior|above|earlier|preceding|system)\b[^.\n]{0,30}?\b(?:instructions?|prompts?"
    r"|rules|directives|guidelines|guardrails|restrictions)\b",
    r"\b(?:reveal|show|print|repeat|output|tell me|leak|dump)\b[^.\n]{0,30}?\b(?:your|the)\b"
    r"[^.\n]{0,20}?\b(?:system prompt|hidden (?:prompt|instructions)|initial instructions"
    r"|developer message)\b",
    r"\byou are (?:now )?(?:DAN|in (?:developer|god|jailbreak) mode)\b",
    r"\b(?:enable|activate|enter)\b[^.\n]{0,20}?\b(?:developer|jailbreak|god) mode\b",
    r"\bpretend\b[^.\n]{0,30}?\b(?:no|without)\b[^.\n]{0,20}?\b(?:rules|restrictions|filters"
    r"|guidelines|limits)\b",
    r"<\|(?:im_start|im_end|system|endoftext|start_header_id|eot_id)\|>|\[/?INST\]|<</?SYS>>",
)

# how much of the text before the held-back part a scan keeps, for \b and look-behinds
_CONTEXT_CHARS = 32
_FLAGS = regex.IGNORECASE | regex.UNICODE


def _alternation(groups: Iterable[tuple[str, list[str]]]) -> regex.Pattern[str] | None:
    parts = [
        f"(?P<g{i}>{'|'.join(f'(?:{p})' for p in patterns)})"
        for i, (_, patterns) in enumerate(groups)
    ]
    return regex.compile("|".join(parts), _FLAGS) if parts else None


class _Compiled:
    """One stage's categories as one search: the category of a match is its group's."""

    def __init__(self, categories: list[tuple[str, list[str]]], reasons: dict[str, str]) -> None:
        self.pattern = _alternation(categories)
        self.names = {f"g{i}": name for i, (name, _) in enumerate(categories)}
        self.reasons = reasons

    def verdict(self, match: regex.Match[str]) -> Verdict:
        category = self.names[str(match.lastgroup)]
        return Verdict(True, category, self.reasons.get(category) or f"it matches {category}")


class RuleSet:
    """The rule set a ``RulesSettings`` describes (compiled at start-up). A whole text is
    searched category by category (a category's patterns as one alternation, whose common
    literal the engine skips ahead to: several times faster over a prompt than one search of
    every category at once); an answer's pieces, by one search of all of them (over the few
    characters each piece adds, one search beats many)."""

    inline = True  # checked on the event loop, piece by piece, with no window held back

    def __init__(self, name: str, settings: RulesSettings) -> None:
        self.name = name
        categories = settings.categories
        self._reasons = {n: c.reason or f"it matches the {n} rules" for n, c in categories.items()}
        self._reasons[PROMPT_INJECTION] = INJECTION_REASON
        injection = (
            [(PROMPT_INJECTION, list(INJECTION_PATTERNS))] if settings.prompt_injection else []
        )
        staged = {
            Stage.INPUT: _of_stage(categories, Stage.INPUT) + injection,
            Stage.OUTPUT: _of_stage(categories, Stage.OUTPUT),
        }
        self._whole = {stage: _each(groups) for stage, groups in staged.items()}
        self._scanned = _Compiled(staged[Stage.OUTPUT], self._reasons)
        self._any = _each([(n, c.patterns) for n, c in categories.items()] + injection)

    async def check(self, sample: Sample) -> Verdict:
        return self.check_now(sample)

    def check_now(self, sample: Sample) -> Verdict:
        texts = _folded(sample.text)
        for category, pattern in self._whole[sample.stage]:
            if any(pattern.search(text) for text in texts):
                return Verdict(True, category, self._reasons[category])
        return ALLOWED

    def categories_of(self, text: str) -> list[str]:
        """Every category (of any stage) ``text`` matches: the ``/v1/moderations`` answer."""
        texts = _folded(text)
        return [c for c, pattern in self._any if any(pattern.search(t) for t in texts)]

    def scan(self) -> OutputScan | None:
        """A scan of one answer as it streams (None: no category applies to answers)."""
        return None if self._scanned.pattern is None else OutputScan(self._scanned)

    async def close(self) -> None:
        """Nothing to let go of."""


def _folded(text: str) -> tuple[str, ...]:
    """The text's two foldings (one, when they are the same)."""
    plain, skeleton = fold(text, skeleton=False), fold(text, skeleton=True)
    return (plain,) if plain == skeleton else (plain, skeleton)


def _each(groups: list[tuple[str, list[str]]]) -> list[tuple[str, regex.Pattern[str]]]:
    """Each category's patterns as one search of its own."""
    found = [(name, _alternation([(name, patterns)])) for name, patterns in groups]
    return [(name, pattern) for name, pattern in found if pattern is not None]


def _of_stage(categories: dict[str, RuleCategory], stage: Stage) -> list[tuple[str, list[str]]]:
    return [(n, c.patterns) for n, c in categories.items() if stage in c.stages]


class OutputScan:
    """The rule set over one answer as it streams: ``feed`` each piece, release up to what
    it answers. Both foldings are scanned; the text is released up to where neither could
    still hold a match. While the answer is all ASCII its two foldings are the same text
    (each character folds to itself), so one scan stands for both until the first other
    character, where the skeleton's scan starts as a copy of it (the usual answer in English
    costs one search a piece, not two)."""

    def __init__(self, compiled: _Compiled) -> None:
        self._scans = [_FoldedScan(compiled, skeleton=False)]

    def feed(self, text: str, *, final: bool = False) -> Verdict | int:
        """Take the answer's next piece: the verdict if it completes a blocked match, else
        how far (in characters of the whole answer) the text may be released."""
        scans = self._scans
        if len(scans) == 1:
            if text.isascii():  # (the usual case: one folding, one scan)
                return scans[0].feed(text, final=final)
            scans.append(scans[0].twin(skeleton=True))
        released = []
        for scan in scans:
            answer = scan.feed(text, final=final)
            if isinstance(answer, Verdict):
                return answer
            released.append(answer)
        return min(released)


class _FoldedScan:
    """One folding of the answer, scanned. Keeps only the text a match could still start in
    (and a little before it); searches the folded answer (``normalize.fold_mapped``) and
    answers in characters of the answer as written."""

    def __init__(self, compiled: _Compiled, *, skeleton: bool) -> None:
        assert compiled.pattern is not None
        self._pattern = compiled.pattern
        self._compiled = compiled
        self._skeleton = skeleton
        self._tail = ""  # the folded text from self._offset on
        # of each folded character of the tail, its position in the answer as written; None
        # while the answer is all ASCII (each character folds to itself, where it stands)
        self._origin: list[int] | None = None
        self._offset = 0  # in the folded answer
        self._fed = 0  # characters of the answer as written
        self._hold = 0  # where a match could still begin: nothing before it can be blocked

    def twin(self, *, skeleton: bool) -> _FoldedScan:
        """This scan as it stands, for the other folding (exact while all the answer fed so
        far is ASCII: both foldings read it the same)."""
        twin = copy.copy(self)
        twin._skeleton = skeleton
        twin._origin = None if self._origin is None else list(self._origin)
        return twin

    def feed(self, text: str, *, final: bool = False) -> Verdict | int:
        """The verdict if ``text`` completes a blocked match, else how far the answer may be
        released. ``final``: nothing follows, so what could still grow into a match (or out
        of one: a match that reaches the end, whose ``\\b`` the next piece may undo) is
        decided now."""
        if self._origin is None and text.isascii():
            folded = text
        else:
            if self._origin is None:  # the first other character: positions kept from now
                self._origin = list(range(self._offset, self._offset + len(self._tail)))
            folded, origin = fold_mapped(text, self._fed, skeleton=self._skeleton)
            self._origin += origin
        self._fed += len(text)
        self._tail += folded
        start = self._hold - self._offset
        end = len(self._tail)
        # one search in the usual case: the leftmost match, complete or (not final) partial
        first = self._pattern.search(self._tail, start, partial=not final)
        if first is not None and first.partial:  # a complete match may lie past it
            done = self._pattern.search(self._tail, start)
            if done is not None and done.end() < end:
                return self._compiled.verdict(done)
        elif first is not None and (final or first.end() < end):
            return self._compiled.verdict(first)
        self._hold = self._offset + (end if first is None else first.start())
        released = self._released()
        keep = self._hold - self._offset - _CONTEXT_CHARS
        if keep > 0:
            self._tail = self._tail[keep:]
            if self._origin is not None:
                del self._origin[:keep]
            self._offset += keep
        return released

    def _released(self) -> int:
        """The answer as written, up to where a match could still begin."""
        held = self._hold - self._offset
        if held >= len(self._tail):
            return self._fed
        return self._offset + held if self._origin is None else self._origin[held]
