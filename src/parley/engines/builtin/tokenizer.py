"""Text <-> token ids, chat-template rendering and incremental (streaming) detokenization.

Built either from a GGUF file's tokenizer metadata (a byte-level BPE, rebuilt here) or from a
Hugging Face model folder (tokenizer.json + tokenizer_config.json).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

import jinja2
from gguf import GGUFReader
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from parley.engines.builtin.config import UnsupportedModel, gguf_eos_token_ids, gguf_metadata
from parley.errors import InvalidRequest

SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")
GGUF_SPECIAL_TOKEN_KEYS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
REPLACEMENT_CHAR = "\ufffd"
# A UTF-8 character has at most 4 bytes, so valid text never needs more than 3 tokens held
# back; past this many, the U+FFFD is really in the output and is let through (bounded work).
MAX_HELD_TOKENS = 8


class TextTokenizer:
    """A ``tokenizers.Tokenizer`` plus what a chat model needs around it."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        chat_template: str | None,
        special_tokens: Mapping[str, str],
        eos_token_ids: Sequence[int] = (),
    ) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.special_tokens = dict(special_tokens)
        self.bos_token_id = self._id_of(self.special_tokens.get("bos_token"))
        eos = [*eos_token_ids, self._id_of(self.special_tokens.get("eos_token"))]
        self.eos_token_ids: tuple[int, ...] = tuple(dict.fromkeys(i for i in eos if i is not None))
        self._template = None if chat_template is None else _compile_template(chat_template)

    # -- text <-> ids ---------------------------------------------------------------------------

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; special-token strings in it (``<|im_start|>``) become one id.

        Through the batch API: the same ids as ``Tokenizer.encode``, but it lets go of the
        GIL while it works (``encode`` holds it: a long chat's prompt would stop every thread
        for seconds, the event loop's included, even when encoded in another thread)."""
        (encoded,) = self.tokenizer.encode_batch_fast([text], add_special_tokens=add_special_tokens)
        return list(encoded.ids)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one token stands for (a byte-level token's own; else its text's)."""
        piece = self.tokenizer.id_to_token(token_id) or ""
        if piece and set(piece) <= _byte_alphabet():
            table = _unicode_to_bytes()
            return bytes(table[c] for c in piece)
        return piece.encode("utf-8")

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def _id_of(self, token: str | None) -> int | None:
        return None if token is None else self.tokenizer.token_to_id(token)

    # -- chat ---------------------------------------------------------------------------------

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        """The prompt text for ``messages``, rendered by the model's own (sandboxed) template
        (``tools``: handed to a template that explains tool calls, ``calling.py``)."""
        if self._template is None:
            raise UnsupportedModel("the model has no chat template")
        extra: dict[str, Any] = {} if tools is None else {"tools": tools}
        try:
            return self._template.render(
                messages=[dict(m) for m in messages],
                add_generation_prompt=add_generation_prompt,
                **extra,
                **self.special_tokens,
            )
        except jinja2.TemplateError as exc:
            raise InvalidRequest(f"The model's chat template rejected the messages: {exc}") from exc

    # -- builders and (de)serialization -------------------------------------------------------

    @classmethod
    def from_gguf(cls, source: GGUFReader | Mapping[str, Any]) -> TextTokenizer:
        """Rebuild the byte-level BPE tokenizer a GGUF file describes in its metadata."""
        metadata = gguf_metadata(source) if isinstance(source, GGUFReader) else source
        tokens: list[str] = list(metadata["tokenizer.ggml.tokens"])
        token_types: list[int] = list(metadata.get("tokenizer.ggml.token_type") or [])
        tokenizer = _gguf_byte_level_bpe(metadata, tokens, token_types)
        _add_gguf_added_tokens(tokenizer, tokens, token_types)
        special = {
            name: tokens[int(metadata[key])]
            for name, key in GGUF_SPECIAL_TOKEN_KEYS.items()
            if metadata.get(key) is not None
        }
        return cls(
            tokenizer,
            chat_template=metadata.get("tokenizer.chat_template"),
            special_tokens=special,
            eos_token_ids=gguf_eos_token_ids(metadata),
        )

    @classmethod
    def from_folder(cls, path: Path) -> TextTokenizer:
        """From a Hugging Face model folder: tokenizer.json, tokenizer_config.json and friends."""
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        config = _read_json(path / "tokenizer_config.json")
        special = {
            name: content
            for name in SPECIAL_TOKEN_NAMES
            if (content := _token_content(config.get(name))) is not None
        }
        generation = _read_json(path / "generation_config.json")
        return cls(
            tokenizer,
            chat_template=_folder_chat_template(path, config),
            special_tokens=special,
            eos_token_ids=_as_ids(generation.get("eos_token_id")),
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "tokenizer": self.tokenizer.to_str(),
                "chat_template": self.chat_template,
                "special_tokens": self.special_tokens,
                "eos_token_ids": list(self.eos_token_ids),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> TextTokenizer:
        data = json.loads(text)
        return cls(
            Tokenizer.from_str(data["tokenizer"]),
            chat_template=data["chat_template"],
            special_tokens=data["special_tokens"],
            eos_token_ids=data["eos_token_ids"],
        )


class StreamDecoder:
    """Turns token ids, fed one at a time, into text that is safe to send right away.

    Text is never emitted while it ends in an incomplete UTF-8 sequence (decoded as U+FFFD):
    it is held back until a later token completes it (or, for output that is really invalid,
    until ``MAX_HELD_TOKENS`` tokens have piled up). Everything ``feed`` returned plus
    ``flush()`` equals ``tokenizer.decode(all_ids, skip_special_tokens=...)``, less an
    incomplete character at the end (an answer cut inside one never ends in U+FFFD). Each
    step decodes only the ids since the last emitted character boundary (plus the previous
    piece, so that decoders that strip a leading space see the same context as a full
    decode).
    """

    def __init__(self, tokenizer: TextTokenizer, *, skip_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        self._ids: list[int] = []
        self._prefix = 0  # start of the window re-decoded for context
        self._read = 0  # end of what has been emitted

    def feed(self, token_id: int) -> str:
        """The new printable text after ``token_id`` (often "", e.g. mid-character)."""
        self._ids.append(token_id)
        return self._emit(final=False)

    def flush(self) -> str:
        """Whatever is still held back, less a dangling partial character at the very end
        (the answer was cut inside one: its bytes are dropped, never sent as U+FFFD)."""
        return self._emit(final=True).rstrip(REPLACEMENT_CHAR)

    def _emit(self, *, final: bool) -> str:
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        text = self._decode(self._ids[self._prefix :])
        pending = len(text) <= len(prefix_text) or text.endswith(REPLACEMENT_CHAR)
        if pending and not final and len(self._ids) - self._read < MAX_HELD_TOKENS:
            return ""
        del self._ids[: self._read]  # keep only the new context window
        self._prefix, self._read = 0, len(self._ids)
        return text[len(prefix_text) :]

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip) if ids else ""


# -- GGUF -----------------------------------------------------------------------------------------


def _gguf_byte_level_bpe(
    metadata: Mapping[str, Any], tokens: list[str], token_types: list[int]
) -> Tokenizer:
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise UnsupportedModel(
            f"GGUF tokenizer {kind!r} is not supported (only byte-level BPE, 'gpt2'); "
            "use a Hugging Face model folder instead"
        )
    merges = [_split_merge(m) for m in metadata.get("tokenizer.ggml.merges") or []]
    vocab = {
        _byte_level_spelling(t, ty): i for i, (t, ty) in enumerate(_typed(tokens, token_types))
    }
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = _gguf_pre_tokenizer(metadata.get("tokenizer.ggml.pre"))
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _gguf_pre_tokenizer(pre: str | None) -> pre_tokenizers.PreTokenizer:
    """llama.cpp's pre-tokenizer types, as the Hugging Face tokenizer.json spells them."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        # SmolLM/SmolLM2: every digit is its own pre-token, then the GPT-2 split.
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in (None, "default", "gpt-2", "gpt2"):
        return byte_level
    raise UnsupportedModel(
        f"GGUF pre-tokenizer {pre!r} is not supported; use a Hugging Face model folder instead"
    )


def _add_gguf_added_tokens(tokenizer: Tokenizer, tokens: list[str], token_types: list[int]) -> None:
    """CONTROL tokens become special added tokens (matched whole, skippable on decode);
    USER_DEFINED ones plain added tokens, as llama.cpp and transformers do."""
    typed = list(_typed(tokens, token_types))
    control = [t for t, ty in typed if ty == TOKEN_TYPE_CONTROL]
    user = [t for t, ty in typed if ty == TOKEN_TYPE_USER_DEFINED]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])


def _typed(tokens: list[str], token_types: list[int]) -> zip[tuple[str, int]]:
    return zip(tokens, token_types or [1] * len(tokens), strict=True)


def _split_merge(merge: str) -> tuple[str, str]:
    left, sep, right = merge.partition(" ")
    if not sep or not left or not right:
        raise UnsupportedModel(f"malformed BPE merge in the GGUF file: {merge!r}")
    return left, right


def _byte_level_spelling(token: str, token_type: int) -> str:
    """Vocabulary entries are written in GPT-2's byte alphabet; re-spell the odd raw one.

    Control and user-defined tokens keep their text: they are matched as added tokens.
    """
    if token_type in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED):
        return token
    if set(token) <= _byte_alphabet():
        return token
    table = bytes_to_unicode()
    return "".join(table[b] for b in token.encode("utf-8"))


@cache
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@cache
def _unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


@cache
def _byte_alphabet() -> frozenset[str]:
    return frozenset(bytes_to_unicode().values())


# -- Hugging Face folder --------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def _token_content(value: Any) -> str | None:
    """A special token in tokenizer_config.json: a string or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _folder_chat_template(path: Path, config: Mapping[str, Any]) -> str | None:
    jinja_file = path / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = config.get("chat_template") or _read_json(path / "chat_template.json").get(
        "chat_template"
    )
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def _as_ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, list):
        return [int(v) for v in value]
    return [int(value)]


# -- chat templates -------------------------------------------------------------------------------


def _compile_template(source: str) -> jinja2.Template:
    """The template in a sandbox, with the helpers and whitespace rules transformers uses."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise UnsupportedModel(f"the model's chat template does not compile: {exc}") from exc


def _raise_exception(message: str) -> NoReturn:
    raise jinja2.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)
