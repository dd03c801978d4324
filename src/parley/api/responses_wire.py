"""A run as OpenAI's Responses API shows it: whole, one ``response`` object; streamed, its
semantic events (``response.created``, ``response.in_progress``, then per output item
``response.output_item.added`` … ``response.output_item.done`` with the text, reasoning and
call-argument deltas between, then ``response.completed`` — or ``response.incomplete``,
``response.failed``), each with its ``sequence_number``.

A run's output items come in the order the model made them: its reasoning (an item of type
``reasoning``), its text (a ``message``), its calls (one ``function_call`` each, the call's
id as ``call_id``). The stream's events are read with ``openai_wire.Answer``, as a chat
completion's are.
"""

from __future__ import annotations

import json
import time
from typing import Any

from parley.api.openai_wire import Answer
from parley.engines.tools import assembled
from parley.openai.responses import ResponsesRequest
from parley.runs.events import DeltaEvent, ReasoningEvent, StreamEvent, ToolCallEvent

Json = dict[str, Any]


def response_id(run_id: str) -> str:
    return f"resp_{run_id}"


def echo(body: ResponsesRequest) -> Json:
    """The request's settings as a response repeats them."""
    text = body.text.model_dump(by_alias=True, exclude_none=True) if body.text else None
    return {
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "parallel_tool_calls": True
        if body.parallel_tool_calls is None
        else body.parallel_tool_calls,
        "previous_response_id": None,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
        "store": False,
        "temperature": body.temperature,
        "text": text or {"format": {"type": "text"}},
        "tool_choice": body.tool_choice or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or ()],
        "top_p": body.top_p,
        "truncation": "disabled",
        "metadata": {},
        "user": body.user,
    }


def status_of(answer: Answer) -> tuple[str, Json | None]:
    """The response's status and its ``incomplete_details``."""
    if answer.error is not None:
        return "failed", None
    reason = answer.finish_reason
    if reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    if reason == "abort":
        return "cancelled", None
    return "completed", None


def usage_of(answer: Answer) -> Json:
    u = answer.usage
    cached = u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else 0
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},  # counted with the output
        "total_tokens": u.total_tokens,
    }


def response(run_id: str, model: str, created: int, settings: Json, answer: Answer | None) -> Json:
    """The response object: in progress (no answer yet), or as the run ended."""
    out: Json = {
        "id": response_id(run_id),
        "object": "response",
        "created_at": created,
        "model": model,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "output": [],
        "usage": None,
        **settings,
    }
    if answer is not None:
        status, details = status_of(answer)
        out.update(status=status, incomplete_details=details, output=output_items(run_id, answer))
        out["usage"] = usage_of(answer)
        if answer.error is not None:
            out["error"] = {"code": _error_code(answer.error.code), "message": answer.error.message}
    return out


def _error_code(code: str) -> str:
    return "rate_limit_exceeded" if code == "budget_exhausted" else "server_error"


def output_items(run_id: str, answer: Answer) -> list[Json]:
    items: list[Json] = []
    if answer.reasoning:
        items.append(reasoning_item(run_id, "".join(answer.reasoning), "completed"))
    text = "".join(answer.text)
    if text or not (answer.calls or answer.reasoning):
        items.append(message_item(run_id, text, "completed"))
    for i, call in enumerate(assembled(answer.calls)):
        items.append(call_item(run_id, i, call.id, call.name, call.arguments, "completed"))
    return items


def reasoning_item(run_id: str, text: str | None, status: str) -> Json:
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {
        "type": "reasoning",
        "id": f"rs_{run_id}",
        "summary": [],
        "content": content,
        "status": status,
    }


def message_item(run_id: str, text: str | None, status: str) -> Json:
    content = [] if text is None else [_text_part(text)]
    return {
        "type": "message",
        "id": f"msg_{run_id}",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _text_part(text: str) -> Json:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def call_item(
    run_id: str, index: int, call_id: str, name: str, arguments: str, status: str
) -> Json:
    return {
        "type": "function_call",
        "id": f"fc_{run_id}_{index}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


class ResponseEvents:
    """The semantic events of one streamed response."""

    def __init__(self, run_id: str, model: str, settings: Json) -> None:
        self.run_id, self.model, self.settings = run_id, model, settings
        self.created = int(time.time())
        self.answer = Answer()
        self._sequence = 0
        self._outputs = 0  # output items opened so far
        self._open: str | None = None  # the kind of the item being written
        self._text: list[str] = []  # the open item's text (or arguments) so far
        self._call: tuple[int, str, str] = (0, "", "")  # the open call's index, id, name

    def _event(self, kind: str, **fields: Any) -> bytes:
        body = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return f"event: {kind}\ndata: {json.dumps(body, ensure_ascii=False)}\n\n".encode()

    def start(self) -> bytes:
        now = response(self.run_id, self.model, self.created, self.settings, None)
        return self._event("response.created", response=now) + self._event(
            "response.in_progress", response=now
        )

    def take(self, event: StreamEvent) -> tuple[bytes, bool]:
        """The events one stream event makes, and whether it ended the response."""
        done = self.answer.take_event(event)
        if done:
            empty = b"" if self._outputs else self._open_as("message")  # an empty answer
            return empty + self._close() + self._end(), True
        match event:
            case DeltaEvent(text=text) if text:
                return self._open_as("message") + self._text_delta(text), False
            case ReasoningEvent(text=text) if text:
                return self._open_as("reasoning") + self._reasoning_delta(text), False
            case ToolCallEvent():
                return self._call_fragment(event), False
        return b"", False

    @property
    def _index(self) -> int:
        return self._outputs - 1

    def _open_as(self, kind: str) -> bytes:
        if self._open == kind:
            return b""
        out = self._close()
        self._open, self._text = kind, []
        self._outputs += 1
        if kind == "message":
            item = message_item(self.run_id, None, "in_progress")
            part = _text_part("")
        else:
            item = reasoning_item(self.run_id, None, "in_progress")
            part = {"type": "reasoning_text", "text": ""}
        added = self._event("response.output_item.added", output_index=self._index, item=item)
        return (
            out
            + added
            + self._event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=self._index,
                content_index=0,
                part=part,
            )
        )

    def _text_delta(self, text: str) -> bytes:
        self._text.append(text)
        return self._event(
            "response.output_text.delta",
            item_id=f"msg_{self.run_id}",
            output_index=self._index,
            content_index=0,
            delta=text,
            logprobs=[],
        )

    def _reasoning_delta(self, text: str) -> bytes:
        self._text.append(text)
        return self._event(
            "response.reasoning_text.delta",
            item_id=f"rs_{self.run_id}",
            output_index=self._index,
            content_index=0,
            delta=text,
        )

    def _call_fragment(self, call: ToolCallEvent) -> bytes:
        out = b""
        if call.id is not None or self._open != "call":
            out += self._close()
            self._open, self._text = "call", []
            self._outputs += 1
            self._call = (call.index, call.id or "", call.name or "")
            item = call_item(self.run_id, call.index, *self._call[1:], "", "in_progress")
            out += self._event("response.output_item.added", output_index=self._index, item=item)
        if call.arguments:
            self._text.append(call.arguments)
            out += self._event(
                "response.function_call_arguments.delta",
                item_id=f"fc_{self.run_id}_{self._call[0]}",
                output_index=self._index,
                delta=call.arguments,
            )
        return out

    def _close(self) -> bytes:
        """The done events of the item being written."""
        kind, text = self._open, "".join(self._text)
        self._open = None
        if kind == "call":
            return self._close_call(text)
        return b"" if kind is None else self._close_part(kind, text)

    def _close_part(self, kind: str, text: str) -> bytes:
        index, run = self._index, self.run_id
        extra: Json = {}
        if kind == "message":
            item_id, part, item = (
                f"msg_{run}",
                _text_part(text),
                message_item(run, text, "completed"),
            )
            done, extra = "response.output_text.done", {"logprobs": []}
        else:
            item_id, item = f"rs_{run}", reasoning_item(run, text, "completed")
            part, done = {"type": "reasoning_text", "text": text}, "response.reasoning_text.done"
        where: Json = {"item_id": item_id, "output_index": index, "content_index": 0}
        return (
            self._event(done, **where, text=text, **extra)
            + self._event("response.content_part.done", **where, part=part)
            + self._event("response.output_item.done", output_index=index, item=item)
        )

    def _close_call(self, arguments: str) -> bytes:
        call_index, call_id, name = self._call
        item = call_item(self.run_id, call_index, call_id, name, arguments, "completed")
        index = self._index
        return self._event(
            "response.function_call_arguments.done",
            item_id=item["id"],
            output_index=index,
            name=name,
            arguments=arguments,
        ) + self._event("response.output_item.done", output_index=index, item=item)

    def _end(self) -> bytes:
        whole = response(self.run_id, self.model, self.created, self.settings, self.answer)
        status = whole["status"]
        # a cancelled response (stopped through /api/runs) ends as an incomplete one
        kind = {"completed": "response.completed", "failed": "response.failed"}.get(
            status, "response.incomplete"
        )
        return self._event(kind, response=whole)
