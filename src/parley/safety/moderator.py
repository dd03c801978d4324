"""The moderator: which classifiers judge a tier's prompts and answers, with each one's
timeout and fail mode applied, and every check counted.

Built once per process by the composition root from ``Settings.safety`` (nothing at import
time). A prompt (``check_input``) goes to the rule sets first, inline (a refusal there
spares the remote calls), then to the tier's remote classifiers at once; the first refusal
in the tier's order decides. An answer gets an ``OutputPolicy`` per run
(``output_policy``): fresh scans of the inline rule sets, and the remote classifiers its
windows go to (``runs/moderated.py`` streams through it).

A remote classifier that raises, or gives no verdict within its ``timeout_seconds``, lets
the text through when its fail mode is ``open`` and refuses it (``moderation_unavailable``)
when it is ``closed``; both are counted (verdict ``error`` or ``timeout``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from parley.domain import CONTENT_BLOCKED, MODERATION_UNAVAILABLE
from parley.observability.moderation import ModerationMetrics
from parley.qos.settings import QosSettings
from parley.safety.endpoint import ModerationEndpoint
from parley.safety.guard import GuardModel
from parley.safety.interface import Classifier, Sample, Stage, Verdict
from parley.safety.rules import OutputScan, RuleSet
from parley.safety.settings import ClassifierSettings, FailMode, RulesSettings, SafetySettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Ruling:
    """The moderator's decision on one text: passed, or refused by ``classifier`` (its
    verdict, or, ``unavailable``, its failure under a closed fail mode)."""

    blocked: bool
    classifier: str | None = None
    category: str | None = None
    reason: str | None = None
    unavailable: bool = False

    @property
    def code(self) -> str:
        return MODERATION_UNAVAILABLE if self.unavailable else CONTENT_BLOCKED

    def message(self, stage: Stage) -> str:
        """What the user is told: which check refused, and why."""
        if stage is Stage.INPUT:
            if self.unavailable:
                return (
                    f"the message could not be checked ({self.classifier}: {self.reason}); "
                    "try again shortly"
                )
            return f"the message breaks the content policy ({self.category}): {self.reason}"
        if self.unavailable:
            why = f"{self.classifier}: {self.reason}"
            return f"the answer was stopped: it could not be checked ({why})"
        return (
            f"the answer was stopped: it breaks the content policy ({self.category}): {self.reason}"
        )


PASSED = Ruling(blocked=False)


@dataclass(frozen=True, slots=True)
class Configured:
    """A classifier as configured: its timeout (remote ones) and its fail mode."""

    classifier: Classifier
    fail_mode: FailMode
    timeout: float | None  # None: an inline rule set, no timeout

    @property
    def name(self) -> str:
        return self.classifier.name


def build_classifier(name: str, settings: ClassifierSettings) -> Configured:
    if isinstance(settings, RulesSettings):
        return Configured(RuleSet(name, settings), settings.fail_mode, None)
    remote: Classifier
    if settings.kind == "endpoint":
        remote = ModerationEndpoint(name, settings)
    else:
        remote = GuardModel(name, settings)
    return Configured(remote, settings.fail_mode, settings.timeout_seconds)


class Moderator:
    def __init__(
        self,
        settings: SafetySettings,
        qos: QosSettings,
        *,
        metrics: ModerationMetrics | None = None,
    ) -> None:
        self._qos = qos
        self._metrics = metrics
        classifiers = settings.classifiers
        self._all = {name: build_classifier(name, one) for name, one in classifiers.items()}
        self.window_tokens = settings.window_tokens

    def _chosen(self, tier: str, stage: Stage) -> list[Configured]:
        choice = self._qos.tier(tier).moderation
        names = choice.input if stage is Stage.INPUT else choice.output
        return [self._all[name] for name in names]

    async def check_input(self, tier: str, text: str) -> Ruling:
        """A prompt's ruling: the inline rule sets, then the remote classifiers at once."""
        chosen = self._chosen(tier, Stage.INPUT)
        sample = Sample(text, Stage.INPUT)
        for one in chosen:
            if one.timeout is None and (ruling := self.inline(one, sample)).blocked:
                return ruling
        return await self.remote([c for c in chosen if c.timeout is not None], sample)

    def output_policy(self, tier: str, prompt: str) -> OutputPolicy | None:
        """How one answer is moderated (None: the tier checks no answers)."""
        chosen = self._chosen(tier, Stage.OUTPUT)
        if not chosen:
            return None
        scans: list[tuple[Configured, OutputScan]] = []
        for one in chosen:
            if isinstance(one.classifier, RuleSet) and (scan := one.classifier.scan()) is not None:
                scans.append((one, scan))
        remote = [c for c in chosen if c.timeout is not None]
        if not scans and not remote:
            return None
        return OutputPolicy(self, scans, remote, self.window_tokens, prompt)

    def inline(self, one: Configured, sample: Sample) -> Ruling:
        """An inline rule set's ruling (no timeout: it takes microseconds)."""
        assert isinstance(one.classifier, RuleSet)
        start = time.perf_counter()
        try:
            verdict = one.classifier.check_now(sample)
        except Exception as e:
            return self._failed(one, sample.stage, start, "error", e)
        return self.judged(one, sample.stage, time.perf_counter() - start, verdict)

    async def remote(self, chosen: list[Configured], sample: Sample) -> Ruling:
        """The remote classifiers' ruling on ``sample``, asked at once; the first refusal
        in their configured order decides."""
        if not chosen:
            return PASSED
        rulings = await asyncio.gather(*(self._ask(one, sample) for one in chosen))
        return next((r for r in rulings if r.blocked), PASSED)

    async def _ask(self, one: Configured, sample: Sample) -> Ruling:
        start = time.perf_counter()
        try:
            async with asyncio.timeout(one.timeout):
                verdict = await one.classifier.check(sample)
        except TimeoutError as e:
            return self._failed(one, sample.stage, start, "timeout", e)
        except Exception as e:
            return self._failed(one, sample.stage, start, "error", e)
        return self.judged(one, sample.stage, time.perf_counter() - start, verdict)

    def judged(self, one: Configured, stage: Stage, seconds: float, verdict: Verdict) -> Ruling:
        """A verdict counted, as a ruling."""
        if self._metrics is not None:
            outcome = "blocked" if verdict.blocked else "allowed"
            self._metrics.checked(one.name, stage.value, seconds, outcome, verdict.category or "")
        if not verdict.blocked:
            return PASSED
        return Ruling(True, one.name, verdict.category, verdict.reason)

    def _failed(
        self, one: Configured, stage: Stage, start: float, how: str, error: BaseException
    ) -> Ruling:
        seconds = time.perf_counter() - start
        if self._metrics is not None:
            self._metrics.checked(one.name, stage.value, seconds, how)
        closed = one.fail_mode is FailMode.CLOSED
        log.warning(
            "classifier %s failed on %s (%s after %.3f s: %r); fail %s: %s",
            one.name,
            stage.value,
            how,
            seconds,
            error,
            one.fail_mode.value,
            "refused" if closed else "let through",
        )
        if not closed:
            return PASSED
        why = "gave no verdict in time" if how == "timeout" else "could not be reached"
        return Ruling(True, one.name, None, f"the content check {why}", unavailable=True)

    async def close(self) -> None:
        for one in self._all.values():
            try:
                await one.classifier.close()
            except Exception:
                log.exception("closing classifier %s failed", one.name)


@dataclass(slots=True)
class OutputPolicy:
    """One answer's moderation: its inline scans (each piece, at once) and the remote
    classifiers each window goes to."""

    moderator: Moderator
    scans: list[tuple[Configured, OutputScan]]
    remote: list[Configured]
    window_tokens: int
    prompt: str
    _scan_seconds: float = 0.0
    _counted: bool = field(default=False)

    def scan(self, text: str, *, final: bool = False) -> Ruling | int:
        """The inline scans of the answer's next piece: a refusal, or how far (characters
        of the whole answer) it may be released."""
        start = time.perf_counter()
        release: int | None = None
        for one, scan in self.scans:
            said = scan.feed(text, final=final)
            if isinstance(said, Verdict):
                self._scan_seconds += time.perf_counter() - start
                return self._counted_once(one, said)
            release = said if release is None else min(release, said)
        self._scan_seconds += time.perf_counter() - start
        assert release is not None
        return release

    def _counted_once(self, one: Configured, verdict: Verdict) -> Ruling:
        self._counted = True
        return self.moderator.judged(one, Stage.OUTPUT, self._scan_seconds, verdict)

    def ended(self) -> None:
        """The answer ended unrefused by the scans: each scan counted once, allowed."""
        if self._counted:
            return
        self._counted = True
        for one, _ in self.scans:
            self.moderator.judged(one, Stage.OUTPUT, self._scan_seconds, Verdict(False))

    async def window(self, text: str) -> Ruling:
        """A window's ruling by the remote classifiers (the one before it as context)."""
        return await self.moderator.remote(self.remote, Sample(text, Stage.OUTPUT, self.prompt))
