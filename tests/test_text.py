"""``parley.text``: which text shows nothing at all."""

from __future__ import annotations

import pytest

from parley.errors import ValidationFailed
from parley.text import check_title, has_visible


@pytest.mark.parametrize(
    "text",
    ["a", " x ", "\u202eabc", "٣", "💬", "\u00a0.", "\ue000", "e\u0301", "ん"],
)
def test_visible(text: str) -> None:
    assert has_visible(text)


@pytest.mark.parametrize(
    "text",
    ["", "   ", "\u202e", "\u200b\u200d\u2060", "\u3164", "\u2800", "\u0301\u0302", "\U000e0041"],
)
def test_invisible(text: str) -> None:
    assert not has_visible(text)


def test_check_title() -> None:
    check_title("hello")
    check_title("")  # blank titles are the caller's rule
    with pytest.raises(ValidationFailed) as caught:
        check_title("\u200b\u202e")
    assert (caught.value.code, caught.value.param) == ("invalid_title", "title")
