"""The events of a run's stream, and their SSE framing."""

from __future__ import annotations

from typing import Any

from parley.bus.interface import EventKind, RunEvent, StreamEntry
from parley.domain import RunStatus
from parley.store.schema import Run


def status_event(run_id: str, status: RunStatus) -> RunEvent:
    return RunEvent(EventKind.STATUS, {"run_id": run_id, "status": status.value})


def made_event(run: Run) -> RunEvent:
    """A new run's first event (queued): which model serves it, and, for a run a busy
    service downgraded, the model asked for."""
    data = {"run_id": run.id, "status": RunStatus.QUEUED.value, "model": run.model}
    if run.downgraded_from is not None:
        data["downgraded_from"] = run.downgraded_from
    return RunEvent(EventKind.STATUS, data)


def delta_event(text: str, tokens: int = 1, *, replace: bool = False) -> RunEvent:
    data: dict[str, Any] = {"text": text, "tokens": tokens}
    if replace:
        data["replace"] = True
    return RunEvent(EventKind.DELTA, data)


def error_event(code: str, message: str, *, retry_after: float | None = None) -> RunEvent:
    data: dict[str, Any] = {"code": code, "message": message}
    if retry_after is not None:
        data["retry_after"] = retry_after
    return RunEvent(EventKind.ERROR, data)


def done_event(run: Run) -> RunEvent:
    return RunEvent(
        EventKind.DONE,
        {
            "run_id": run.id,
            "message_id": run.assistant_message_id,
            "status": run.status.value,
            "finish_reason": run.finish_reason,
            "usage": usage(run),
        },
    )


def usage(run: Run) -> dict[str, Any]:
    """OpenAI's usage object; ``prompt_tokens_details.cached_tokens`` once the engine said
    how much of the prompt its prefix cache held."""
    prompt = run.prompt_tokens or 0
    completion = run.completion_tokens or 0
    cached = run.cached_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": None if cached is None else {"cached_tokens": cached},
    }


def sse_frame(entry: StreamEntry) -> str:
    """An entry as an SSE event; one without an id (the relay's own, not the stream's)
    has no ``id:`` line, so a client's Last-Event-ID stays the stream's last."""
    data = entry.event.json
    head = f"id: {entry.id}\n" if entry.id else ""
    return f"{head}event: {entry.event.kind.value}\ndata: {data}\n\n"


def sse_ping() -> str:
    return ": ping\n\n"
