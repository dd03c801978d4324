"""Reading a model's calls out of its text (``builtin/calling.py``): however the text is
cut into deltas, the same calls come out, each begun by its id and name, with the answer's
text kept apart; an answer that only looked like a call at first is text."""

from __future__ import annotations

import pytest

from parley.engines.builtin.calling import CallReader, call_text, not_starting_with
from parley.engines.tools import ToolCallDelta, assembled

CALLS = call_text("get_weather", '{"city":"Rome {x}","n":[1,{"a":"}"}]}') + call_text(
    "add", '{"a":1,"b":2}'
)


def read(text: str, cuts: list[int], *, calls_only: bool) -> tuple[str, list[ToolCallDelta]]:
    reader = CallReader(calls_only=calls_only)
    out: list[str] = []
    fragments: list[ToolCallDelta] = []
    for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
        piece, calls = reader.feed(text[start:end])
        out.append(piece)
        fragments += calls
    out.append(reader.finish())
    return "".join(out), fragments


@pytest.mark.parametrize("calls_only", [True, False])
@pytest.mark.parametrize("step", [1, 2, 3, 7, 50, 1000])
def test_the_same_calls_come_out_however_the_text_is_cut(calls_only: bool, step: int) -> None:
    text, fragments = read(CALLS, list(range(step, len(CALLS), step)), calls_only=calls_only)
    assert text == ""
    calls = assembled(fragments)
    assert [(c.name, c.arguments) for c in calls] == [
        ("get_weather", '{"city":"Rome {x}","n":[1,{"a":"}"}]}'),
        ("add", '{"a":1,"b":2}'),
    ]
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("call_") for c in calls)
    firsts = [f for f in fragments if f.id is not None]
    assert [f.name for f in firsts] == ["get_weather", "add"]  # id and name come first, once


@pytest.mark.parametrize("answer", ["Hello <tool", "<tool_cal", "<b>bold</b>", "<", ""])
def test_an_answer_that_is_not_a_call_is_text_whole(answer: str) -> None:
    for step in (1, 4):
        text, fragments = read(answer, list(range(step, len(answer), step)), calls_only=False)
        assert (text, fragments) == (answer, [])


def test_a_call_under_required_is_read_from_its_first_character() -> None:
    reader = CallReader(calls_only=True)
    assert reader.feed("<")[1] == () and reader.feed("tool_call>\n")[0] == ""
    with pytest.raises(ValueError, match="left its call format"):
        CallReader(calls_only=True).feed("hello")


def test_the_text_rule_refuses_exactly_what_begins_a_call() -> None:
    import re

    rule = re.compile(not_starting_with("<tool_call>"))
    for text in ["", "<", "<tool_call", "hi <tool_call>", "<tool_calls>"[:11] + "x", "<b>"]:
        assert rule.fullmatch(text), text
    for text in ["<tool_call>", "<tool_call>{}", "<tool_call>\n"]:
        assert not rule.fullmatch(text), text
