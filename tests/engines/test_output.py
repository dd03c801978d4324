"""The output processor: token events into each request's deltas, stop strings applied."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from parley.engines.builtin.core import TokenEvent
from parley.engines.builtin.output import OutputProcessor, ProcessedOutputs
from parley.engines.builtin.sequence import Sequence, SequenceSampling
from parley.engines.builtin.tokenizer import TextTokenizer
from parley.engines.interface import ContextLengthExceeded, Delta, EngineError, FinishReason


def byte_tokenizer() -> TextTokenizer:
    """One token per byte, no merges: a character may span several tokens."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return TextTokenizer(tokenizer, chat_template=None, special_tokens={})


TOKENIZER = byte_tokenizer()


def processor() -> OutputProcessor:
    return OutputProcessor(TOKENIZER, cache_tokens=64)


def seq(name: str = "a", stop: tuple[str, ...] = (), cached: int = 0) -> Sequence:
    s = Sequence(name, [1, 2, 3, 4], SequenceSampling(max_tokens=100, stop=stop))
    s.num_cached_prompt = cached
    return s


class Run:
    """Feeds one request's tokens as the engine would report them, one event a step."""

    def __init__(self, out: OutputProcessor, s: Sequence) -> None:
        self.out, self.seq = out, s
        self.outputs: list[Delta | EngineError] = []
        self.aborts: list[Sequence] = []
        out.add(s)

    def event(self, token: int | None, finish: FinishReason | None = None) -> ProcessedOutputs:
        if token is not None:
            self.seq.output.append(token)
        processed = self.out.process([TokenEvent(self.seq, token, finish)])
        self.outputs += [o.output for o in processed.outputs]
        self.aborts += processed.to_abort
        return processed

    def text(self, text: str, finish: FinishReason | None = None) -> None:
        """Each byte of ``text`` a token; ``finish`` with the last one."""
        ids = TOKENIZER.encode(text)
        for i, token in enumerate(ids):
            self.event(token, finish if i == len(ids) - 1 else None)

    @property
    def deltas(self) -> list[Delta]:
        assert all(isinstance(o, Delta) for o in self.outputs)
        return [o for o in self.outputs if isinstance(o, Delta)]

    @property
    def sent(self) -> str:
        return "".join(d.text for d in self.deltas)


def test_text_streams_as_decoded_with_the_prompt_counts_on_the_first_delta() -> None:
    run = Run(processor(), seq(cached=2))
    run.text("héllo", finish=FinishReason.LENGTH)
    deltas = run.deltas
    assert run.sent == "héllo"
    assert [d.tokens for d in deltas] == [1] * 6  # "é" is two tokens
    assert "" in [d.text for d in deltas]  # the first half of "é" is held back
    assert (deltas[0].prompt_tokens, deltas[0].cached_tokens) == (4, 2)
    assert all(d.prompt_tokens is None for d in deltas[1:])
    assert [d.finish_reason for d in deltas] == [None] * 5 + [FinishReason.LENGTH]
    assert run.aborts == []
    assert run.out.unfinished("a") is None


def test_a_stop_string_across_tokens_ends_the_request_before_it() -> None:
    run = Run(processor(), seq(stop=("END",)))
    run.text("abcEN")
    assert run.sent == "abc"  # "EN" may begin the stop string: held back
    assert run.out.unfinished("a") is run.seq
    run.event(TOKENIZER.encode("D")[0])
    assert run.sent == "abc"
    assert run.deltas[-1].finish_reason is FinishReason.STOP
    assert run.aborts == [run.seq]  # the engine would go on: the caller aborts it
    assert run.out.unfinished("a") is None
    # what the engine still reports of it (more tokens, its abort) is dropped
    before = len(run.outputs)
    run.text("xyz")
    run.event(None, FinishReason.ABORT)
    assert len(run.outputs) == before
    assert run.aborts == [run.seq]


def test_a_stop_string_inside_one_token_cuts_the_text() -> None:
    out = processor()
    run = Run(out, seq(stop=("b",)))
    run.text("aa")
    token = TOKENIZER.encode("b")[0]
    run.event(token)
    assert run.sent == "aa"
    assert run.deltas[-1].finish_reason is FinishReason.STOP


def test_a_held_back_prefix_is_released_at_the_finish() -> None:
    run = Run(processor(), seq(stop=("END",)))
    run.text("abEN", finish=FinishReason.LENGTH)
    assert [d.text for d in run.deltas] == ["a", "b", "", "EN"]
    assert run.deltas[-1].finish_reason is FinishReason.LENGTH
    assert run.aborts == []


def test_a_held_back_prefix_is_released_when_later_text_rules_it_out() -> None:
    run = Run(processor(), seq(stop=("END", "Ex")))
    run.text("aEb")
    assert [d.text for d in run.deltas] == ["a", "", "Eb"]
    run.event(None, FinishReason.ABORT)
    assert run.deltas[-1].finish_reason is FinishReason.ABORT
    assert run.sent == "aEb"


def test_a_stop_string_in_the_last_token_is_a_stop_not_an_abort() -> None:
    run = Run(processor(), seq(stop=("!",)))
    run.text("hi!", finish=FinishReason.LENGTH)
    assert run.sent == "hi"
    assert run.deltas[-1].finish_reason is FinishReason.STOP
    assert run.aborts == []  # the engine ended it already


def test_the_earliest_stop_string_wins() -> None:
    run = Run(processor(), seq(stop=("b", "ab")))
    run.text("xab")  # both found at once ("a" was held back): the one starting first
    assert run.sent == "x"
    assert len(run.aborts) == 1


def test_a_prompt_the_cache_can_never_hold_is_an_error() -> None:
    run = Run(processor(), seq())
    run.event(None, FinishReason.LENGTH)
    [error] = run.outputs
    assert isinstance(error, ContextLengthExceeded)
    assert "at most 64 tokens" in str(error)
    assert run.out.unfinished("a") is None


def test_requests_are_apart_and_unknown_or_removed_ones_ignored() -> None:
    out = processor()
    a, b, ghost = seq("a", stop=("x",)), seq("b"), seq("ghost")
    out.add(a)
    out.add(b)
    h, x = TOKENIZER.encode("hx")
    a.output.append(x)
    b.output.append(h)
    processed = out.process(
        [TokenEvent(ghost, h, None), TokenEvent(a, x, None), TokenEvent(b, h, None)]
    )
    assert [(o.seq_id, o.output) for o in processed.outputs] == [
        ("a", Delta("", 1, FinishReason.STOP, 4, 0)),
        ("b", Delta("h", 1, None, 4, 0)),
    ]
    assert processed.to_abort == [a]
    assert "ghost" not in out and len(out) == 2
    out.remove("b")
    out.remove("b")  # a no-op
    assert out.process([TokenEvent(b, h, None)]).outputs == []
    assert out.unfinished("b") is None and len(out) == 1


@pytest.mark.parametrize("stop", [(), ("zz",)])
def test_everything_sent_is_the_decoded_text_up_to_a_stop(stop: tuple[str, ...]) -> None:
    text = "Grüße, naïve café — 東京 zz tail"
    run = Run(processor(), seq(stop=stop))
    run.text(text, finish=FinishReason.LENGTH)
    assert run.sent == (text.split("zz")[0] if stop else text)
