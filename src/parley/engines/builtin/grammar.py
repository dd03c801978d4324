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
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from parley.engines.interface import EngineRefusedRequest
from parley.engines.tools import OutputSpec

if TYPE_CHECKING:
    import llguidance

    from parley.engines.builtin.sequence import Sequence


def compile_grammar(output: OutputSpec) -> str | None:
    """The grammar an answer is decoded under (None: free text): the calls the request's
    tools allow (``calling.py``), or its response format; EngineRefusedRequest for a schema
    the grammar library refuses."""
    import llguidance

    from parley.engines.builtin.calling import call_grammar, offered
    from parley.engines.builtin.schemas import schema_of

    tools, response_format = offered(output), output.response_format
    param = "tools" if tools is not None else "response_format"
    try:
        if tools is not None:
            grammar = llguidance.grammar_from("lark", call_grammar(tools, response_format))
        elif response_format is not None and response_format.structured:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                json.dumps(schema_of(response_format))
            )
        else:
            return None
    except ValueError as e:
        raise EngineRefusedRequest(f"{param}: the schema cannot be used: {e}") from e
    message = llguidance.LLMatcher.validate_grammar(grammar)
    if message:
        raise EngineRefusedRequest(f"{param}: the schema cannot be used: {message}")
    return grammar


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
