"""Decoding under a grammar: each constrained sequence's next token is drawn only from the
tokens its grammar allows (a JSON schema, any JSON object), with llguidance — the
structured-generation library llama.cpp and vLLM use. Its matcher computes a sequence's
allowed tokens as a bitmask in about a millisecond, lazily over the grammar, and releases
the GIL while it does. Only the rows that ask are masked: a batch mixes constrained and
free sequences (the mask applies per row).

``compile_grammar`` turns a response format into the grammar a sequence carries (checked,
so that a schema llguidance cannot take is refused before the sequence is queued).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from parley.engines.interface import EngineRefusedRequest
from parley.engines.tools import ResponseFormat

if TYPE_CHECKING:
    import llguidance

    from parley.engines.builtin.sequence import Sequence


def compile_grammar(response_format: ResponseFormat | None) -> str | None:
    """The grammar of a response format (None: text); EngineRefusedRequest for a schema
    the grammar library refuses."""
    import llguidance

    if response_format is None or not response_format.structured:
        return None
    schema: dict[str, Any] = {"type": "object"}
    if response_format.json_schema is not None and response_format.json_schema.schema_:
        schema = dict(response_format.json_schema.schema_)
    # compact JSON: a model cannot pad its answer with whitespace until it runs out of tokens
    schema = bounded(schema)
    schema["x-guidance"] = {"whitespace_flexible": False}
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))
    except ValueError as e:
        raise EngineRefusedRequest(f"response_format: the schema cannot be used: {e}") from e
    message = llguidance.LLMatcher.validate_grammar(grammar)
    if message:
        raise EngineRefusedRequest(f"response_format: the schema cannot be used: {message}")
    return grammar


SAFE_INTEGER = 2**53 - 1  # JSON's portable integers (RFC 8259 section 6)


def bounded(schema: Any) -> Any:
    """The schema with every integer it leaves unbounded kept within JSON's portable range,
    so that a model cannot write digits until its tokens run out."""
    if isinstance(schema, list):
        return [bounded(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: bounded(value) for key, value in schema.items()}
    kinds = out.get("type")
    if kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds):
        out.setdefault("maximum", SAFE_INTEGER)
        out.setdefault("minimum", -SAFE_INTEGER)
    return out


class Grammars:
    """The matchers of the constrained sequences in the engine (on the engine's thread)."""

    def __init__(self, tokenizer_json: str, vocab_size: int, eos: tuple[int, ...]) -> None:
        self._tokenizer_json = tokenizer_json
        self._vocab = vocab_size
        self._eos = list(eos)
        self._tokenizer: llguidance.LLTokenizer | None = None  # made at the first grammar
        self._matchers: dict[str, llguidance.LLMatcher] = {}
        self._pool: llguidance.LLExecutor | None = None
        self._shifts = torch.arange(32, dtype=torch.int32)

    def _llg_tokenizer(self) -> llguidance.LLTokenizer:
        import llguidance

        if self._tokenizer is None:
            self._tokenizer = llguidance.LLTokenizer(
                self._tokenizer_json, n_vocab=self._vocab, eos_token=self._eos
            )
        return self._tokenizer

    def add(self, seq: Sequence) -> None:
        import llguidance

        if seq.params.grammar is not None:
            matcher = llguidance.LLMatcher(self._llg_tokenizer(), seq.params.grammar, log_level=0)
            self._matchers[seq.seq_id] = matcher

    def mask(self, logits: Tensor, seqs: list[Sequence]) -> None:
        """Each constrained row's disallowed tokens at -inf, in place: the rows' masks
        computed at once (llguidance's executor, its threads, the GIL let go) into one
        bitmask, its bits spread over the vocabulary in one tensor operation."""
        matched = [(i, self._matchers.get(s.seq_id)) for i, s in enumerate(seqs)]
        rows = [(i, m) for i, m in matched if m is not None]
        if not rows:
            return
        vocab = logits.shape[1]
        words = (vocab + 31) // 32
        bitmask = torch.zeros((len(rows), words), dtype=torch.int32)
        self._executor().unsafe_compute_mask_ptr(
            [(m, k) for k, (_, m) in enumerate(rows)], bitmask.data_ptr(), words * 4, len(rows)
        )
        bits = (bitmask.unsqueeze(-1) >> self._shifts) & 1  # [rows, words, 32]
        blocked = bits.view(len(rows), -1)[:, :vocab] == 0
        index = torch.tensor([i for i, _ in rows])
        with torch.inference_mode():
            logits[index] = logits[index].masked_fill(blocked, float("-inf"))

    def _executor(self) -> llguidance.LLExecutor:
        import llguidance

        if self._pool is None:
            self._pool = llguidance.LLExecutor(num_threads=2)
        return self._pool

    def advance(self, seqs: list[Sequence], tokens: list[int]) -> None:
        """Each constrained sequence's matcher past its new token."""
        for seq, token in zip(seqs, tokens, strict=True):
            matcher = self._matchers.get(seq.seq_id)
            if matcher is not None:
                matcher.consume_token(token)

    def forget(self, seq_id: str) -> None:
        self._matchers.pop(seq_id, None)

    def clear(self) -> None:
        self._matchers.clear()
