"""What a run's reservation counts: the whole prompt as the worker will send it, counted as
the model's engine counts it (the built-in model's tokenizer, an openai model's configured
tokenizer, the fake engine's rule) or else estimated on the high side; and the prompt itself
(``store/prompts.py``) is the one the worker builds, on SQLite and on Postgres."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from parley.config import load_settings
from parley.context.summaries import Summaries
from parley.domain import MessageRole, MessageStatus, new_id, utcnow
from parley.engines.builtin.config import ModelNotFound
from parley.engines.builtin.engine import BuiltinEngine
from parley.engines.builtin.loader import default_model_path
from parley.engines.estimate import CHARS_PER_TOKEN
from parley.engines.fake import FAKE_MODEL, FakeEngine
from parley.engines.interface import ChatMessage
from parley.engines.kinds import DEFAULT_BUILTIN_MODEL, builtin_engine, upstream_router
from parley.engines.prompt_counts import BuiltinFiles
from parley.engines.sampling import SamplingParams
from parley.engines.settings import EngineSettings
from parley.errors import ConfigurationError, NotFound
from parley.qos import prompt_counter as costs
from parley.qos.prompt_counter import PromptCounter, estimate
from parley.runs.generation import Prompting
from parley.services import chat_context
from parley.store import chats, run_records, users
from parley.store.database import Database
from parley.store.new_runs import NewRun, create_run
from parley.store.prompts import prompt_of_chat
from parley.store.schema import Message
from tests.engines.tiny import CHAT_SPECIALS, CHAT_TEMPLATE, save_tiny_chat_model

T = TypeVar("T")


def msgs(*pairs: tuple[str, str]) -> list[ChatMessage]:
    return [ChatMessage(role, content) for role, content in pairs]


CONVERSATIONS = [
    msgs(("user", "What is the capital of France?")),
    msgs(
        ("system", "You answer in one word."),
        ("user", "Name a prime number above 1000."),
        ("assistant", "1009"),
        ("user", "And one above 10,000? Écris-le en chiffres: 10 007 ✓"),
    ),
    msgs(("user", "<|im_start|>assistant\nnot a real turn<|im_end|>"), ("assistant", "")),
    msgs(
        *[
            ("user" if i % 2 == 0 else "assistant", f"turn {i}: " + "lorem ipsum " * i)
            for i in range(30)
        ]
    ),
]


def builtin_settings(**builtin: Any) -> EngineSettings:
    """The built-in engine with a tiny KV cache: the engine is built only for its count."""
    return load_settings(
        engine="builtin", builtin_engine={"kv_cache_tokens": 64, "max_running": 1, **builtin}
    ).engines


def openai_settings(tmp_path: Path, **model: Any) -> EngineSettings:
    return load_settings(
        data_dir=tmp_path,
        models=[
            {
                "name": "llama",
                "engine": "openai",
                "replicas": [{"base_url": "http://gpu1:8000/v1"}],
                **model,
            }
        ],
    ).engines


# -- the built-in engine's models: exactly the engine's count --------------------------------------


@pytest.fixture(scope="module")
def smollm2() -> tuple[PromptCounter, BuiltinEngine]:
    """The bundled SmolLM2's counter and its real engine (loaded from the dequantized cache)."""
    try:
        default_model_path()
    except ModelNotFound as e:
        pytest.skip(str(e))
    settings = builtin_settings()
    engine = builtin_engine(settings)
    assert isinstance(engine, BuiltinEngine)
    return PromptCounter.from_settings(settings), engine


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_the_bundled_model_counts_as_its_engine(
    smollm2: tuple[PromptCounter, BuiltinEngine], messages: list[ChatMessage]
) -> None:
    counter, engine = smollm2
    assert counter.counts_tokens(DEFAULT_BUILTIN_MODEL)
    expected = engine.count_prompt_tokens(DEFAULT_BUILTIN_MODEL, messages)
    assert counter.count(DEFAULT_BUILTIN_MODEL, messages) == expected


def test_the_bundled_model_is_found_where_the_loader_finds_it() -> None:
    try:
        path = default_model_path()
    except ModelNotFound as e:
        pytest.skip(str(e))
    assert costs.default_model_path() == path


@pytest.fixture(scope="module")
def tiny_chat_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_chat_model(tmp_path_factory.mktemp("models") / "tiny-chat")


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_a_hugging_face_folder_model_counts_as_its_engine(
    tiny_chat_model: Path, messages: list[ChatMessage]
) -> None:
    settings = builtin_settings(model=tiny_chat_model)
    engine = builtin_engine(settings)
    counter = PromptCounter.from_settings(settings)
    assert counter.count("tiny-chat", messages) == engine.count_prompt_tokens("tiny-chat", messages)


def test_the_engines_own_tokenizer_is_not_loaded_again(tiny_chat_model: Path) -> None:
    """``parley serve`` hands the loaded engine's tokenizer over: the model's path is not read."""
    engine = builtin_engine(builtin_settings(model=tiny_chat_model))
    assert isinstance(engine, BuiltinEngine)
    elsewhere = builtin_settings(model=tiny_chat_model.parent / "gone", model_name="tiny-chat")
    counter = PromptCounter.from_settings(elsewhere, files=BuiltinFiles(None, engine.tokenizer))
    messages = CONVERSATIONS[1]
    assert counter.count("tiny-chat", messages) == engine.count_prompt_tokens("tiny-chat", messages)


def test_a_built_in_model_this_process_cannot_read_is_estimated(tmp_path: Path) -> None:
    counter = PromptCounter.from_settings(builtin_settings(model=tmp_path / "elsewhere.gguf"))
    assert not counter.counts_tokens("elsewhere")
    assert counter.count("elsewhere", CONVERSATIONS[1]) == estimate(CONVERSATIONS[1])


# -- an openai model's configured tokenizer ----------------------------------------------------


def byte_tokenizer(folder: Path, *, template: str | None) -> Path:
    """One token a UTF-8 byte (no merges) and ChatML's special tokens, each one token: its
    counts are known by hand. With ``template``, a tokenizer_config.json beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(CHAT_SPECIALS))
    tokenizer.save(str(folder / "tokenizer.json"))
    if template is not None:
        config = {"eos_token": "<|im_end|>", "chat_template": template}
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder / "tokenizer.json"


def byte_tokens(text: str) -> int:
    """``byte_tokenizer``'s count: a token a byte, a special token's text (even in a
    message's content) one token."""
    specials = sum(text.count(t) for t in CHAT_SPECIALS)
    for t in CHAT_SPECIALS:
        text = text.replace(t, "")
    return len(text.encode()) + specials


def chatml_bytes(messages: list[ChatMessage]) -> int:
    """CHAT_TEMPLATE's tokens on ``byte_tokenizer``: <|im_start|> role \\n content
    <|im_end|> \\n a message, then <|im_start|>assistant\\n."""
    turns = sum(1 + byte_tokens(f"{m.role}\n{m.content}") + 1 + 1 for m in messages)
    return turns + 1 + byte_tokens("assistant\n")


def plain_bytes(messages: list[ChatMessage]) -> int:
    per_message = costs.MESSAGE_OVERHEAD_TOKENS
    return sum(byte_tokens(m.content) + per_message for m in messages) + (
        costs.PROMPT_OVERHEAD_TOKENS
    )


@pytest.mark.parametrize("as_folder", [True, False], ids=["folder", "file"])
@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_an_openai_models_tokenizer_counts_its_chat_template(
    tmp_path: Path, as_folder: bool, messages: list[ChatMessage]
) -> None:
    file = byte_tokenizer(tmp_path / "llama", template=CHAT_TEMPLATE)
    counter = PromptCounter.from_settings(
        openai_settings(tmp_path, tokenizer=file.parent if as_folder else file)
    )
    assert counter.counts_tokens("llama")
    assert counter.count("llama", messages) == chatml_bytes(messages)


def test_without_a_chat_template_the_contents_are_counted_with_an_overhead(
    tmp_path: Path,
) -> None:
    file = byte_tokenizer(tmp_path / "llama", template=None)
    counter = PromptCounter.from_settings(openai_settings(tmp_path, tokenizer=file))
    for messages in CONVERSATIONS:
        assert counter.count("llama", messages) == plain_bytes(messages)


def test_a_template_that_refuses_the_messages_still_counts_them(tmp_path: Path) -> None:
    """A template may refuse a history (two user turns in a row, a system message): the
    engine answers that; the reservation counts the messages without it."""
    strict = "{% if messages[0].role == 'system' %}{{ raise_exception('no system') }}{% endif %}"
    file = byte_tokenizer(tmp_path / "llama", template=strict + CHAT_TEMPLATE)
    counter = PromptCounter.from_settings(openai_settings(tmp_path, tokenizer=file))
    assert counter.count("llama", CONVERSATIONS[0]) == chatml_bytes(CONVERSATIONS[0])
    assert counter.count("llama", CONVERSATIONS[1]) == plain_bytes(CONVERSATIONS[1])


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        (lambda tmp: tmp / "missing" / "tokenizer.json", "neither a tokenizer.json file"),
        (lambda tmp: tmp, "nor a folder holding one"),
        (lambda tmp: tmp / "vocab.json", "neither a tokenizer.json file"),
    ],
    ids=["missing-file", "folder-without-one", "another-file"],
)
def test_a_tokenizer_that_is_not_there_is_a_settings_error(
    tmp_path: Path, where: Callable[[Path], Path], reason: str
) -> None:
    (tmp_path / "vocab.json").write_text("{}")
    with pytest.raises(ConfigurationError, match=reason) as refused:
        openai_settings(tmp_path, tokenizer=where(tmp_path))
    assert "models.0" in str(refused.value) and "'llama'" in str(refused.value)


def test_only_an_openai_model_takes_a_tokenizer(tmp_path: Path) -> None:
    file = byte_tokenizer(tmp_path / "t", template=None)
    with pytest.raises(ConfigurationError, match="only an openai engine takes a tokenizer"):
        load_settings(models=[{"name": "f", "engine": "fake", "tokenizer": str(file)}])


def test_an_unreadable_tokenizer_fails_the_start(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text('{"not": "a tokenizer"}')
    settings = openai_settings(tmp_path, tokenizer=tmp_path / "tokenizer.json")
    with pytest.raises(ConfigurationError, match="cannot be read"):
        PromptCounter.from_settings(settings)


def test_one_counter_counts_every_configured_model(tiny_chat_model: Path, tmp_path: Path) -> None:
    file = byte_tokenizer(tmp_path / "llama", template=CHAT_TEMPLATE)
    settings = load_settings(
        builtin_engine={"model": tiny_chat_model, "kv_cache_tokens": 64, "max_running": 1},
        models=[
            {
                "name": "llama",
                "engine": "openai",
                "replicas": [{"base_url": "http://g:1/v1"}],
                "tokenizer": str(file),
            },
            {"name": "tiny", "engine": "builtin"},
            {"name": FAKE_MODEL, "engine": "fake"},
            {"name": "hosted", "engine": "openai", "replicas": [{"base_url": "http://h:1/v1"}]},
        ],
    )
    counter = PromptCounter.from_settings(settings.engines)
    engine = builtin_engine(settings.engines, name="tiny")
    messages = CONVERSATIONS[1]
    assert counter.count("llama", messages) == chatml_bytes(messages)
    assert counter.count("tiny", messages) == engine.count_prompt_tokens("tiny", messages)
    assert counter.count(FAKE_MODEL, messages) == FakeEngine().count_prompt_tokens("", messages)
    assert counter.count("hosted", messages) == estimate(messages)
    assert [counter.counts_tokens(m) for m in ("llama", "tiny", FAKE_MODEL, "hosted")] == [
        True,
        True,
        True,
        False,
    ]
    # and how each model's engine counts (what a run made with its prompt counted stores):
    # an openai model's engine estimates, its configured tokenizer counting reservations only
    llama, _, _, hosted = settings.engines.models
    engines = [upstream_router(llama), engine, FakeEngine(), upstream_router(hosted)]
    for name, each in zip(("llama", "tiny", FAKE_MODEL, "hosted"), engines, strict=True):
        at_birth = asyncio.run(
            counter.engine_prompt_tokens(name, messages, counter.count(name, messages))
        )
        assert at_birth == each.count_prompt_tokens(name, messages), name


IMPORTS = """
import sys
from parley.config import load_settings
from parley.qos.prompt_counter import PromptCounter
settings = load_settings(engine="builtin", builtin_engine={"model": sys.argv[1]})
counter = PromptCounter.from_settings(settings.engines)
assert counter.counts_tokens("tiny-chat"), "the tokenizer was not loaded"
print("torch" in sys.modules)
"""


def test_counting_the_built_in_models_prompts_never_imports_torch(tiny_chat_model: Path) -> None:
    """The api process loads the tokenizer alone: no torch, no weights."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS, str(tiny_chat_model)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# -- the fake engine, and the estimate -----------------------------------------------------------


def test_the_fake_model_counts_as_the_fake_engine() -> None:
    counter = PromptCounter.from_settings(load_settings(engine="fake").engines)
    for messages in CONVERSATIONS:
        expected = FakeEngine().count_prompt_tokens(FAKE_MODEL, messages)
        assert counter.count(FAKE_MODEL, messages) == expected


TEXTS = [
    "",
    "敏捷的棕色狐狸跳过了懒狗。",
    "🙂🎉 ✓",
    "a",
    "ab",
    "abc",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog. " * 40,
    "def f(x):\n    return [i ** 2 for i in range(x) if i % 3 == 0]\n" * 10,
    "1234567890" * 50,
    "   spaced    out    text   " * 20,
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_estimate_never_counts_below_the_tokenizer_free_counts(text: str) -> None:
    history = msgs(("system", "Be brief."), ("user", "hi"), ("assistant", "Hello!"), ("user", text))
    for messages in ([ChatMessage("user", text)], history):
        quarters = sum(len(m.content) // 4 + 4 for m in messages) + 2  # the upstream's old one
        assert estimate(messages) >= quarters
        thirds = [math.ceil(len(m.content) / CHARS_PER_TOKEN) for m in messages]
        assert estimate(messages) >= thirds[-1]  # the old estimate of the new message
        assert estimate(messages) > sum(thirds)


PROSE = [
    "",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog. " * 40,
    "Could you explain, briefly, why the sky looks blue during the day but red at sunset?",
    "敏捷的棕色狐狸跳过了懒狗。" * 40,
    "🙂🎉" * 100,
    "Grüße aus Köln — ça va très bien, merci!",
]


@pytest.mark.parametrize("text", PROSE)
def test_the_estimate_counts_above_the_bundled_models_tokenizer(
    smollm2: tuple[PromptCounter, BuiltinEngine], text: str
) -> None:
    """On prose in any script, with the conversation's own system prompt (SmolLM2's template
    adds one of 20 tokens to a chat without: no estimate can know that). Runs of digits and
    dense code count below the tokenizer; see ``estimate``."""
    counter, _ = smollm2
    history = msgs(
        ("system", "You are a helpful assistant."),
        ("user", "hi"),
        ("assistant", "Hello! How can I help?"),
        ("user", text),
    )
    assert estimate(history) >= counter.count(DEFAULT_BUILTIN_MODEL, history)


def test_models_without_a_tokenizer_are_estimated(tmp_path: Path) -> None:
    counter = PromptCounter.from_settings(openai_settings(tmp_path))
    assert not counter.counts_tokens("llama")
    for messages in CONVERSATIONS:
        assert counter.count("llama", messages) == estimate(messages)
        assert counter.count("not-configured", messages) == estimate(messages)


# -- off the event loop for a long prompt ------------------------------------------------------


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The calls ``count_async`` sends to a thread."""
    sent: list[str] = []
    to_thread = asyncio.to_thread

    async def recorded(func: Callable[..., T], /, *args: Any) -> T:
        sent.append(args[0])
        return await to_thread(func, *args)

    monkeypatch.setattr(asyncio, "to_thread", recorded)
    yield sent


async def test_a_long_prompt_is_counted_in_a_thread(tmp_path: Path, threads: list[str]) -> None:
    file = byte_tokenizer(tmp_path / "llama", template=CHAT_TEMPLATE)
    counter = PromptCounter.from_settings(openai_settings(tmp_path, tokenizer=file))
    short = CONVERSATIONS[1]
    long = msgs(*[("user", "x" * 1000)] * (costs.OFF_LOOP_CHARS // 1000 + 1))
    assert await counter.count_async("llama", short) == chatml_bytes(short)
    assert threads == []
    assert await counter.count_async("llama", long) == chatml_bytes(long)
    assert threads == ["llama"]
    assert await counter.count_async("estimated", long) == estimate(long)  # no tokenizer
    assert threads == ["llama"]


# -- the prompt of a chat's next run: the worker's, on both databases ----------------------------


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    yield database
    await database.dispose()


HISTORY: list[tuple[MessageRole, MessageStatus, str]] = [
    (MessageRole.SYSTEM, MessageStatus.COMPLETED, "You are terse."),
    (MessageRole.USER, MessageStatus.COMPLETED, "first question"),
    (MessageRole.ASSISTANT, MessageStatus.COMPLETED, "first answer"),
    (MessageRole.USER, MessageStatus.COMPLETED, "second question"),
    (MessageRole.ASSISTANT, MessageStatus.FAILED, "half an answer that failed"),
    (MessageRole.USER, MessageStatus.COMPLETED, "third question"),
    (MessageRole.ASSISTANT, MessageStatus.CANCELLED, "stopped after saying this"),
    (MessageRole.USER, MessageStatus.COMPLETED, "fourth question"),
    (MessageRole.ASSISTANT, MessageStatus.CANCELLED, ""),
    (MessageRole.USER, MessageStatus.COMPLETED, "fifth question"),
    (MessageRole.ASSISTANT, MessageStatus.REJECTED, ""),
    (MessageRole.USER, MessageStatus.COMPLETED, "sixth question"),
    (MessageRole.ASSISTANT, MessageStatus.IN_PROGRESS, "still streaming"),
]
USABLE = [
    ("system", "You are terse."),
    ("user", "first question"),
    ("assistant", "first answer"),
    ("user", "second question"),
    ("user", "third question"),
    ("assistant", "stopped after saying this"),
    ("user", "fourth question"),
    ("user", "fifth question"),
    ("user", "sixth question"),
]


async def a_chat(
    db: Database, email: str, history: list[tuple[MessageRole, MessageStatus, str]]
) -> tuple[str, str]:
    """(user id, chat id) of a new user's chat holding ``history``."""
    async with db.transaction() as s:
        user = await users.create_user(s, email=email, password_hash="x", tier="free")
        chat = await chats.create_chat(s, user_id=user.id, title="t")
        for role, status, content in history:
            now = utcnow()
            message = Message(
                id=chats.new_message_id(),
                user_id=user.id,
                chat_id=chat.id,
                role=role,
                content=content,
                status=status,
                created_at=now,
                updated_at=now,
            )
            await chats.add_message(s, message)
    return user.id, chat.id


async def workers_prompt(db: Database, user_id: str, chat_id: str, content: str) -> list[Any]:
    """The messages the worker sends for a run made of ``content`` in that chat."""
    new = NewRun(
        user_id=user_id,
        chat_id=chat_id,
        content=content,
        model=FAKE_MODEL,
        tier="free",
        priority=0,
        max_tokens=16,
        sampling=SamplingParams(),
        idempotency_key=None,
        request_hash=None,
    )
    whole_history = chat_context(load_settings(engine="fake", context={"enabled": False}), None)
    prompting = Prompting(db, FakeEngine(), whole_history, cast(Summaries, None))
    async with db.transaction() as s:
        run = await create_run(s, new)
        return (await prompting.prompt_of(s, run)).request.messages


async def test_a_chats_prompt_is_the_one_the_worker_sends(db: Database) -> None:
    user_id, chat_id = await a_chat(db, "ada@example.com", HISTORY)
    async with db.transaction() as s:
        prompt = await prompt_of_chat(s, user_id=user_id, chat_id=chat_id, content="seventh")
    assert prompt == msgs(*USABLE, ("user", "seventh"))
    assert prompt == await workers_prompt(db, user_id, chat_id, "seventh")


@pytest.mark.parametrize("limit", [1, 2, 5, 9])
async def test_a_long_chats_prompt_keeps_the_workers_newest_messages(
    db: Database, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    monkeypatch.setattr(run_records, "HISTORY_LIMIT", limit)
    user_id, chat_id = await a_chat(db, "ada@example.com", HISTORY)
    async with db.transaction() as s:
        prompt = await prompt_of_chat(s, user_id=user_id, chat_id=chat_id, content="next")
    assert prompt == await workers_prompt(db, user_id, chat_id, "next")
    assert prompt[-1] == ChatMessage("user", "next") and len(prompt) <= limit


async def test_an_empty_chats_prompt_is_the_new_message(db: Database) -> None:
    user_id, chat_id = await a_chat(db, "ada@example.com", [])
    async with db.transaction() as s:
        prompt = await prompt_of_chat(s, user_id=user_id, chat_id=chat_id, content="hello")
    assert prompt == [ChatMessage("user", "hello")]
    assert prompt == await workers_prompt(db, user_id, chat_id, "hello")


@pytest.mark.parametrize("whose", ["another users", "malformed", "unknown"])
async def test_a_chat_the_user_does_not_own_is_not_found(db: Database, whose: str) -> None:
    owner, chat_id = await a_chat(db, "ada@example.com", HISTORY)
    other, _ = await a_chat(db, "bob@example.com", [])
    asked = {"another users": chat_id, "malformed": "nope", "unknown": new_id("chat")}[whose]
    async with db.transaction() as s:
        with pytest.raises(NotFound) as refused:
            await prompt_of_chat(s, user_id=other, chat_id=asked, content="hi")
    assert refused.value.code == "chat_not_found"
    assert owner != other
