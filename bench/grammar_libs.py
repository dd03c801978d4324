"""llguidance, xgrammar and outlines-core on the same schemas, tokenizer and answers.

Run by ``bench/grammar_libs.sh`` (in a venv of its own under ``build/grammar-libs``). For
each of the 50 schemas of ``bench/structured.py``: the time to compile it for the bundled
model's tokenizer (49,152 tokens), then a valid compact answer for it (made here) walked
token by token, a mask of the allowed tokens computed before each token and the token
checked against it (a library that refuses a valid token counts a miss). Medians and the
95th percentile, measured in one run side by side.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import torch
from tokenizers import Tokenizer


def instance(schema: dict[str, Any]) -> Any:
    """A valid value for one of the bench's schemas (objects of bounded scalars)."""
    if "enum" in schema:
        return schema["enum"][-1]
    kind = schema.get("type")
    if kind == "object":
        return {k: instance(v) for k, v in schema["properties"].items()}
    if kind == "array":
        n = max(schema.get("minItems", 0), min(2, schema.get("maxItems", 2)))
        return [instance(schema["items"]) for _ in range(n)]
    if kind == "string":
        return "Lisbon, Portugal"[: schema.get("maxLength", 40)]
    if kind == "integer":
        return min(schema.get("maximum", 1987), 1987)
    if kind == "number":
        return 3.25
    if kind == "boolean":
        return True
    raise ValueError(f"no instance for {schema}")


class Lib:
    name: str

    def compile(self, schema: dict[str, Any]) -> Any: ...

    def walk(self, grammar: Any, tokens: list[int]) -> tuple[list[float], int]:
        """Microseconds per mask, and how many valid tokens the mask refused."""
        raise NotImplementedError


class Llguidance(Lib):
    name = "llguidance"

    def __init__(self, tokenizer_json: str, vocab: int, eos: list[int]) -> None:
        import llguidance

        self.llg = llguidance
        self.tok = llguidance.LLTokenizer(tokenizer_json, n_vocab=vocab, eos_token=eos)
        self.vocab = vocab

    def compile(self, schema: dict[str, Any]) -> Any:
        schema = {**schema, "x-guidance": {"whitespace_flexible": False}}
        grammar = self.llg.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        return self.llg.LLMatcher(self.tok, grammar, log_level=0)

    def walk(self, matcher: Any, tokens: list[int]) -> tuple[list[float], int]:
        from llguidance.torch import allocate_token_bitmask, fill_next_token_bitmask

        mask = allocate_token_bitmask(1, self.vocab)
        times, misses = [], 0
        for token in tokens:
            start = time.perf_counter()
            fill_next_token_bitmask(matcher, mask, 0)
            times.append((time.perf_counter() - start) * 1e6)
            misses += not bool((mask[0, token // 32] >> (token % 32)) & 1)
            matcher.consume_token(token)
        return times, misses


class XGrammar(Lib):
    name = "xgrammar"

    def __init__(self, tokenizer_json: str, vocab: int, eos: list[int]) -> None:
        import xgrammar  # type: ignore[import-not-found]

        self.xgr = xgrammar
        tok = Tokenizer.from_str(tokenizer_json)
        encoded = [tok.id_to_token(i) or "" for i in range(tok.get_vocab_size())]
        info = xgrammar.TokenizerInfo(
            encoded, vocab_type=xgrammar.VocabType.BYTE_LEVEL, vocab_size=vocab, stop_token_ids=eos
        )
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.vocab = vocab

    def compile(self, schema: dict[str, Any]) -> Any:
        compiled = self.compiler.compile_json_schema(
            json.dumps(schema), any_whitespace=False, separators=(",", ":")
        )
        return self.xgr.GrammarMatcher(compiled)

    def walk(self, matcher: Any, tokens: list[int]) -> tuple[list[float], int]:
        mask = self.xgr.allocate_token_bitmask(1, self.vocab)
        times, misses = [], 0
        for token in tokens:
            start = time.perf_counter()
            matcher.fill_next_token_bitmask(mask)
            times.append((time.perf_counter() - start) * 1e6)
            misses += not bool((int(mask[0, token // 32]) >> (token % 32)) & 1)
            matcher.accept_token(token)
        return times, misses


class OutlinesCore(Lib):
    name = "outlines-core"

    def __init__(self, tokenizer_json: str, vocab: int, eos: list[int]) -> None:
        import outlines_core  # type: ignore[import-not-found]

        self.oc = outlines_core
        tok = Tokenizer.from_str(tokenizer_json)
        table = {b: c for b, c in _byte_table().items()}
        inverse = {c: b for b, c in table.items()}
        pieces: dict[bytes, list[int]] = {}
        for i in range(tok.get_vocab_size()):
            if i in eos:
                continue
            piece = tok.id_to_token(i) or ""
            raw = bytes(inverse[c] for c in piece) if set(piece) <= set(inverse) else piece.encode()
            pieces.setdefault(raw, []).append(i)
        self.vocabulary = outlines_core.Vocabulary(eos[0], {k: v for k, v in pieces.items()})
        self.vocab = vocab

    def compile(self, schema: dict[str, Any]) -> Any:
        regex = self.oc.json_schema.build_regex_from_schema(json.dumps(schema))
        return self.oc.Guide(self.oc.Index(regex, self.vocabulary))

    def walk(self, guide: Any, tokens: list[int]) -> tuple[list[float], int]:
        times, misses = [], 0
        for token in tokens:
            start = time.perf_counter()
            allowed = guide.get_tokens()
            times.append((time.perf_counter() - start) * 1e6)
            misses += token not in allowed
            if not guide.is_finished():
                guide.advance(token)
        return times, misses


def _byte_table() -> dict[int, str]:
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def measure(lib: Lib, cases: list[tuple[dict[str, Any], list[int]]]) -> dict[str, Any]:
    compiles, masks, misses, failed = [], [], 0, 0
    for schema, tokens in cases:
        start = time.perf_counter()
        try:
            grammar = lib.compile(schema)
        except Exception as e:  # a schema the library cannot take
            failed += 1
            print(f"  {lib.name}: {e}", file=sys.stderr)
            continue
        compiles.append((time.perf_counter() - start) * 1e3)
        times, missed = lib.walk(grammar, tokens)
        masks += times
        misses += missed
    return {
        "compile_ms_p50": statistics.median(compiles),
        "compile_ms_p95": statistics.quantiles(compiles, n=20)[-1],
        "mask_us_p50": statistics.median(masks),
        "mask_us_p95": statistics.quantiles(masks, n=20)[-1],
        "valid_tokens_refused": misses,
        "schemas_refused": failed,
        "masks": len(masks),
    }


def main() -> None:
    out = Path(sys.argv[1])
    tokenizer_json = (out / "tokenizer.json").read_text()
    meta = json.loads((out / "meta.json").read_text())
    schemas = json.loads((out / "schemas.json").read_text())
    tok = Tokenizer.from_str(tokenizer_json)
    cases = []
    for schema in schemas:
        value = instance(schema)
        jsonschema.validate(value, schema)
        text = json.dumps(value, separators=(",", ":"))
        cases.append((schema, [*tok.encode(text, add_special_tokens=False).ids, meta["eos"][0]]))
    torch.set_num_threads(1)
    libs: list[Callable[..., Lib]] = [Llguidance, XGrammar, OutlinesCore]
    results = {}
    for make in libs:
        lib = make(tokenizer_json, meta["vocab_size"], meta["eos"])
        results[lib.name] = measure(lib, cases)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    answered = sum(len(t) for _, t in cases)
    print(f"{len(cases)} schemas, {answered} answer tokens, vocabulary {meta['vocab_size']}")
    head = (
        f"{'library':14} {'compile p50':>12} {'p95':>9} {'mask p50':>10} {'p95':>9} {'refused':>8}"
    )
    print(head)
    for name, r in results.items():
        print(
            f"{name:14} {r['compile_ms_p50']:>10.2f}ms {r['compile_ms_p95']:>7.2f}ms "
            f"{r['mask_us_p50']:>8.1f}us {r['mask_us_p95']:>7.1f}us "
            f"{r['valid_tokens_refused'] + r['schemas_refused']:>8}"
        )


if __name__ == "__main__":
    main()
