"""What a new run reserves on its user's token budget: its output allowance and its whole
prompt as it will be sent (a chat's history included), counted as its model counts it
(``parley.qos.costs``). Settlement later replaces it by the engine's own counts."""

from __future__ import annotations

import anyio

from parley.config import Settings
from parley.engines.interface import ChatMessage
from parley.qos.budget import Budget
from parley.qos.costs import PromptCounter
from parley.store import prompts
from parley.store.database import Database
from parley.store.new_runs import NewRun

# a character count this many times a token count is taken as over any prompt's tokens: a
# prompt whose characters ÷ this already fill the bucket is not counted (only capped)
MAX_CHARS_PER_TOKEN = 16


class Costs:
    def __init__(self, db: Database, budget: Budget, settings: Settings) -> None:
        self._db = db
        self._budget = budget
        self._settings = settings
        self._counter: PromptCounter | None = None

    def count_with(self, counter: PromptCounter) -> None:
        """Count prompts with ``counter`` (one whose tokenizers this process has loaded)."""
        self._counter = counter

    async def prepare(self) -> None:
        """Load the models' tokenizers, unless given (at start-up, else at the first send)."""
        if self._counter is None:
            self._counter = await anyio.to_thread.run_sync(
                PromptCounter.from_settings, self._settings
            )

    async def chat_prompt(self, new: NewRun) -> list[ChatMessage]:
        """The messages a chat's new run will send: the chat's history and the new one."""
        assert new.chat_id is not None
        async with self._db.transaction() as s:
            return await prompts.prompt_of_chat(
                s, user_id=new.user_id, chat_id=new.chat_id, content=new.content
            )

    async def reservation(self, new: NewRun, messages: list[ChatMessage]) -> int:
        """What the run reserves. A prompt long enough to fill the bucket whatever its
        count is not counted (the reservation is capped at the bucket's capacity anyway):
        a long chat costs no tokenizer time when it cannot matter."""
        capacity = self._budget.bucket(new.tier).capacity
        chars = sum(len(m.content) for m in messages)
        if new.max_tokens + chars // MAX_CHARS_PER_TOKEN >= capacity:
            return capacity
        await self.prepare()
        assert self._counter is not None
        return new.max_tokens + await self._counter.count_async(new.model, messages)
