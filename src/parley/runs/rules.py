"""What a send asks for, checked before anything is counted or stored: its content, its
model (known, and allowed to the user's tier), its output allowance; and where its message
goes on the chat's tree (after the branch shown, or in place of an edited message)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from sqlalchemy.ext.asyncio import AsyncSession

from parley.accounts.principal import Principal
from parley.domain import MessageRole, MessageStatus
from parley.engines.kinds import Capabilities, unable
from parley.engines.sampling import SamplingParams
from parley.errors import PermissionDenied, ValidationFailed, quoted
from parley.observability import tracing
from parley.qos.settings import QosSettings
from parley.runs.inputs import RunInput
from parley.runs.requests import SendRequest, request_hash
from parley.runs.settings import RunSettings
from parley.store import chats, new_runs
from parley.store.schema import Chat
from parley.tiers import TierSettings


class Rules:
    """The checks of a request against the settings and the models served."""

    def __init__(
        self,
        qos: QosSettings,
        runs: RunSettings,
        models: list[str],
        capabilities: Mapping[str, Capabilities] | None = None,
    ) -> None:
        self._settings = qos
        self._runs = runs
        self._models = models
        self._capabilities = capabilities or {}

    def capabilities(self, model: str) -> Capabilities:
        """What ``model``'s engine can do."""
        return self._capabilities.get(model, Capabilities())

    def check_engine(self, model: str, given: RunInput, sampling: SamplingParams) -> None:
        """Sampling parameters, tools (offered, or calls in the conversation), a structured
        response format and a reasoning effort each need an engine that can do them
        (``engines/kinds.py``); refused, named, if the model's cannot."""
        param = self._unable(model, given, sampling)
        if param is not None:
            raise ValidationFailed(
                f"model {quoted(model)} cannot honour {param}",
                code="unsupported_parameter",
                param=param,
            )

    def serves(self, model: str, given: RunInput, sampling: SamplingParams) -> bool:
        """Whether ``model``'s engine honours everything the request asks (a downgrade
        must)."""
        return self._unable(model, given, sampling) is None

    def _unable(self, model: str, given: RunInput, sampling: SamplingParams) -> str | None:
        calls = any(m.tool_calls or m.role == "tool" for m in given.messages)
        return unable(self.capabilities(model), sampling, given.output, calls=calls)

    def validate(
        self, who: Principal, chat_id: str, req: SendRequest, key: str | None
    ) -> new_runs.NewRun:
        tier = self._settings.tier(who.tier)
        self.check_content(req.content)
        model = self.check_model(who.tier, tier, req.model, who)
        return new_runs.NewRun(
            user_id=who.user_id,
            chat_id=chat_id,
            content=req.content,
            model=model,
            tier=who.tier,
            priority=tier.priority,
            max_tokens=self.max_tokens(who.tier, tier, req.max_tokens),
            sampling=req.sampling,
            idempotency_key=key,
            request_hash=request_hash(chat_id, req) if key else None,
            traceparent=tracing.traceparent(),  # the worker's run.execute continues this trace
            attachment_ids=req.attachment_ids,
            tools=self.check_tools(tier, req.tools),
            tool_first=req.tool_first,
            api_key_id=who.key_id,
        )

    def check_tools(self, tier: TierSettings, asked: tuple[str, ...]) -> tuple[str, ...]:
        """The tools asked for, each one the tier allows (a 400 naming the first not)."""
        for name in asked:
            if name not in tier.tools:
                raise ValidationFailed(
                    f"the tool {quoted(name)} is not one your tier may use "
                    f"({', '.join(tier.tools) or 'none'})",
                    code="tool_not_allowed",
                    param="tools",
                )
        return asked

    def check_content(self, content: str) -> None:
        if not content.strip():
            raise ValidationFailed(
                "content must not be blank", code="invalid_content", param="content"
            )
        self.check_length(content, "content")

    def check_length(self, content: str, param: str) -> None:
        limit = self._runs.max_message_chars
        if len(content) > limit:
            raise ValidationFailed(
                f"{param} must be at most {limit} characters",
                code="content_too_long",
                param=param,
            )

    def allowed_models(self, tier_name: str) -> list[str]:
        """The models a user of this tier may send to, in the configured order."""
        tier = self._settings.tier(tier_name)
        return [m for m in self._models if _allows(tier, m)]

    def allows(self, tier_name: str, model: str) -> bool:
        """Whether a tier may use a model (any model: chat or embedding)."""
        return _allows(self._settings.tier(tier_name), model)

    def check_model(
        self, tier_name: str, tier: TierSettings, asked: str | None, who: Principal | None = None
    ) -> str:
        """The model asked for (or the default), if it is served, the tier allows it and
        the credential (an API key limited to some models) may use it."""
        model = asked or self._models[0]
        if model not in self._models:
            raise ValidationFailed(
                f"unknown model {quoted(model)}; available: {', '.join(self._models)}",
                code="model_not_found",
                param="model",
            )
        if not _allows(tier, model):
            raise PermissionDenied(
                f"the {tier_name} tier may not use model {quoted(model)}", code="model_not_allowed"
            )
        if who is not None and not who.may_use(model):
            raise PermissionDenied(
                f"this API key may not use model {quoted(model)}",
                code="model_not_allowed_for_key",
                param="model",
            )
        return model

    def max_tokens(self, tier_name: str, tier: TierSettings, asked: int | None) -> int:
        if asked is not None and asked > tier.max_output_tokens:
            raise ValidationFailed(
                f"max_tokens must be at most {tier.max_output_tokens} on the {tier_name} tier",
                code="max_tokens_too_large",
                param="max_tokens",
            )
        return asked or self._settings.default_output(tier)


def placed(new: new_runs.NewRun, chat: Chat) -> new_runs.NewRun:
    """A plain send goes after the branch shown."""
    if new.after == new_runs.ACTIVE_LEAF:
        return replace(new, after=chat.active_leaf_id)
    return new


def _allows(tier: TierSettings, model: str) -> bool:
    return "*" in tier.models or model in tier.models


async def place(s: AsyncSession, new: new_runs.NewRun, req: SendRequest) -> new_runs.NewRun:
    """Where a send goes on the chat's tree: an edit beside the message it edits (a new
    branch), a regenerated (or continued) answer beside the answer it replaces (under the
    same question, no new user message), else after the branch shown. NotFound for another
    chat's message."""
    assert new.chat_id is not None
    if req.continue_of is not None:
        return await _continued(s, new, req.continue_of)
    if req.edit_of is None and req.regenerate is None:
        return new
    wanted = req.edit_of if req.edit_of is not None else req.regenerate
    assert wanted is not None
    message = await chats.get_message(
        s, user_id=new.user_id, chat_id=new.chat_id, message_id=wanted
    )
    if req.edit_of is not None:
        if message.role is not MessageRole.USER:
            raise ValidationFailed(
                "only a user message can be edited", code="not_editable", param="edit_of"
            )
        return replace(new, after=message.parent_id)
    if message.role is not MessageRole.USER:  # an answer: made again for its question
        if message.parent_id is None:
            raise ValidationFailed(
                "this answer has no question", code="not_regenerable", param="message_id"
            )
        message = await chats.get_message(
            s, user_id=new.user_id, chat_id=new.chat_id, message_id=message.parent_id
        )
    return replace(new, answer_to=message.id, after=message.parent_id, content=message.content)


async def _continued(s: AsyncSession, new: new_runs.NewRun, answer_id: str) -> new_runs.NewRun:
    """A continued answer: beside the answer it continues, its text that answer's and more."""
    assert new.chat_id is not None
    answer = await chats.get_message(
        s, user_id=new.user_id, chat_id=new.chat_id, message_id=answer_id
    )
    ended = answer.status in (MessageStatus.COMPLETED, MessageStatus.CANCELLED)
    if answer.role is not MessageRole.ASSISTANT or answer.parent_id is None or not ended:
        raise ValidationFailed(
            "only an answer that has ended can be continued", code="not_continuable"
        )
    if not answer.content:
        raise ValidationFailed("this answer has no text to continue", code="not_continuable")
    question = await chats.get_message(
        s, user_id=new.user_id, chat_id=new.chat_id, message_id=answer.parent_id
    )
    return replace(
        new,
        answer_to=question.id,
        after=question.parent_id,
        content=question.content,
        continues=answer.id,
    )
