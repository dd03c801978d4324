"""The output side of the built-in engine: the core's token events into each request's text.

In the style of vLLM v1's ``OutputProcessor``, apart from the engine core: the core reports
token ids (``TokenEvent``s) from its thread, and this, on the event loop, turns them into the
``Delta``s a client reads, one request at a time:

- the text is decoded incrementally (``StreamDecoder``: never half a UTF-8 character);
- stop strings are applied: text that could be the start of one is held back until later
  text rules it out (or the request ends, when it is released), and a stop string found
  ends the request there, itself never sent; the caller is told to abort that sequence in
  the engine, which would otherwise go on;
- a request's first ``Delta`` carries its prompt's token count and how many of them the
  prefix cache held;
- a sequence the engine ended at once for being longer than its whole KV cache gets a
  ``ContextLengthExceeded`` instead, and one the engine ended with an error (it refused the
  request, or failed itself) that error.

Events of requests not added (or already finished, or removed) are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from parley.engines.builtin.core import TokenEvent
from parley.engines.builtin.sequence import Sequence
from parley.engines.builtin.tokenizer import StreamDecoder, TextTokenizer
from parley.engines.interface import (
    ContextLengthExceeded,
    Delta,
    EngineError,
    FinishReason,
    TokenLogprob,
    TopLogprob,
)


@dataclass(slots=True)
class _Request:
    seq: Sequence
    decoder: StreamDecoder
    held: str = ""  # decoded text not yet sent: it may begin a stop string
    sent_prompt_tokens: bool = False
    finished: bool = False

    @property
    def stop(self) -> tuple[str, ...]:
        return self.seq.params.stop


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """What one request's client gets next: a delta, or the error that ends it."""

    seq_id: str
    output: Delta | EngineError


@dataclass(slots=True)
class ProcessedOutputs:
    outputs: list[RequestOutput] = field(default_factory=list)
    # sequences a stop string ended while the engine would go on: the caller aborts them
    to_abort: list[Sequence] = field(default_factory=list)


class OutputProcessor:
    """Per-request detokenizing and stop strings, between the engine core and its clients.

    ``cache_tokens`` (the engine's KV capacity) only words the error of a prompt too long
    for it.
    """

    def __init__(self, tokenizer: TextTokenizer, *, cache_tokens: int) -> None:
        self._tokenizer = tokenizer
        self._cache_tokens = cache_tokens
        self._requests: dict[str, _Request] = {}

    def add(self, seq: Sequence) -> None:
        """Follow a new request; its stop strings are ``seq.params.stop``."""
        self._requests[seq.seq_id] = _Request(seq, StreamDecoder(self._tokenizer))

    def remove(self, seq_id: str) -> None:
        """Forget a request (its client is gone); a no-op for unknown ids."""
        self._requests.pop(seq_id, None)

    def unfinished(self, seq_id: str) -> Sequence | None:
        """The request's sequence while no output has ended it, else None."""
        request = self._requests.get(seq_id)
        return request.seq if request is not None and not request.finished else None

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self._requests

    def __len__(self) -> int:
        return len(self._requests)

    def process(self, events: Iterable[TokenEvent]) -> ProcessedOutputs:
        """The outputs of one batch of events, in order, and the sequences to abort."""
        processed = ProcessedOutputs()
        for event in events:
            request = self._requests.get(event.seq.seq_id)
            if request is None or request.finished:
                continue
            output = self._output(request, event, processed)
            processed.outputs.append(RequestOutput(event.seq.seq_id, output))
        return processed

    def _output(
        self, request: _Request, event: TokenEvent, processed: ProcessedOutputs
    ) -> Delta | EngineError:
        seq = request.seq
        if event.error is not None:
            request.finished = True
            return event.error
        if event.token is None and event.finish is FinishReason.LENGTH and not seq.output:
            request.finished = True  # the scheduler found the prompt can never fit
            return ContextLengthExceeded(
                f"the prompt is {len(seq.prompt)} tokens; this engine holds at most "
                f"{self._cache_tokens} tokens"
            )
        text, finish = self._text(request, event)
        if finish is FinishReason.STOP and event.finish is None:
            processed.to_abort.append(seq)
        prompt_tokens = cached = None
        if not request.sent_prompt_tokens:
            prompt_tokens, cached = len(seq.prompt), seq.num_cached_prompt
            request.sent_prompt_tokens = True
        if finish is not None:
            request.finished = True
        tokens = 1 if event.token is not None else 0
        logprobs: tuple[TokenLogprob, ...] = ()
        if event.logprob is not None and event.token is not None:
            logprobs = (self._logprob(event.token, *event.logprob),)
        return Delta(text, tokens, finish, prompt_tokens, cached, logprobs=logprobs)

    def _logprob(
        self, token: int, logprob: float, top: tuple[tuple[int, float], ...]
    ) -> TokenLogprob:
        """A sampled token's log probability, its text and bytes, and its alternatives'."""
        alternatives = []
        for other, p in top:
            text, raw = self._spelled(other)
            alternatives.append(TopLogprob(text, p, raw))
        text, raw = self._spelled(token)
        return TokenLogprob(text, logprob, raw, tuple(alternatives))

    def _spelled(self, token: int) -> tuple[str, tuple[int, ...]]:
        raw = self._tokenizer.token_bytes(token)
        return raw.decode("utf-8", errors="replace"), tuple(raw)

    def _text(self, request: _Request, event: TokenEvent) -> tuple[str, FinishReason | None]:
        """The text to send now (stop strings applied) and the request's finish, if any."""
        decoder = request.decoder
        text = decoder.feed(event.token) if event.token is not None else ""
        finish = event.finish
        if finish is not None:
            text += decoder.flush()
        text = request.held + text
        request.held = ""
        cut = find_stop(text, request.stop)
        if cut is not None:
            return text[:cut], FinishReason.STOP
        if finish is None:
            text, request.held = hold_back(text, request.stop)
        return text, finish


def find_stop(text: str, stops: tuple[str, ...]) -> int | None:
    """Where the first stop string in ``text`` begins, if any."""
    hits = [i for s in stops if (i := text.find(s)) >= 0]
    return min(hits) if hits else None


def hold_back(text: str, stops: tuple[str, ...]) -> tuple[str, str]:
    """Split off the longest end of ``text`` that is the beginning of a stop string."""
    keep = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:n]):
                keep = max(keep, n)
                break
    return (text[: len(text) - keep], text[len(text) - keep :]) if keep else (text, "")
