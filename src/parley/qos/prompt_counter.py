"""A prompt's length in tokens before it is sent: what a run's budget reservation counts.

The reservation covers the whole prompt as the worker will send it (the chat's history, the
new message and the chat template), counted the way the model's engine counts it where the
api process can do so without the model itself: each kind of engine says how
(``engines/kinds.py``, ``engines/prompt_counts.py``); a model without a count is estimated,
one token per ``CHARS_PER_TOKEN`` characters (more for text beyond ASCII).

Tokenizers are loaded once, when the counter is built at start-up. A count is a template
render and one encode (SmolLM2's tokenizer): 0.06 ms for a short message, 3.5 ms for a
50-message history of 20,000 characters, about 4 s for the longest (200 messages of 32,000),
so ``PromptCounter.count_async`` counts a long prompt in a thread. Settlement still replaces
the reservation by the engine's own counts; a count here only has to be close, and rather
high than low.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from parley.engines.estimate import MESSAGE_OVERHEAD_TOKENS as MESSAGE_OVERHEAD_TOKENS
from parley.engines.estimate import PROMPT_OVERHEAD_TOKENS as PROMPT_OVERHEAD_TOKENS
from parley.engines.estimate import estimate as estimate
from parley.engines.interface import ChatMessage
from parley.engines.kinds import described
from parley.engines.prompt_counts import (
    DEFAULT_UPSTREAM_WINDOW,
    ESTIMATE,
    BuiltinFiles,
    PromptCount,
)
from parley.engines.prompt_counts import default_model_path as default_model_path
from parley.engines.registry import model_settings
from parley.engines.settings import EngineSettings

log = logging.getLogger(__name__)

# a longer prompt is encoded off the event loop (about 1.5 ms of encoding)
OFF_LOOP_CHARS = 8_000


class PromptCounter:
    """Counts prompts for every configured model; a model it was not built for is estimated.

    Build it once per process with ``from_settings``; ``count`` is then pure (thread-safe)
    and cheap, ``count_async`` the same off the event loop for a long prompt.
    """

    def __init__(
        self,
        counts: Mapping[str, PromptCount],
        *,
        windows: Mapping[str, int] | None = None,
        engine_counts: Mapping[str, PromptCount] | None = None,
    ):
        """``engine_counts``: per model, how its engine counts (``engine_prompt_tokens``)."""
        self._counts = dict(counts)
        self._windows = dict(windows or {})
        self._engine_counts = dict(engine_counts or {})

    @classmethod
    def from_settings(
        cls,
        engines: EngineSettings,
        *,
        files: BuiltinFiles | None = None,
    ) -> PromptCounter:
        """A counter for the configured models, their tokenizers loaded now.

        ``files``: the built-in model's tokenizer and window as the engine built in this
        process read them (``parley serve``), so they are not read from disk a second
        time. Raises ConfigurationError for a configured ``tokenizer`` that cannot be read.
        """
        counts: dict[str, PromptCount] = {}
        windows: dict[str, int] = {}
        engine_counts: dict[str, PromptCount] = {}
        files = files or BuiltinFiles(engines.builtin.model)
        for model in model_settings(engines):
            kind = described(model.engine)
            count = kind.prompt_count(model, files)
            if count is not None:
                counts[model.name] = count
            if (engine_count := kind.engine_count(count)) is not None:
                engine_counts[model.name] = engine_count
            windows[model.name] = kind.window(model, engines, files)
            log.info("prompts of model %s: %s", model.name, "counted" if count else "estimated")
        return cls(counts, windows=windows, engine_counts=engine_counts)

    def _count(self, model: str) -> PromptCount:
        return self._counts.get(model, ESTIMATE)

    def count(self, model: str, messages: list[ChatMessage]) -> int:
        """The prompt's tokens as ``model``'s engine would count them (or an estimate), on
        this thread (3.5 ms for a 50-message history of 20,000 characters)."""
        return self._count(model)(messages)

    async def count_async(self, model: str, messages: list[ChatMessage]) -> int:
        """``count``, in a worker thread when a tokenizer has a long prompt to encode (over
        ``OFF_LOOP_CHARS``): a full history (200 messages of up to 32,000 characters) takes
        about 4 s, which must not stall the event loop; a short prompt costs less than the
        hop to a thread. The tokenizer lets go of the GIL while it encodes (the loop then
        pauses 20 ms at most, for the template)."""
        encodes = self._count(model).encodes
        if encodes and sum(len(m.content) for m in messages) > OFF_LOOP_CHARS:
            return await asyncio.to_thread(self.count, model, messages)
        return self.count(model, messages)

    async def engine_prompt_tokens(
        self, model: str, messages: list[ChatMessage], counted: int
    ) -> int | None:
        """The prompt's tokens as ``model``'s engine counts them (what a worker would store
        for the run), given ``counted``, this counter's ``count_async`` of the same
        messages; None where this process cannot tell (the built-in model's tokenizer not
        at hand)."""
        engine = self._engine_counts.get(model)
        if engine is None:
            return None
        if engine is self._count(model):
            return counted
        if engine.encodes and sum(len(m.content) for m in messages) > OFF_LOOP_CHARS:
            return await asyncio.to_thread(engine, messages)
        return engine(messages)

    def count_texts(self, model: str, texts: list[str]) -> list[int]:
        """Each text's tokens on its own, without a template (a message's content)."""
        return self._count(model).texts(texts)

    async def count_texts_async(self, model: str, texts: list[str]) -> list[int]:
        """``count_texts``, in a thread for long texts (as ``count_async``)."""
        if sum(len(text) for text in texts) > OFF_LOOP_CHARS:
            return await asyncio.to_thread(self.count_texts, model, texts)
        return self.count_texts(model, texts)

    def window(self, model: str) -> int:
        """The tokens ``model`` reads, prompt and answer: its context window."""
        return self._windows.get(model, DEFAULT_UPSTREAM_WINDOW)

    def counts_tokens(self, model: str) -> bool:
        """Whether ``model``'s prompts are counted (a tokenizer or the fake engine's rule)
        rather than estimated."""
        return model in self._counts
