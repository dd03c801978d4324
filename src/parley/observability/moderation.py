"""The moderation metrics: each classifier's checks, their latency and their verdicts.

Made by ``Metrics`` (in its registry, or the multiprocess directory) and handed to the
``Moderator`` by the composition root; labelled by classifier (its name in the settings),
stage (``input`` / ``output``), verdict (``allowed``, ``blocked``, ``error``, ``timeout``)
and category (the blocked category; empty otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

CHECK_BUCKETS = (
    0.00001,
    0.00005,
    0.0001,
    0.0005,
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
)


@dataclass(frozen=True, slots=True)
class ModerationMetrics:
    seconds: Histogram
    verdicts: Counter

    def checked(
        self, classifier: str, stage: str, seconds: float, verdict: str, category: str = ""
    ) -> None:
        self.seconds.labels(classifier, stage).observe(seconds)
        self.verdicts.labels(classifier, stage, verdict, category).inc()


def moderation_metrics(reg: CollectorRegistry | None) -> ModerationMetrics:
    return ModerationMetrics(
        seconds=Histogram(
            "parley_moderation_check_seconds",
            "How long a classifier took to judge a text (an answer's rule-set scans: summed "
            "over the answer).",
            ["classifier", "stage"],
            registry=reg,
            buckets=CHECK_BUCKETS,
        ),
        verdicts=Counter(
            "parley_moderation_verdicts",
            "Classifier verdicts by classifier, stage, verdict and blocked category.",
            ["classifier", "stage", "verdict", "category"],
            registry=reg,
        ),
    )
