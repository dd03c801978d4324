"""What a new run reserves on its user's token budget: its output allowance and its whole
prompt as it will be sent, counted as its model counts it (``parley.qos.prompt_counter``): a chat's
prompt as ``context.prompts`` assembles it (or, with context management off, its whole
history), a program's own messages. Settlement later replaces it by the engine's counts.

Before admission, the same counts refuse what can never fit: a chat message larger than its
run's input budget, or a program's prompt larger than the model's window (less the answer's
allowance) or the tier's ``max_input_tokens`` (400 ``context_length_exceeded``).
"""

from __future__ import annotations

from parley.context.assembly import NewMessage, refuse_too_long
from parley.context.prompts import ChatContext
from parley.engines.interface import ChatMessage
from parley.qos.budget import Budget
from parley.store import prompts
from parley.store.database import Database
from parley.store.new_runs import NewRun
from parley.store.prompts import ChatRef

# a character count this many times a token count is taken as over any prompt's tokens: a
# prompt whose characters ÷ this already exceed a limit is not counted
MAX_CHARS_PER_TOKEN = 16


class Costs:
    def __init__(self, db: Database, budget: Budget, context: ChatContext):
        self._db = db
        self._budget = budget
        self.context = context

    async def prepare(self) -> None:
        """Load the models' tokenizers (at start-up, else at the first send)."""
        await self.context.counter()

    async def check_message(self, new: NewRun) -> None:
        """A chat's new message that cannot fit any prompt of its run: ContextTooLong."""
        if self.context.enabled:
            await self.context.check_message(_new_message(new))

    async def check_program(self, new: NewRun, messages: list[ChatMessage]) -> int:
        """A program's prompt, counted; ContextTooLong if it cannot fit. One whose
        characters alone exceed the budget is refused uncounted."""
        limits = await self.context.limits(new.model, new.tier, new.max_tokens)
        chars = sum(len(m.content) for m in messages)
        refuse_too_long(chars // MAX_CHARS_PER_TOKEN, limits, "the prompt", param="messages")
        return await self.context.check_prompt(
            model=new.model, tier=new.tier, max_tokens=new.max_tokens, messages=messages
        )

    async def engine_tokens(
        self, new: NewRun, messages: list[ChatMessage], counted: int
    ) -> int | None:
        """A program's prompt as its model's engine counts it, given ``counted`` (what
        ``check_program`` returned for the same messages); None if not known here."""
        counter = await self.context.counter()
        return await counter.engine_prompt_tokens(new.model, messages, counted)

    async def chat_tokens(self, new: NewRun) -> int:
        """The tokens of the prompt a chat's new run will send."""
        assert new.chat_id is not None
        if self.context.enabled:
            chat = ChatRef(new.user_id, new.chat_id)
            assembled = await self.context.assemble(self._db, chat, _new_message(new))
            return assembled.composition.total_tokens
        async with self._db.reads() as s:
            messages = await prompts.prompt_of_chat(
                s, user_id=new.user_id, chat_id=new.chat_id, content=new.content, after=new.after
            )
        return await self._whole_history(new, messages)

    async def _whole_history(self, new: NewRun, messages: list[ChatMessage]) -> int:
        """A whole history's tokens; one long enough to fill the bucket whatever its count
        is not counted (the reservation is capped at the bucket's capacity anyway)."""
        capacity = self._budget.bucket(new.tier).capacity
        chars = sum(len(m.content) for m in messages)
        if new.max_tokens + chars // MAX_CHARS_PER_TOKEN >= capacity:
            return capacity
        return await (await self.context.counter()).count_async(new.model, messages)

    def reservation(self, new: NewRun, prompt_tokens: int) -> int:
        """What the run reserves: its output allowance and its prompt, at most the bucket."""
        return min(new.max_tokens + prompt_tokens, self._budget.bucket(new.tier).capacity)


def _new_message(new: NewRun) -> NewMessage:
    return NewMessage(
        new.content,
        new.model,
        new.tier,
        new.max_tokens,
        after=new.after,
        attachment_ids=new.attachment_ids,
    )
