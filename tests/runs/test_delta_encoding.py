"""A plain text delta, the one event nearly every token is, is written without its model
(``runs/events.plain_delta_event``): its JSON must be byte for byte what the model's own
serialization gives, for every kind of text a model writes, and read back as that model."""

from __future__ import annotations

import pytest

from parley.runs.events import DeltaEvent, decode, delta_event, plain_delta_event

TEXTS = [
    "",
    " the",
    'a "quoted" word\\ and a backslash',
    "line\nbreak\ttab\rreturn\x08\x0c",
    "\x00\x01\x1f\x7f control",
    "Привет 東京 café ﬁ 🙂 \u200b\u202e\u2028\u2029",
    "</script><!-- & -->",
    "x" * 10_000,
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("tokens", [0, 1, 7, 2**40])
def test_a_plain_delta_is_the_models_own_json(text: str, tokens: int) -> None:
    fast, slow = plain_delta_event(text, tokens), delta_event(text, tokens)
    assert fast.kind is slow.kind
    assert fast.json == slow.json
    assert decode(fast) == DeltaEvent(text=text, tokens=tokens)
