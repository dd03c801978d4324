"""The built-in engine behind the Engine interface: a thin asyncio client of EngineLoop.

``stream()`` renders the chat template, submits the token ids to the engine thread
and yields each new piece of text as it is decoded; closing the stream early (or
``abort()``) ends the sequence in the engine, which frees its KV blocks at once.
The engine thread's token events come back to the event loop, where the
``OutputProcessor`` (output.py) turns them into each stream's deltas (detokenized, stop
strings applied and never sent) and names the sequences a stop string ended, which are
aborted in the engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import torch

from parley.domain import FinishReason
from parley.engines.builtin.calling import (
    CallReader,
    calls_only,
    offered,
    template_explains_calls,
    template_messages,
)
from parley.engines.builtin.core import EngineCore, TokenEvent
from parley.engines.builtin.grammar import Grammars, compile_grammar
from parley.engines.builtin.loader import LoadedModel, engine_model, mapped_again
from parley.engines.builtin.loop import EngineLoop
from parley.engines.builtin.native.mode import NativeMode, attach_native
from parley.engines.builtin.output import OutputProcessor
from parley.engines.builtin.precision import Precision
from parley.engines.builtin.sequence import Sequence, SequenceSampling
from parley.engines.builtin.threads import on_fresh_thread
from parley.engines.builtin.tokenizer import TextTokenizer
from parley.engines.interface import (
    ChatMessage,
    ContextLengthExceeded,
    Delta,
    EngineError,
    EngineFailed,
    EngineRefusedRequest,
    EngineState,
    GenerationRequest,
)
from parley.engines.tools import OutputSpec

DEFAULT_TEMPERATURE = 0.7


@dataclass(frozen=True, slots=True)
class BuiltinEngineConfig:
    kv_cache_tokens: int = 32_768
    block_size: int = 16
    max_batch_tokens: int = 512
    max_running: int = 64
    precision: Precision = Precision.FP32
    device: str | None = None
    packed_weights: bool = True  # oneDNN's packed products for dense matrices on a CPU
    native_decode: NativeMode = NativeMode.AUTO  # decode steps in one native call (native/)


# a prompt longer than this (characters) is templated and encoded off the event loop
OFF_LOOP_CHARS = 8_000


class BuiltinEngine:
    def __init__(self, loaded: LoadedModel, config: BuiltinEngineConfig | None = None) -> None:
        self.config = config or BuiltinEngineConfig()
        self.name = loaded.name
        self.tokenizer: TextTokenizer = loaded.tokenizer
        self.context_window = loaded.config.max_position_embeddings
        self.vocab_size = loaded.config.vocab_size
        device = torch.device(
            self.config.device or ("cuda" if torch.cuda.is_available() else "cpu")
        )
        self.core = on_fresh_thread(lambda: self._core(loaded, device))
        self._loop_thread = EngineLoop(self.core, self._on_events)
        self.output = OutputProcessor(self.tokenizer, cache_tokens=self.config.kv_cache_tokens)
        self._queues: dict[str, asyncio.Queue[Delta | EngineError]] = {}
        self._aio: asyncio.AbstractEventLoop | None = None
        self._started = False

    def _core(self, loaded: LoadedModel, device: torch.device) -> EngineCore:
        """The model at the configured precision (packed if so configured) in its core. Run
        on a thread that ends (``threads.on_fresh_thread``): no torch work of the start-up
        leaves an OpenMP pool beside the engine thread's."""
        model = engine_model(loaded, self.config.precision, device)
        attach_native(model, self.config.native_decode)
        if self.config.packed_weights:
            model.pack_weights(mapped_again(loaded, self.config.precision))
        return EngineCore(
            model,
            num_blocks=max(2, self.config.kv_cache_tokens // self.config.block_size),
            block_size=self.config.block_size,
            max_batch_tokens=self.config.max_batch_tokens,
            max_running=self.config.max_running,
            eos_token_ids=tuple(self.tokenizer.eos_token_ids),
            grammars=Grammars(
                self.tokenizer.tokenizer.to_str(),
                loaded.config.vocab_size,
                tuple(self.tokenizer.eos_token_ids),
            ),
        )

    def prompt_ids(
        self, messages: list[ChatMessage], output: OutputSpec | None = None, cont: bool = False
    ) -> list[int]:
        """The prompt's tokens: the messages (their tool calls and results) and the tools
        offered, written as ``calling.py`` says; ``cont``: the last message is an answer
        begun, written after its turn's start with nothing after it, for the model to go
        on (the template renders the messages before it and a new answer's start)."""
        native = template_explains_calls(self.tokenizer.chat_template)
        rendered, tools = template_messages(messages, output or OutputSpec(), native=native)
        begun = str(rendered.pop()["content"] or "") if cont and rendered else ""
        text = self.tokenizer.apply_chat_template(rendered, add_generation_prompt=True, tools=tools)
        return self.tokenizer.encode(text + begun)

    async def _prompt(self, request: GenerationRequest) -> list[int]:
        """``prompt_ids``; a long prompt's in a thread (the encoder lets go of the GIL), so
        the other runs' streams do not wait for it."""
        messages, output, cont = request.messages, request.output, request.continue_final
        if sum(len(m.content) for m in messages) <= OFF_LOOP_CHARS:
            return self.prompt_ids(messages, output, cont)
        return await asyncio.to_thread(self.prompt_ids, messages, output, cont)

    def _room(self, prompt_tokens: int, max_tokens: int) -> int:
        """The output a prompt leaves within the model's context window (its positions: past
        them the model has no rotary angles, and a step would fail every sequence in it).
        A prompt that fills the window is refused: ContextLengthExceeded."""
        room = self.context_window - prompt_tokens
        if room <= 0:
            raise ContextLengthExceeded(
                f"the prompt is {prompt_tokens} tokens; model {self.name!r} reads at most "
                f"{self.context_window} tokens (its context window), the answer included"
            )
        return min(max_tokens, room)

    def _resolved(self, request: GenerationRequest, max_tokens: int) -> SequenceSampling:
        """A request's sampling with the engine's defaults filled in, and its grammar."""
        sampling = request.sampling
        temperature = sampling.temperature
        return SequenceSampling(
            max_tokens=max_tokens,
            temperature=DEFAULT_TEMPERATURE if temperature is None else temperature,
            top_p=1.0 if sampling.top_p is None else sampling.top_p,
            seed=sampling.seed,
            stop=sampling.stop,
            frequency_penalty=sampling.frequency_penalty or 0.0,
            presence_penalty=sampling.presence_penalty or 0.0,
            logit_bias=self._bias(sampling.logit_bias),
            top_k=sampling.top_k or 0,
            min_p=sampling.min_p or 0.0,
            grammar=compile_grammar(request.output),
            logprobs=sampling.logprob_count,
        )

    def _bias(self, bias: dict[int, float] | None) -> tuple[tuple[int, float], ...]:
        """``logit_bias`` as the sampler takes it; a token id past the vocabulary is refused."""
        if not bias:
            return ()
        wrong = [token for token in bias if not 0 <= token < self.vocab_size]
        if wrong:
            raise EngineRefusedRequest(
                f"logit_bias names token {wrong[0]}; model {self.name!r} has tokens 0 to "
                f"{self.vocab_size - 1}"
            )
        return tuple(bias.items())

    def count_prompt_tokens(self, model: str, messages: list[ChatMessage]) -> int:
        return len(self.prompt_ids(messages))

    def state(self) -> EngineState:
        """The engine thread's: ``restarting`` while it recovers from a failure, ``failed``
        when it could not (or its thread is gone)."""
        if self._started and not self._loop_thread.alive:
            return EngineState.FAILED
        return self._loop_thread.state

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        self._ensure_started()
        if self.state() is EngineState.FAILED:
            raise EngineFailed("the engine failed and could not restart")
        prompt = await self._prompt(request)
        seq = Sequence(
            seq_id=request.request_id,
            prompt=prompt,
            params=self._resolved(request, self._room(len(prompt), request.max_tokens)),
            priority=request.priority,
        )
        queue: asyncio.Queue[Delta | EngineError] = asyncio.Queue()
        self._queues[seq.seq_id] = queue
        self.output.add(seq)
        self._loop_thread.submit(seq)
        tools = offered(request.output)
        reader = None if tools is None else CallReader(calls_only=calls_only(tools))
        try:
            while True:
                delta = await queue.get()
                if isinstance(delta, EngineError):
                    raise delta
                yield delta if reader is None else _read_calls(reader, delta)
                if delta.finish_reason is not None:
                    return
        finally:
            if self.output.unfinished(seq.seq_id) is not None:
                self._loop_thread.abort(seq)
            self.output.remove(seq.seq_id)
            self._queues.pop(seq.seq_id, None)

    async def start(self) -> None:
        """Nothing runs in the background until the first request."""

    async def abort(self, request_id: str) -> None:
        seq = self.output.unfinished(request_id)
        if seq is not None:
            self._loop_thread.abort(seq)

    async def close(self) -> None:
        if self._started:
            await asyncio.to_thread(self._loop_thread.stop)

    def _ensure_started(self) -> None:
        if not self._started:
            self._aio = asyncio.get_running_loop()
            self._loop_thread.start()
            self._started = True

    # -- on the engine thread ----------------------------------------------------------------

    def _on_events(self, events: list[TokenEvent]) -> None:
        assert self._aio is not None
        self._aio.call_soon_threadsafe(self._deliver, events)

    # -- back on the event loop ----------------------------------------------------------------

    def _deliver(self, events: list[TokenEvent]) -> None:
        processed = self.output.process(events)
        for seq in processed.to_abort:
            self._loop_thread.abort(seq)
        for item in processed.outputs:
            queue = self._queues.get(item.seq_id)
            if queue is not None:
                queue.put_nowait(item.output)


def _read_calls(reader: CallReader, delta: Delta) -> Delta:
    """A delta of an answer that may call tools: its text split into text and calls; an
    answer that made calls and stopped by itself finishes with ``tool_calls``."""
    try:
        text, calls = reader.feed(delta.text)
    except ValueError as e:
        raise EngineFailed(str(e)) from e
    finish = delta.finish_reason
    if finish is not None:
        text += reader.finish()
        if finish is FinishReason.STOP and reader.calls:
            finish = FinishReason.TOOL_CALLS
    return replace(delta, text=text, tool_calls=calls, finish_reason=finish)
