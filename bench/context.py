"""A long conversation (issue 13): context management beside the whole history, on the
built-in engine.

    python bench/context.py [--turns 200] [--max-tokens 32] [--quick] [--verbose]
                            [--modes managed,full] [--think 0] [--seed 13] [--json PATH]

One scripted conversation of ``--turns`` user messages (40-120 words each, from a seeded
generator of sentences about varied topics) is played, each turn sent as soon as the previous
answer ended (``--think`` seconds later, if given), against
a fresh ``parley serve`` (SQLite in a temporary directory, in-process bus, the built-in engine
on the bundled SmolLM2-135M: an 8,192-token window, CPU) per mode, one server after the other:

* ``managed``: context management on, its default settings; the user's tier has no
  ``max_input_tokens`` (``stacks.BENCH_TIERS``: budgets out of reach too), so a prompt's
  budget is the window less ``--max-tokens``. The rolling summary folds in background runs
  on the same engine while the conversation goes on;
* ``full``: ``PARLEY_CONTEXT__ENABLED=false``: every run sends the whole history, until the
  first turn refused (400 at send) or failed for the context length; the mode stops there.

Turn 3 plants a fact ("my cat is called Bartholomew"), turn 150 asks for it; the report says
whether the managed prompt at turn 150 held it (its message among the retrieved snippets, or
covered by the summary's range), whether the summary's text (``GET /api/chats/{id}`` just
before turn 150) names it, and whether the answer did: informational, a 135M model.

Per turn, as the client sees it: time to first token (``POST /api/chats/{id}/messages``
with SSE, request sent → the first ``delta`` event), then from ``GET /api/runs/{id}``: prompt
tokens (``usage.prompt_tokens``, else ``prompt.total_tokens``), the prefix-cache hit rate
(``prompt.cached_tokens``, else ``usage.prompt_tokens_details.cached_tokens``, ÷ prompt
tokens) and whether a fold landed since the previous turn
(``prompt.summary_through_seq`` changed: the system message, hence the whole prompt's prefix,
is new). Answers are greedy (``temperature`` 0) and short (``--max-tokens``) to keep the run
short; even so 200 turns take ~35 min on the 2-core development machine (the managed mode
~32 of them, half of that in turns that share the engine with a fold's decode); ``--quick``
(20 turns) ~4 min.

Goal (issue 13): time to first token at the last turn (200) within 1.5x that at turn 10, in
the managed mode; the ratio of the medians over the last ten turns and turns 6-15 is printed
beside it (one turn's TTFT is noisy). The per-turn figures go to ``build/bench/context.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from stacks import BENCH_TIERS, Stack, loop_runner, start_stack

ROOT = Path(__file__).resolve().parent.parent
JSON_PATH = ROOT / "build" / "bench" / "context.json"
PASSWORD = "context bench: correct horse battery"  # noqa: S105 - a throwaway account
REQUEST_TIMEOUT = 600.0
MODES = {
    "managed": ("context management on", {}),
    "full": ("whole history (PARLEY_CONTEXT__ENABLED=false)", {"PARLEY_CONTEXT__ENABLED": "false"}),
}
FACT_TURN = 3
ASK_TURN = 150  # or, in a shorter run, three quarters of the way
FACT = "By the way, my cat is called Bartholomew."
QUESTION = "Going back to something personal I mentioned long ago: what is my cat called?"
NAME = "Bartholomew"
GOAL_RATIO = 1.5
EARLY_TURN = 10
EARLY_SPAN = (6, 15)  # the medians' early turns
LATE_SPAN = 10  # the last this many turns

# -- the conversation --------------------------------------------------------------------

TOPICS: dict[str, list[str]] = {
    "garden": [
        "The tomatoes on the south wall ripened two weeks earlier than the ones by the fence.",
        "I keep wondering whether raised beds are worth the cost of the timber.",
        "Last spring the slugs ate almost every lettuce seedling within a single night.",
        "My neighbour swears by crushed eggshells, but I have never seen them work.",
        "The compost heap finally turned dark and crumbly after a year of patience.",
        "I planted garlic in October and the green shoots are already ten centimetres tall.",
        "Watering in the evening seems to help, although the mildew came back in August.",
    ],
    "cooking": [
        "Yesterday I tried a lentil soup with smoked paprika and far too much cumin.",
        "Bread rises much faster in my kitchen now that the radiator works again.",
        "I would like to learn a few dishes that take less than twenty minutes on a weeknight.",
        "The cast iron pan still sticks whenever I cook eggs at a low temperature.",
        "My grandmother never measured anything, which makes her recipes hard to repeat.",
        "A friend recommended roasting the vegetables before blending them into a sauce.",
        "I bought a kilo of chickpeas and now have no plan for most of them.",
    ],
    "travel": [
        "We are planning a train journey from Lisbon to Porto at the end of the month.",
        "The night bus was cheaper, but I slept perhaps two hours in total.",
        "I always pack too many shoes and then wear the same pair the whole week.",
        "The museum in the old harbour was closed on Mondays, which nobody told us.",
        "Booking the ferry three weeks ahead saved us almost half of the price.",
        "The hostel had a rooftop terrace with a view over the whole bay.",
        "Next year I would like to walk a section of the coastal path in Wales.",
    ],
    "work": [
        "Our team moved the weekly meeting to Thursday mornings, which suits me better.",
        "I spent most of the afternoon untangling a spreadsheet with forty hidden columns.",
        "The new project manager wants a written estimate for every task, however small.",
        "Two colleagues left in the same month, so the backlog keeps growing.",
        "I am trying to block two hours each morning without any messages or calls.",
        "The quarterly report is due on Friday and the numbers still do not add up.",
        "A customer asked for a feature we removed last year because nobody used it.",
    ],
    "astronomy": [
        "On clear nights I can see Jupiter and three of its moons with cheap binoculars.",
        "The light pollution from the stadium makes the southern sky almost useless.",
        "I read that the Andromeda galaxy comes closer by about a hundred kilometres a second.",
        "My first telescope had a wobbly mount that made every planet dance.",
        "The meteor shower peaked at three in the morning, and I counted twenty-one.",
        "Saturn's rings are tilting towards edge-on, so they will be hard to see soon.",
        "An app on my phone names every star I point at, which feels like cheating.",
    ],
    "music": [
        "I started learning the cello at forty and my fingers still hurt after practice.",
        "The orchestra played a Shostakovich symphony that left the whole hall silent.",
        "Scales are boring, but my teacher insists on fifteen minutes of them every day.",
        "I found an old box of vinyl records in the attic, mostly jazz from the sixties.",
        "Playing with other people is much harder than playing along with a recording.",
        "The local choir needs more tenors and keeps asking me to join.",
        "I cannot decide whether to buy a better bow or save for lessons.",
    ],
    "running": [
        "My knee started aching after the third long run of the week.",
        "I signed up for a half marathon in April without thinking it through.",
        "Running at six in the morning is the only time the park is quiet.",
        "The new shoes feel light, but the heel wore down within two months.",
        "Interval training on the track makes me much faster, and much more tired.",
        "I lost my running watch somewhere along the canal last Sunday.",
        "A physiotherapist told me to strengthen my hips before adding more distance.",
    ],
    "reading": [
        "I am halfway through a thousand-page novel about a Russian family feud.",
        "Our book club chose a detective story, and everyone guessed the ending by chapter five.",
        "I prefer paper books, though the e-reader is easier on long trips.",
        "The library near my office has a shelf of free books that changes every week.",
        "Poetry is hard for me to read quickly, so I keep one collection by the bed.",
        "I reread my favourite childhood book and found it much darker than I remembered.",
        "A colleague lent me a history of navigation that I cannot put down.",
    ],
    "house": [
        "The bathroom tap has been dripping for a week and the plumber is fully booked.",
        "We painted the hallway a pale green that looks grey in the evening light.",
        "The windows let in a cold draught as soon as the wind comes from the north.",
        "I assembled a bookshelf and ended up with four screws nobody could place.",
        "The landlord promised a new boiler before winter, but nothing has happened.",
        "Moving the desk next to the window made working from home far more pleasant.",
        "The attic is full of boxes that nobody has opened since we moved in.",
    ],
    "languages": [
        "I practise Portuguese for twenty minutes on the bus every morning.",
        "The grammar is manageable, but I still cannot follow people who speak quickly.",
        "My tutor corrects my pronunciation of the nasal vowels again and again.",
        "Watching films with subtitles in the same language helps more than I expected.",
        "I keep a notebook of phrases I hear in shops and cafes.",
        "Learning the numbers properly took me longer than learning the past tense.",
        "A language exchange partner helps me on Tuesdays, and I help her with English.",
    ],
    "finance": [
        "I finally made a budget, and the amount spent on takeaway food was embarrassing.",
        "The bank raised its fees again, so I am thinking of switching to another one.",
        "Saving a fixed amount on payday works better for me than saving what is left.",
        "The electricity bill doubled over the winter, even though we used less.",
        "I am not sure whether to pay off the car loan early or keep some savings.",
        "A spreadsheet of monthly expenses turned out more useful than any app.",
        "My pension statement arrived and the projected figure looked rather small.",
    ],
    "cycling": [
        "The cycle lane on the main road ends abruptly right before the busiest junction.",
        "I replaced the chain myself, which took an hour and a lot of grease.",
        "Commuting by bike takes ten minutes longer than the tram but feels much better.",
        "A puncture on the way home in the rain was not how I wanted to end the week.",
        "The hill behind the station is still too steep for me without stopping.",
        "I bought proper lights after a driver told me he could not see me at all.",
        "We rode eighty kilometres along the river on Saturday and stopped for lunch twice.",
    ],
}
OPENERS = [
    "Something else on my mind today.",
    "Here is another thing.",
    "Quick update from my side.",
    "I wanted to ask you about something.",
    "Changing the subject a little.",
    "Thanks for the last answer.",
    "",
    "",
]
TIMES = [
    "Last week",
    "This morning",
    "On Tuesday",
    "Over the weekend",
    "A few days ago",
    "Since the start of the month",
    "Earlier today",
]
KEEP_CAPITAL = {"I", "Saturn's"}
TIMELY = {"Last", "Yesterday", "Next", "On"}  # sentences that have a time already
QUESTIONS = [
    "What would you suggest?",
    "Do you have any advice on that?",
    "What do you think I should do next?",
    "Is that a common experience?",
    "How would you approach it?",
    "Could you give me two or three ideas?",
    "Does that sound reasonable to you?",
]


def _words(text: str) -> int:
    return len(text.split())


def _varied(rng: random.Random, sentence: str) -> str:
    """Now and then the sentence led by a time of its own: fewer repeated sentences."""
    first, rest = sentence.split(" ", 1)
    if rng.random() >= 0.35 or first in TIMELY:
        return sentence
    return f"{rng.choice(TIMES)}, {first if first in KEEP_CAPITAL else first.lower()} {rest}"


def ask_turn(turns: int) -> int:
    return ASK_TURN if turns >= ASK_TURN else max(FACT_TURN + 1, turns * 3 // 4)


def conversation(turns: int, seed: int) -> list[str]:
    """The user's messages: seeded, 40-120 words each, a topic kept for a few turns; turn
    ``FACT_TURN`` states the fact (early in the message, within a retrieved snippet's cut),
    turn ``ask_turn(turns)`` asks for it."""
    rng = random.Random(seed)
    names = sorted(TOPICS)
    topic = rng.choice(names)
    messages: list[str] = []
    for turn in range(1, turns + 1):
        if turn == ask_turn(turns):
            messages.append(QUESTION)
            continue
        if rng.random() < 0.4:
            topic = rng.choice(names)
        target = rng.randint(40, 110)
        parts = [rng.choice(OPENERS)]
        if turn == FACT_TURN:
            parts.append(FACT)
        pool = TOPICS[topic][:]
        rng.shuffle(pool)
        question = rng.choice(QUESTIONS)
        while _words(" ".join([*parts, question])) < target:
            if not pool:
                topic = rng.choice(names)
                pool = TOPICS[topic][:]
                rng.shuffle(pool)
            parts.append(_varied(rng, pool.pop()))
        messages.append(" ".join(p for p in [*parts, question] if p))
    return messages


# -- one mode ----------------------------------------------------------------------------


@dataclass
class TurnFigures:
    turn: int
    words: int
    status: str  # completed, failed, refused (a 4xx/5xx at send), error (transport)
    code: str | None = None  # the refusal's or the run's error code
    run_id: str | None = None
    ttft_ms: float | None = None
    total_ms: float | None = None  # request sent → done event
    queue_ms: float | None = None  # the run's started_at - created_at (server's clock)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cache_hit: float | None = None  # cached ÷ prompt tokens
    budget_tokens: int | None = None
    summary_tokens: int | None = None
    summary_through_seq: int | None = None
    snippet_tokens: int | None = None
    snippet_seqs: list[int] = field(default_factory=list)
    recent_seqs: list[int] = field(default_factory=list)
    fold_due: bool | None = None
    fold: bool = False  # the summary moved since the previous turn: a new prefix
    shift: bool = False  # the verbatim window's first message moved since the previous turn
    answer: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "completed"


@dataclass
class ModeRun:
    name: str
    label: str
    turns: list[TurnFigures]
    fact_seq: int | None  # the seq of turn FACT_TURN's message
    seconds: float
    stopped: str | None = None  # why the mode ended before the last turn
    ask_summary: str | None = None  # the chat's summary just before the ask turn was sent


class Conversation:
    """One user's chat on one server, turn after turn."""

    def __init__(self, client: httpx.AsyncClient, max_tokens: int) -> None:
        self.client = client
        self.max_tokens = max_tokens
        self.chat_id = ""

    async def start(self, tag: str) -> None:
        email = f"context-{tag}-{int(time.time())}@example.com"
        r = await self.client.post("/api/auth/signup", json={"email": email, "password": PASSWORD})
        r.raise_for_status()
        self.client.headers["Authorization"] = f"Bearer {r.json()['token']}"
        r = await self.client.post("/api/chats", json={"title": "a long conversation"})
        r.raise_for_status()
        self.chat_id = str(r.json()["id"])

    async def send(self, turn: int, text: str) -> TurnFigures:
        out = TurnFigures(turn=turn, words=_words(text), status="error")
        body = {"content": text, "max_tokens": self.max_tokens, "temperature": 0}
        url = f"/api/chats/{self.chat_id}/messages"
        headers = {"Accept": "text/event-stream"}
        sent = time.perf_counter()
        try:
            async with self.client.stream("POST", url, json=body, headers=headers) as r:
                if r.status_code != 200:
                    out.status = "refused"
                    out.code = _code(await r.aread()) or f"HTTP {r.status_code}"
                    return out
                await self._read(r, out, sent)
        except httpx.HTTPError as e:
            out.code = f"{type(e).__name__}: {e}"
            return out
        out.total_ms = (time.perf_counter() - sent) * 1000
        if out.run_id:
            await self._read_run(out)
        return out

    async def _read(self, r: httpx.Response, out: TurnFigures, sent: float) -> None:
        event = ""
        async for line in r.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
                continue
            if not line.startswith("data:"):
                continue
            data = json.loads(line[5:])
            if event == "delta":
                if out.ttft_ms is None:
                    out.ttft_ms = (time.perf_counter() - sent) * 1000
                text = str(data.get("text") or "")
                out.answer = text if data.get("replace") else out.answer + text
            elif event == "status":
                out.run_id = out.run_id or data.get("run_id")
            elif event == "error":
                out.code = str(data.get("code"))
            elif event == "done":
                out.run_id = out.run_id or data.get("run_id")
                out.status = str(data.get("status") or "unknown")
                return

    async def _read_run(self, out: TurnFigures) -> None:
        r = await self.client.get(f"/api/runs/{out.run_id}")
        if r.status_code != 200:
            return
        run = r.json()
        usage = run.get("usage") or {}
        prompt = run.get("prompt") or {}
        out.prompt_tokens = usage.get("prompt_tokens") or prompt.get("total_tokens")
        out.completion_tokens = usage.get("completion_tokens")
        created, started = _epoch(run.get("created_at")), _epoch(run.get("started_at"))
        if created is not None and started is not None:
            out.queue_ms = (started - created) * 1000
        if out.code is None and run.get("error"):
            out.code = (run.get("error") or {}).get("code")
        details = usage.get("prompt_tokens_details") or {}
        cached = prompt.get("cached_tokens")
        out.cached_tokens = cached if cached is not None else details.get("cached_tokens")
        if out.cached_tokens is not None and out.prompt_tokens:
            out.cache_hit = out.cached_tokens / out.prompt_tokens
        out.budget_tokens = prompt.get("budget_tokens")
        out.summary_tokens = prompt.get("summary_tokens")
        out.summary_through_seq = prompt.get("summary_through_seq")
        out.snippet_tokens = prompt.get("snippet_tokens")
        out.snippet_seqs = list(prompt.get("snippet_seqs") or [])
        out.recent_seqs = list(prompt.get("recent_seqs") or [])
        out.fold_due = prompt.get("fold_due")

    async def summary(self) -> str | None:
        """The chat's rolling summary (``GET /api/chats/{id}``), if any."""
        r = await self.client.get(f"/api/chats/{self.chat_id}")
        text = r.json().get("summary") if r.status_code == 200 else None
        return str(text) if text else None

    async def seq_of(self, text: str) -> int | None:
        """The seq of the user's message ``text`` (among the chat's first 100)."""
        r = await self.client.get(
            f"/api/chats/{self.chat_id}/messages", params={"order": "asc", "limit": 100}
        )
        if r.status_code != 200:
            return None
        for m in r.json().get("data") or []:
            if m.get("role") == "user" and m.get("content") == text:
                return int(m["seq"])
        return None


def _code(raw: bytes) -> str | None:
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("code")) if isinstance(error, dict) else None


def _per_token(t: TurnFigures) -> float | None:
    if t.total_ms is None or t.ttft_ms is None or not t.completion_tokens:
        return None
    return (t.total_ms - t.ttft_ms) / max(1, t.completion_tokens - 1)


def _uncached(t: TurnFigures) -> float | None:
    if t.prompt_tokens is None or t.cached_tokens is None:
        return None
    return float(t.prompt_tokens - t.cached_tokens)


def _epoch(stamp: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(stamp)).timestamp() if stamp else None
    except ValueError:
        return None


def context_length(t: TurnFigures) -> bool:
    return t.code is not None and "context_length" in t.code


def mark_changes(turns: list[TurnFigures]) -> None:
    """Each turn's ``fold`` and ``shift``, against the previous turn that has a prompt."""
    before: TurnFigures | None = None
    for t in turns:
        if t.summary_through_seq is None:
            continue
        if before is not None:
            t.fold = t.summary_through_seq != before.summary_through_seq
            first, previous = t.recent_seqs[:1], before.recent_seqs[:1]
            t.shift = bool(first and previous and first != previous)
        before = t


def settings_env(pairs: list[str]) -> dict[str, str]:
    """``--set context.summary_max_tokens=128`` → ``PARLEY_CONTEXT__SUMMARY_MAX_TOKENS``."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set: KEY=VALUE, not {pair!r}")
        env["PARLEY_" + key.upper().replace(".", "__")] = value
    return env


async def run_mode(name: str, messages: list[str], args: argparse.Namespace, tmp: Path) -> ModeRun:
    label, env = MODES[name]
    env = {**env, **settings_env(args.set)}
    config = tmp / f"{name}.toml"
    config.write_text(f"# bench/context.py\n{BENCH_TIERS}")
    began = time.monotonic()
    stack = start_stack("serve", env, tmp, args=["--config", str(config)])
    print(f"{name}: {label}; server ready in {time.monotonic() - began:.0f} s", flush=True)
    try:
        return await _play(stack, name, label, messages, args)
    finally:
        stack.stop()


async def _play(
    stack: Stack, name: str, label: str, messages: list[str], args: argparse.Namespace
) -> ModeRun:
    timeout = httpx.Timeout(REQUEST_TIMEOUT, connect=10)
    turns: list[TurnFigures] = []
    fact_seq: int | None = None
    stopped: str | None = None
    ask_summary: str | None = None
    began = time.monotonic()
    async with httpx.AsyncClient(base_url=stack.base, timeout=timeout) as client:
        chat = Conversation(client, args.max_tokens)
        await chat.start(name)
        for i, text in enumerate(messages, start=1):
            if i > 1 and args.think > 0:
                await asyncio.sleep(args.think)
            if i == ask_turn(len(messages)):
                ask_summary = await chat.summary()
            t = await chat.send(i, text)
            turns.append(t)
            if i == FACT_TURN:
                fact_seq = await chat.seq_of(text)
            if args.verbose or i % 10 == 0 or not t.ok:
                print(f"  {name} turn {i}: {_brief(t)}", flush=True)
            if not t.ok:
                if not stack.procs[0].alive():
                    stopped = f"the server exited:\n{stack.procs[0].tail()}"
                elif context_length(t):
                    stopped = f"turn {i} {t.status} ({t.code})"
                else:
                    stopped = f"turn {i} {t.status} ({t.code}), not for the context length"
                break
    mark_changes(turns)
    seconds = time.monotonic() - began
    return ModeRun(name, label, turns, fact_seq, seconds, stopped, ask_summary)


def _brief(t: TurnFigures) -> str:
    if not t.ok:
        return f"{t.status} {t.code or ''}"
    return (
        f"prompt {t.prompt_tokens} tokens, TTFT {_n(t.ttft_ms)} ms, "
        f"cached {_pct(t.cache_hit)}, total {_n(t.total_ms)} ms"
    )


# -- figures -----------------------------------------------------------------------------


def _n(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.fmean(kept) if kept else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def at(run: ModeRun | None, turn: int) -> TurnFigures | None:
    if run is None or turn < 1 or turn > len(run.turns):
        return None
    return run.turns[turn - 1]


def table(runs: dict[str, ModeRun], every: bool) -> None:
    managed, full = runs.get("managed"), runs.get("full")
    count = max(len(r.turns) for r in runs.values())
    last_full = last_fit(full)
    print()
    print(
        f"{'turn':>4} {'words':>5} | {'prompt':>6} {'TTFT ms':>8} {'cached':>6} {'summary':>7} "
        f"{'snip':>4} {'fold':>4} | {'full prompt':>11} {'full TTFT':>9} {'full st':>9}"
    )
    for turn in range(1, count + 1):
        m, f = at(managed, turn), at(full, turn)
        marked = m is not None and (m.fold or m.shift)
        special = turn in (1, FACT_TURN, EARLY_TURN, ask_turn(count), count) or turn % 10 == 0
        near_end = last_full is not None and turn in (last_full.turn, last_full.turn + 1)
        if not (every or marked or special or near_end):
            continue
        either = m or f
        words = either.words if either else 0
        left = (
            f"{_n(m.prompt_tokens):>6} {_n(m.ttft_ms):>8} {_pct(m.cache_hit):>6} "
            f"{_n(m.summary_through_seq):>7} {len(m.snippet_seqs):>4} "
            f"{('fold' if m.fold else 'win' if m.shift else ''):>4}"
            if m
            else " " * 41
        )
        right = (
            f"{_n(f.prompt_tokens):>11} {_n(f.ttft_ms):>9} "
            f"{(f.status if f.ok else (f.code or f.status))[:9]:>9}"
            if f
            else ""
        )
        print(f"{turn:>4} {words:>5} | {left} | {right}")
    print(
        "(prompt: tokens; cached: prefix-cache hit rate; summary: the last message seq the "
        "summary covers; snip: retrieved snippets; fold: a new summary since the last turn, "
        "win: the verbatim window moved without one)"
    )


def last_fit(run: ModeRun | None) -> TurnFigures | None:
    if run is None:
        return None
    ok = [t for t in run.turns if t.ok]
    return ok[-1] if ok else None


def summarize(runs: dict[str, ModeRun], args: argparse.Namespace) -> dict[str, Any]:
    managed, full = runs.get("managed"), runs.get("full")
    s: dict[str, Any] = {}
    if managed is not None:
        s.update(_managed_summary(managed, args.turns))
    if full is not None:
        fit = last_fit(full)
        failed = next((t for t in full.turns if not t.ok), None)
        s["full_last_fit_turn"] = fit.turn if fit else None
        s["full_last_fit_prompt_tokens"] = fit.prompt_tokens if fit else None
        s["full_last_fit_ttft_ms"] = fit.ttft_ms if fit else None
        s["full_first_refused_turn"] = failed.turn if failed else None
        s["full_first_refused"] = f"{failed.status} {failed.code}" if failed else None
        s["full_stopped"] = full.stopped
        s["full_cache_hit_mean"] = _mean([t.cache_hit for t in full.turns[EARLY_TURN:] if t.ok])
        if fit is not None:
            m = at(managed, fit.turn)
            s["managed_ttft_at_full_last_fit_ms"] = m.ttft_ms if m else None
            s["managed_over_full_ttft_at_last_fit"] = _ratio(m.ttft_ms if m else None, fit.ttft_ms)
            s["managed_prompt_at_full_last_fit"] = m.prompt_tokens if m else None
            s["full_ttft_median_first_10_ms"] = _median([t.ttft_ms for t in full.turns[:10]])
            s["full_ttft_median_last_10_fit_ms"] = _median(
                [t.ttft_ms for t in full.turns[: fit.turn]][-LATE_SPAN:]
            )
    s["seconds"] = {name: round(r.seconds, 1) for name, r in runs.items()}
    return s


def _managed_summary(run: ModeRun, turns: int) -> dict[str, Any]:
    done = [t for t in run.turns if t.ok]
    last = len(run.turns)
    early, late = at(run, EARLY_TURN), at(run, last)
    lo, hi = EARLY_SPAN
    early_median = _median([t.ttft_ms for t in run.turns[lo - 1 : hi]])
    late_median = _median([t.ttft_ms for t in run.turns[max(hi, last - LATE_SPAN) :]])
    tail = [t for t in run.turns[EARLY_TURN:] if t.ok]
    plain = [t for t in tail if not (t.fold or t.shift)]
    ratio = _ratio(late.ttft_ms if late else None, early.ttft_ms if early else None)
    first_fold = next((t.turn for t in run.turns if t.fold), last + 1)
    # after the first fold (the prompt's steady length), no fold landed, none due (in flight)
    quiet = [t for t in plain if not t.fold_due and t.turn > first_fold]
    folding = [t for t in plain if t.fold_due]
    early_turns = [t for t in done if 1 < t.turn < first_fold]
    later = [t for t in done if t.turn > first_fold and not (t.fold or t.shift)]
    budgets = [t.budget_tokens for t in done if t.budget_tokens]
    prompts = [t.prompt_tokens for t in done if t.prompt_tokens is not None]
    s: dict[str, Any] = {
        "managed_turns_completed": len(done),
        "managed_last_turn": last,
        "managed_stopped": run.stopped,
        "ttft_turn_10_ms": early.ttft_ms if early else None,
        "ttft_last_turn_ms": late.ttft_ms if late else None,
        "ttft_ratio": ratio,
        "goal_met": ratio is not None and ratio <= GOAL_RATIO and last == turns,
        "ttft_median_turns_6_15_ms": early_median,
        "ttft_median_last_10_ms": late_median,
        "ttft_median_ratio": _ratio(late_median, early_median),
        "prompt_tokens_max": max(prompts) if prompts else None,
        "budget_tokens": max(budgets) if budgets else None,
        "cache_hit_mean_after_10": _mean([t.cache_hit for t in tail]),
        "cache_hit_mean_plain_turns": _mean([t.cache_hit for t in plain]),
        "cache_hit_mean_fold_turns": _mean([t.cache_hit for t in tail if t.fold]),
        "ttft_median_plain_turns_ms": _median([t.ttft_ms for t in plain]),
        "ttft_median_fold_turns_ms": _median([t.ttft_ms for t in tail if t.fold]),
        "folds": sum(t.fold for t in run.turns),
        "turns_with_fold_due": sum(bool(t.fold_due) and not t.fold for t in tail),
        "ttft_median_quiet_turns_ms": _median([t.ttft_ms for t in quiet]),
        "ttft_median_fold_due_turns_ms": _median([t.ttft_ms for t in folding]),
        "per_token_ms_quiet_turns": _median([_per_token(t) for t in quiet]),
        "per_token_ms_fold_due_turns": _median([_per_token(t) for t in folding]),
        "uncached_median_before_first_fold": _median([_uncached(t) for t in early_turns]),
        "uncached_median_after_first_fold": _median([_uncached(t) for t in later]),
        "snippet_tokens_median_after_first_fold": _median([t.snippet_tokens for t in later]),
        "window_shifts_without_fold": sum(t.shift and not t.fold for t in run.turns),
        "fact_seq": run.fact_seq,
    }
    ask = at(run, ask_turn(turns))
    if ask is not None and run.fact_seq is not None:
        retrieved = run.fact_seq in ask.snippet_seqs
        summarized = (ask.summary_through_seq or 0) >= run.fact_seq
        window = ask.recent_seqs
        verbatim = len(window) == 2 and window[0] <= run.fact_seq <= window[1]
        s["ask_turn"] = ask.turn
        s["fact_retrieved_at_ask"] = retrieved
        s["fact_in_summary_at_ask"] = summarized
        s["fact_verbatim_at_ask"] = verbatim
        s["fact_in_prompt_at_ask"] = retrieved or summarized or verbatim
        s["answer_at_ask"] = ask.answer
        s["answer_names_fact"] = NAME.lower() in ask.answer.lower()
        s["summary_names_fact"] = NAME.lower() in (run.ask_summary or "").lower()
    return s


def report(runs: dict[str, ModeRun], s: dict[str, Any], args: argparse.Namespace) -> None:
    table(runs, args.verbose)
    print()
    if "managed" in runs:
        last = s["managed_last_turn"]
        print(
            f"managed: {s['managed_turns_completed']} of {args.turns} turns completed"
            + (f" (stopped: {s['managed_stopped']})" if s["managed_stopped"] else "")
        )
        print(
            f"TTFT turn {EARLY_TURN}: {_n(s['ttft_turn_10_ms'])} ms, turn {last}: "
            f"{_n(s['ttft_last_turn_ms'])} ms, ratio {_n(s['ttft_ratio'], 2)}"
        )
        verdict = "PASS" if s["goal_met"] else "FAIL"
        print(
            f"GOAL time to first token at turn {args.turns} within {GOAL_RATIO}x that of turn "
            f"{EARLY_TURN}: {verdict} ({_n(s['ttft_ratio'], 2)}x)"
        )
        print(
            f"TTFT median turns {last - LATE_SPAN + 1}-{last}: "
            f"{_n(s['ttft_median_last_10_ms'])} ms vs turns {EARLY_SPAN[0]}-{EARLY_SPAN[1]}: "
            f"{_n(s['ttft_median_turns_6_15_ms'])} ms, ratio {_n(s['ttft_median_ratio'], 2)}"
        )
        print(
            f"managed prompt tokens max {_n(s['prompt_tokens_max'])} vs budget "
            f"{_n(s['budget_tokens'])}"
        )
        print(
            f"prefix-cache hit rate (managed), turns {EARLY_TURN + 1}-{last}: "
            f"{_pct(s['cache_hit_mean_after_10'])}; on turns without a fold or window move: "
            f"{_pct(s['cache_hit_mean_plain_turns'])}; on fold turns: "
            f"{_pct(s['cache_hit_mean_fold_turns'])}"
        )
        print(
            f"folds landed: {s['folds']} (window moves without a fold: "
            f"{s['window_shifts_without_fold']}); TTFT median on plain turns "
            f"{_n(s['ttft_median_plain_turns_ms'])} ms, on fold turns "
            f"{_n(s['ttft_median_fold_turns_ms'])} ms"
        )
        print(
            f"turns with a fold due (in flight beside them): {s['turns_with_fold_due']}, TTFT "
            f"median {_n(s['ttft_median_fold_due_turns_ms'])} ms, "
            f"{_n(s['per_token_ms_fold_due_turns'])} ms a token; the others after the first fold: "
            f"{_n(s['ttft_median_quiet_turns_ms'])} ms, {_n(s['per_token_ms_quiet_turns'])} ms "
            "a token"
        )
        print(
            f"uncached prompt tokens a turn (median): {_n(s['uncached_median_before_first_fold'])}"
            f" before the first fold, {_n(s['uncached_median_after_first_fold'])} after it on "
            f"plain turns (retrieved snippets {_n(s['snippet_tokens_median_after_first_fold'])})"
        )
        if "fact_in_prompt_at_ask" in s:
            print(
                f"fact (turn {FACT_TURN}, message seq {s['fact_seq']}) in the prompt at turn "
                f"{s['ask_turn']}: {'yes' if s['fact_in_prompt_at_ask'] else 'no'} (retrieved: "
                f"{s['fact_retrieved_at_ask']}, in the summary's range: "
                f"{s['fact_in_summary_at_ask']}, verbatim: {s['fact_verbatim_at_ask']}); "
                f"the summary's text names it: {s['summary_names_fact']}; the answer names it: "
                f"{s['answer_names_fact']} ({s['answer_at_ask'][:80]!r})"
            )
    if "full" in runs:
        print(
            f"full history: last turn that fit {s['full_last_fit_turn']} "
            f"({_n(s['full_last_fit_prompt_tokens'])} prompt tokens, TTFT "
            f"{_n(s['full_last_fit_ttft_ms'])} ms); first refused: turn "
            f"{s['full_first_refused_turn']} ({s['full_first_refused']})"
        )
        if s.get("managed_over_full_ttft_at_last_fit") is not None:
            print(
                f"at turn {s['full_last_fit_turn']}: managed TTFT "
                f"{_n(s['managed_ttft_at_full_last_fit_ms'])} ms "
                f"({_n(s['managed_prompt_at_full_last_fit'])} prompt tokens) / full "
                f"{_n(s['full_last_fit_ttft_ms'])} ms = "
                f"{_n(s['managed_over_full_ttft_at_last_fit'], 2)}"
            )
            print(
                f"full history TTFT median turns 1-10: {_n(s['full_ttft_median_first_10_ms'])} "
                f"ms, last ten that fit: {_n(s['full_ttft_median_last_10_fit_ms'])} ms"
            )
        if s.get("full_stopped") and "context_length" not in str(s["full_stopped"]):
            print(f"full history stopped for another reason: {s['full_stopped']}")
    print("measured in " + ", ".join(f"{k} {v:.0f} s" for k, v in s["seconds"].items()))


# -- main --------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    names = [n for n in args.modes.split(",") if n]
    if not names or set(names) - set(MODES):
        raise SystemExit(f"--modes: a list of {', '.join(MODES)}")
    messages = conversation(args.turns, args.seed)
    words = [_words(m) for m in messages]
    print(
        f"{args.turns} turns, {min(words)}-{max(words)} words a message (mean "
        f"{statistics.fmean(words):.0f}), max_tokens {args.max_tokens}, temperature 0",
        flush=True,
    )
    runs: dict[str, ModeRun] = {}
    with tempfile.TemporaryDirectory(prefix="parley-context-") as tmp:
        for name in names:
            runs[name] = await run_mode(name, messages, args, Path(tmp))
    s = summarize(runs, args)
    report(runs, s, args)
    return {
        "settings": {
            "turns": args.turns,
            "max_tokens": args.max_tokens,
            "seed": args.seed,
            "modes": names,
            "fact_turn": FACT_TURN,
            "ask_turn": ask_turn(args.turns),
        },
        "summary": s,
        "modes": {
            name: {
                "label": r.label,
                "seconds": r.seconds,
                "stopped": r.stopped,
                "fact_seq": r.fact_seq,
                "ask_summary": r.ask_summary,
                "turns": [asdict(t) for t in r.turns],
            }
            for name, r in runs.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=32, help="each answer's")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 20 turns")
    parser.add_argument("--verbose", action="store_true", help="every turn in the table")
    parser.add_argument("--modes", default="managed,full")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for both modes' servers, e.g. context.summary_trigger_tokens=1536",
    )
    parser.add_argument(
        "--think", type=float, default=0, help="seconds between an answer and the next turn"
    )
    parser.add_argument("--json", default=str(JSON_PATH), help="the per-turn figures ('': none)")
    args = parser.parse_args()
    if args.quick:
        args.turns = 20
    if args.turns < 1:
        raise SystemExit("--turns must be at least 1")
    runner = loop_runner()
    with contextlib.suppress(KeyboardInterrupt):
        figures = runner(main_async(args))
        if args.json:
            path = Path(args.json)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n")
            print(f"per-turn figures: {path}")


if __name__ == "__main__":
    main()
