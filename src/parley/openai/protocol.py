"""OpenAI's chat-completions wire format, the one module of its types.

Three places speak it: the upstream engine (a client of vLLM, SGLang, llama.cpp, Ollama or a
hosted API), ``parley engine serve`` (a server of the built-in and fake engines, and of
``/v1/moderations`` by the rule set) and the ``/v1`` API for programs; the safety
classifiers speak its moderations and chat completions as clients. Requests are read
leniently (unknown fields are ignored, as OpenAI-compatible servers do); what parley writes
carries only the fields it sets.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from parley.engines.sampling import SamplingParams
from parley.engines.tools import (
    Effort,
    FunctionName,
    OutputSpec,
    ResponseFormat,
    ToolChoice,
    ToolSpec,
    ToolUse,
)
from parley.json_types import Flag, Integer, Number

Role = Literal["system", "user", "assistant", "developer", "tool"]
FinishReasonName = Literal["stop", "length", "abort", "content_filter", "tool_calls"]


class _Lenient(BaseModel):
    """A body read from the wire: fields parley does not know are ignored."""

    model_config = ConfigDict(extra="ignore")


class ContentPart(_Lenient):
    """One part of a message's content given as a list (``{"type": "text", "text": …}``)."""

    type: str
    text: str | None = None


class WireFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: FunctionName
    arguments: str


class WireToolCall(BaseModel):
    """A call an assistant message carries back (the model made it in an earlier turn)."""

    model_config = ConfigDict(extra="forbid")
    id: Annotated[str, Field(min_length=1, max_length=200)]
    type: Literal["function"] = "function"
    function: WireFunction


class WireMessage(BaseModel):
    """One message of a request; a field it does not name is kept in ``model_extra`` and
    refused by name (``openai/params.py``)."""

    model_config = ConfigDict(extra="allow")
    role: Role
    content: str | list[ContentPart] | None = ""
    name: str | None = None
    tool_calls: Annotated[list[WireToolCall], Field(max_length=128)] | None = None
    tool_call_id: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    refusal: str | None = None

    @property
    def text(self) -> str:
        """The message's text: its content, or its text parts joined (None is empty)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text or "" for part in self.content if part.type == "text")

    @property
    def non_text_parts(self) -> list[str]:
        """The types of the parts that are not text (images, audio, files …)."""
        if not isinstance(self.content, list):
            return []
        return [part.type for part in self.content if part.type != "text"]


class StreamOptions(_Lenient):
    include_usage: Flag = False


Bias = Annotated[Number, Field(ge=-100, le=100)]
TokenId = Annotated[str, Field(pattern=r"^[0-9]{1,9}$")]  # logit_bias's keys
Penalty = Annotated[Number, Field(ge=-2, le=2)]


class ChatCompletionRequest(BaseModel):
    """Every field of OpenAI's chat-completions request, typed; a field it does not name is
    kept in ``model_extra`` for the caller to refuse by name (``openai/params.py``)."""

    model_config = ConfigDict(extra="allow")

    model: Annotated[str, Field(min_length=1, max_length=200)]
    messages: Annotated[list[WireMessage], Field(min_length=1)]
    max_tokens: Annotated[Integer, Field(gt=0)] | None = None
    max_completion_tokens: Annotated[Integer, Field(gt=0)] | None = None
    temperature: Annotated[Number, Field(ge=0, le=2)] | None = None
    top_p: Annotated[Number, Field(gt=0, le=1)] | None = None
    # torch seeds a generator from any value in [-2**63, 2**64); parley honours int64
    seed: Annotated[Integer, Field(ge=-(2**63), le=2**63 - 1)] | None = None
    stop: str | list[str] | None = None
    stream: Flag = False
    stream_options: StreamOptions | None = None
    n: Annotated[Integer, Field(ge=1)] | None = None
    user: Annotated[str, Field(max_length=256)] | None = None
    safety_identifier: Annotated[str, Field(max_length=256)] | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    logit_bias: Annotated[dict[TokenId, Bias], Field(max_length=300)] | None = None
    # vLLM's and llama.cpp's extras
    top_k: Annotated[Integer, Field(ge=-1)] | None = None
    min_p: Annotated[Number, Field(ge=0, le=1)] | None = None
    # parley's /v1: keep the conversation and its answer as a chat of the caller's
    store: Flag = False
    # fields parley does not honour yet: named, so that a request setting one is refused
    # with its name (openai/params.py), never served without it
    tools: Annotated[list[ToolSpec], Field(min_length=1, max_length=128)] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: Flag | None = None
    functions: list[object] | None = None
    function_call: str | dict[str, object] | None = None
    logprobs: Flag | None = None
    top_logprobs: Annotated[Integer, Field(ge=0, le=20)] | None = None
    response_format: ResponseFormat | None = None
    reasoning_effort: Effort | None = None
    verbosity: str | None = None
    modalities: list[str] | None = None
    audio: dict[str, object] | None = None
    prediction: dict[str, object] | None = None
    web_search_options: dict[str, object] | None = None
    service_tier: str | None = None
    metadata: dict[str, object] | None = None
    prompt_cache_key: str | None = None
    chat_template_kwargs: dict[str, object] | None = None

    def output_spec(self) -> OutputSpec:
        """Tools, response format and reasoning effort, as a run keeps them."""
        tools = None
        if self.tools:
            choice, parallel = self.tool_choice, self.parallel_tool_calls
            tools = ToolUse(tools=tuple(self.tools), choice=choice, parallel=parallel)
        format_ = self.response_format
        return OutputSpec(
            tools=tools,
            response_format=format_ if format_ is not None and format_.structured else None,
            reasoning_effort=self.reasoning_effort,
        )

    @property
    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def output_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def sampling_params(self) -> SamplingParams:
        """The request's sampling, as a run stores it and every engine reads it: the one
        mapping from OpenAI's fields (as vLLM's ``to_sampling_params``)."""
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            seed=self.seed,
            stop=tuple(self.stop_strings),
            frequency_penalty=self.frequency_penalty or None,
            presence_penalty=self.presence_penalty or None,
            logit_bias={int(k): v for k, v in (self.logit_bias or {}).items()} or None,
            top_k=None if self.top_k in (None, -1, 0) else self.top_k,
            min_p=self.min_p or None,
            logprobs=self.logprobs or None,
            top_logprobs=self.top_logprobs if self.logprobs else None,
        )


class PromptTokensDetails(_Lenient):
    cached_tokens: int = 0  # of the prompt, found in the server's prefix cache


class CompletionUsage(_Lenient):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class ChunkFunction(_Lenient):
    name: str | None = None
    arguments: str | None = None


class ChunkToolCall(_Lenient):
    """A fragment of a streamed tool call: its index; its id, type and name once."""

    index: int = 0
    id: str | None = None
    type: str | None = None
    function: ChunkFunction | None = None


class ChunkDelta(_Lenient):
    role: Role | None = None
    content: str | None = None
    # reasoning apart from the answer: vLLM's and llama.cpp's name, and vLLM's newer one
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ChunkToolCall] | None = None

    @property
    def reasoning_text(self) -> str:
        return self.reasoning_content or self.reasoning or ""


class ChoiceLogprobs(_Lenient):
    """A choice's ``logprobs``: its tokens', as ``engines.interface.TokenLogprob.wire``."""

    content: list[dict[str, Any]] | None = None


class ChunkChoice(_Lenient):
    index: int = 0
    delta: ChunkDelta = Field(default_factory=ChunkDelta)
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(_Lenient):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChunkChoice] = Field(default_factory=list)
    usage: CompletionUsage | None = None


class AssistantMessage(_Lenient):
    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: str | None = None  # vLLM's and llama.cpp's name for it
    tool_calls: list[dict[str, object]] | None = None


class CompletionChoice(_Lenient):
    index: int = 0
    message: AssistantMessage
    finish_reason: str | None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletion(_Lenient):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage


class ModelCapabilities(_Lenient):
    """What a model's engine can do (parley's addition to OpenAI's model object)."""

    tools: bool = False
    structured_output: bool = False
    reasoning: bool = False
    vision: bool = False
    logprobs: bool = False


class ModelCard(_Lenient):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "parley"
    # parley's additions: what it is for, what it can do, the tokens it reads
    task: Literal["chat", "embedding"] = "chat"
    capabilities: ModelCapabilities | None = None
    context_window: int | None = None  # the tokens it reads, prompt and answer


Text = Annotated[str, Field(min_length=1)]
Tokens = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class EmbeddingsRequest(BaseModel):
    """``POST /v1/embeddings``: every field of OpenAI's; one it does not name is kept in
    ``model_extra`` and refused by name."""

    model_config = ConfigDict(extra="allow")

    model: Annotated[str, Field(min_length=1, max_length=200)]
    input: (
        Text
        | Annotated[list[Text], Field(min_length=1)]
        | Tokens
        | Annotated[list[Tokens], Field(min_length=1)]
    )
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: Annotated[Integer, Field(gt=0)] | None = None
    user: Annotated[str, Field(max_length=256)] | None = None

    @property
    def inputs(self) -> int:
        """How many texts (or token lists) it asks to embed."""
        items = self.input
        return 1 if isinstance(items, str) or isinstance(items[0], int) else len(items)


class ModelCardList(_Lenient):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ModerationRequest(_Lenient):
    """``POST /v1/moderations``: one text or several."""

    input: str | Annotated[list[str], Field(min_length=1)]
    model: str | None = None

    @property
    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class ModerationResult(_Lenient):
    flagged: bool
    categories: dict[str, bool] = Field(default_factory=dict)
    category_scores: dict[str, float] = Field(default_factory=dict)


class ModerationResponse(_Lenient):
    id: str = ""
    model: str = ""
    results: Annotated[list[ModerationResult], Field(min_length=1)]


class ErrorDetail(_Lenient):
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None


class ErrorResponse(_Lenient):
    error: ErrorDetail


def error_message(body: object) -> str | None:
    """The message of an OpenAI-style error body (``{"error": {"message": ...}}``), or of the
    looser shapes servers send (``{"error": "..."}``, ``{"message": ...}``, ``{"detail": ...}``)."""
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    for value in (error, body.get("message"), body.get("detail")):
        if isinstance(value, str) and value:
            return value
    return None


DONE = "[DONE]"


def sse_data(payload: BaseModel | str) -> bytes:
    """One server-sent event carrying ``payload`` (a model as JSON, or ``[DONE]``)."""
    text = payload if isinstance(payload, str) else payload.model_dump_json(exclude_none=True)
    return f"data: {text}\n\n".encode()
