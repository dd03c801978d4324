"""A chat's prompt assembled under a token budget, in a stable order:

1. the system message: the model's system prompt, then the chat's rolling summary;
2. the most recent turns, verbatim;
3. the new message, followed by the older messages retrieved for it (if any).

The prefix stays byte-identical from one turn to the next: the verbatim window starts right
after what the summary covers, and moves only a whole chunk at a time (when a fold lands, or
when the window overflows the budget before a fold could land), never one turn per turn.
The retrieved snippets change every turn, so they ride in the last message, after the
prefix: placed before the recent turns (where the issue lists them) they would change the
prompt's prefix on every turn and waste the engine's prefix cache.

Pure functions over counted turns; ``context.prompts`` reads the turns and counts them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from parley.domain import MessageRole
from parley.engines.interface import ChatMessage
from parley.errors import InvalidRequest
from parley.store import branches
from parley.store.parts import MessageParts, prompt_message

# A chat template's own tokens a message (ChatML: <|im_start|> role \n … <|im_end|> \n) and
# for the assistant's opening; the exact count of the whole prompt corrects any difference
MESSAGE_OVERHEAD = 5
PROMPT_OVERHEAD = 5

CountText = Callable[[str], int]


class ContextTooLong(InvalidRequest):
    """One message (or a program's prompt) larger than the input budget."""

    code = "context_length_exceeded"


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A run's new message: stored (``seq``), or about to be (``seq`` None)."""

    content: str
    model: str
    tier: str
    max_tokens: int
    seq: int | None = None
    # where a message about to be stored goes: after this one (an edit's place), or after
    # the branch shown (``branches.ACTIVE``)
    after: str | None = branches.ACTIVE
    attachment_ids: tuple[str, ...] = ()  # not stored yet: the files it will be sent with


@dataclass(frozen=True, slots=True)
class Turn:
    """One stored message of the chat, with its length in the model's tokens (its content's
    and the template's few)."""

    seq: int
    role: str
    content: str
    tokens: int
    parts: MessageParts = field(default_factory=MessageParts)  # its calls, or the call it answers


@dataclass(frozen=True, slots=True)
class Limits:
    """The budget of one prompt and the thresholds derived from it (all in tokens)."""

    budget: int  # the prompt's whole input: window - output allowance, capped by the tier
    window: int  # the model's context window
    output: int  # the run's output allowance (max_tokens)
    tier_cap: int | None  # the tier's max_input_tokens
    trigger: int  # the verbatim turns past this: fold the oldest into the summary
    fold: int  # the oldest turns folded at once (a chunk)
    snippets: int  # retrieved messages, at most
    snippet_tokens: int  # retrieved messages' share of the budget
    snippet_chars: int  # a retrieved message longer than this is cut

    def describe(self) -> str:
        """Where the budget comes from, for an error that names the limit."""
        room = max(self.window - self.output, 0)
        why = (
            f"the model's {self.window}-token context window less the {self.output} tokens "
            f"kept for the answer ({room})"
        )
        if self.tier_cap is not None and self.tier_cap < room:
            why = f"your tier's max_input_tokens ({self.tier_cap}), within {why}"
        return why


@dataclass(frozen=True, slots=True)
class Fixed:
    """What every prompt of a chat holds whatever the history: the system message's parts."""

    system_prompt: str | None
    summary: str | None
    summary_through_seq: int  # the last message the summary covers; 0: no summary
    summary_shown: bool = True  # False: too long for this run's budget (left out)
    instructions: Instructions | None = None  # the user's and the chat's own


@dataclass(frozen=True, slots=True)
class Instructions:
    """Custom instructions: the user's (every chat) and the chat's own."""

    user: str | None = None
    chat: str | None = None

    @property
    def sources(self) -> list[str]:
        return [name for name, text in (("user", self.user), ("chat", self.chat)) if text]

    def text(self) -> str:
        parts = []
        if self.user:
            parts.append(f"The user's instructions for every answer:\n{self.user}")
        if self.chat:
            parts.append(f"The user's instructions for this conversation:\n{self.chat}")
        return "\n\n".join(parts)


@dataclass(frozen=True, slots=True)
class FoldPlan:
    """The chat's oldest unsummarized turns to fold into its summary next: the summary
    covering messages up to ``after_seq`` and these turns become the new summary."""

    turns: tuple[Turn, ...]
    summary: str | None
    after_seq: int

    @property
    def through_seq(self) -> int:
        return self.turns[-1].seq


@dataclass(slots=True)
class Composition:
    """What went into a prompt, stored with the run (``runs.prompt_parts``) and shown by
    ``GET /api/runs/{id}``: tokens per part (estimated per message; ``total_tokens`` is the
    engine's exact count) and which messages."""

    budget_tokens: int
    system_tokens: int = 0  # the system prompt's and the custom instructions'
    instructions: list[str] = field(default_factory=list)  # whose: "user", "chat"
    summary_tokens: int = 0
    summary_through_seq: int = 0
    snippet_tokens: int = 0
    snippet_seqs: list[int] = field(default_factory=list)
    recent_tokens: int = 0
    recent_seqs: list[int] = field(default_factory=list)  # [first, last]; [] if none
    new_message_tokens: int = 0
    left_out_seqs: list[int] = field(default_factory=list)  # [first, last] dropped, unfolded
    total_tokens: int = 0
    fold_due: bool = False

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Assembled:
    messages: list[ChatMessage]
    composition: Composition
    fold: FoldPlan | None


def system_text(fixed: Fixed) -> str:
    """The system message: the system prompt, then the summary of the earlier turns."""
    parts = [fixed.system_prompt] if fixed.system_prompt else []
    if fixed.instructions is not None and fixed.instructions.sources:
        parts.append(fixed.instructions.text())
    if fixed.summary and fixed.summary_shown:
        parts.append(
            f"Summary of this conversation's earlier messages (1 to {fixed.summary_through_seq}):"
            f"\n{fixed.summary}"
        )
    return "\n\n".join(parts)


def refuse_too_long(tokens: int, limits: Limits, what: str, *, param: str = "content") -> None:
    """ContextTooLong if ``tokens`` (a single message, or a program's whole prompt) exceed
    the input budget."""
    if tokens > limits.budget:
        raise ContextTooLong(
            f"{what} is {tokens} tokens; a prompt may hold at most {limits.budget}: "
            f"{limits.describe()}",
            param=param,
        )


def chunk_ends(history: Sequence[Turn], fold: int) -> list[int]:
    """The indexes where the history's chunks end (exclusive), from its oldest turn: each
    chunk at least ``fold`` tokens and ending before a user's turn where it can, so a window
    never opens on an answer. The same history gives the same chunks every turn."""
    ends: list[int] = []
    size = 0
    for i, turn in enumerate(history):
        size += turn.tokens
        after_answer = i + 1 == len(history) or history[i + 1].role == MessageRole.USER
        if size >= fold and after_answer:
            ends.append(i + 1)
            size = 0
    return ends


def window_start(history: Sequence[Turn], room: int, fold: int) -> int:
    """Where the verbatim window opens: the oldest turn unless the history overflows
    ``room``, then past as many whole chunks as it takes (at the latest, the newest turn
    that fits alone)."""
    total = sum(t.tokens for t in history)
    start = 0
    for end in chunk_ends(history, fold):
        if total <= room:
            return start
        total -= sum(t.tokens for t in history[start:end])
        start = end
    while total > room and start < len(history):  # the last, unfinished chunk
        total -= history[start].tokens
        start += 1
    return start


def fold_plan(fixed: Fixed, history: Sequence[Turn], limits: Limits) -> FoldPlan | None:
    """The oldest chunk to fold, once the unsummarized turns pass the trigger; more chunks
    if the chat outran its folds (its turns came faster than folds landed), as many as it
    takes to bring what stays verbatim back under the trigger, within half the budget (the
    fold's own prompt must fit). Never the newest turn."""
    total = sum(t.tokens for t in history)
    if total <= limits.trigger:
        return None
    ends = [end for end in chunk_ends(history, limits.fold) if end < len(history)]
    if not ends:
        return None
    before = list(itertools.accumulate(t.tokens for t in history))  # tokens up to i, incl.
    take = ends[0]
    for end in ends[1:]:
        if total - before[take - 1] <= limits.trigger:
            break
        if before[end - 1] > limits.budget // 2:
            break
        take = end
    return FoldPlan(tuple(history[:take]), fixed.summary, fixed.summary_through_seq)


def snippets_block(snippets: Sequence[Turn]) -> str:
    """The retrieved messages, oldest first, after the new message's own text: the next
    turn's prompt holds that message without them, and shares its tokens with this one's up
    to where they begin (before it, the whole message would be prefilled again)."""
    lines = [f"[message {t.seq}, {t.role}] {t.content}" for t in sorted(snippets, key=_seq)]
    return "\n\n(Earlier in this conversation:\n" + "\n".join(lines) + ")"


def _seq(turn: Turn) -> int:
    return turn.seq


def pick_snippets(found: Sequence[Turn], limits: Limits, count: CountText) -> list[Turn]:
    """The best retrieved messages that fit the snippets' share, each cut to
    ``snippet_chars`` and counted again."""
    chosen: list[Turn] = []
    used = 0
    for turn in found:
        if len(chosen) >= limits.snippets:
            break
        text = turn.content
        if len(text) > limits.snippet_chars:
            text = text[: limits.snippet_chars] + "…"
        tokens = count(text) + MESSAGE_OVERHEAD
        if used + tokens <= limits.snippet_tokens:
            chosen.append(Turn(turn.seq, turn.role, text, tokens))
            used += tokens
    return chosen


def compose(
    fixed: Fixed,
    history: Sequence[Turn],
    new: Turn,
    snippets: Sequence[Turn],
    *,
    start: int,
    system: tuple[int, int],
    limits: Limits,
) -> Assembled:
    """The prompt's messages and what went into them (``total_tokens`` still estimated)."""
    text = system_text(fixed)
    messages = [ChatMessage(MessageRole.SYSTEM.value, text)] if text else []
    recent = history[start:]
    # a tool's result whose call was left out of the prompt cannot be sent alone
    shown = list(recent)
    while shown and shown[0].role == MessageRole.TOOL.value:
        shown.pop(0)
    messages += [prompt_message(t.role, t.content, t.parts) for t in shown]
    tail = snippets_block(snippets) if snippets else ""
    messages.append(ChatMessage(new.role, new.content + tail))
    plan = fold_plan(fixed, history, limits)
    parts = Composition(
        budget_tokens=limits.budget,
        system_tokens=system[0],
        instructions=fixed.instructions.sources if fixed.instructions else [],
        summary_tokens=system[1],
        summary_through_seq=fixed.summary_through_seq if fixed.summary_shown else 0,
        snippet_tokens=sum(t.tokens for t in snippets),
        snippet_seqs=sorted(t.seq for t in snippets),
        recent_tokens=sum(t.tokens for t in recent),
        recent_seqs=[recent[0].seq, recent[-1].seq] if recent else [],
        new_message_tokens=new.tokens,
        left_out_seqs=[history[0].seq, history[start - 1].seq] if start else [],
        fold_due=plan is not None,
    )
    parts.total_tokens = PROMPT_OVERHEAD + sum(system) + parts.recent_tokens
    parts.total_tokens += parts.snippet_tokens + new.tokens
    return Assembled(messages, parts, plan)
