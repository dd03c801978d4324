"""Embedding models: ``POST /v1/embeddings`` sent on to a fleet of OpenAI-compatible servers.

An embedding is one short request with no stream, so it is not a run: the api process asks a
replica itself (replicas in turn, the next one tried when one cannot be reached or answers a
5xx), with the request's fields as given and the model's upstream name. ``Embedder.embed``
returns the server's answer under parley's model name, and the input tokens it counted
(what the caller's budget is charged; ``estimated_tokens`` is what is reserved first).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any

import httpx

from parley.engines.settings import EmbeddingModelSettings
from parley.errors import InvalidRequest, Unavailable

log = logging.getLogger(__name__)

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Embedded:
    body: Json  # OpenAI's embeddings list, under parley's model name
    tokens: int  # input tokens, as the server counted them (estimated if it did not say)


def estimated_tokens(texts: str | list[Any]) -> int:
    """A conservative count of the input's tokens (a token list counts itself)."""
    items = [texts] if isinstance(texts, str) else texts
    total = 0
    for item in items:
        if isinstance(item, str):
            total += len(item) // 3 + 1
        elif isinstance(item, list):
            total += len(item)
        else:
            total += 1
    return total


class Embedder:
    """The embedding models and their replicas."""

    def __init__(
        self,
        models: list[EmbeddingModelSettings],
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._models = {m.name: m for m in models}
        self._turns = {m.name: itertools.cycle(range(len(m.replicas))) for m in models}
        self._client = httpx.AsyncClient(transport=transport)

    def names(self) -> list[str]:
        return list(self._models)

    def serves(self, model: str) -> bool:
        return model in self._models

    def max_inputs(self, model: str) -> int:
        return self._models[model].max_inputs

    async def close(self) -> None:
        await self._client.aclose()

    async def embed(self, model: str, body: Json) -> Embedded:
        """The vectors of ``body``'s input; InvalidRequest when the server refuses it,
        Unavailable when no replica answers."""
        settings = self._models[model]
        sent = {**body, "model": settings.upstream_model or model}
        first = next(self._turns[model])
        count = len(settings.replicas)
        for attempt in range(count):
            replica = settings.replicas[(first + attempt) % count]
            answer = await self._ask(settings, replica.base_url, sent)
            if answer is not None:
                return self._embedded(model, answer, body)
        raise Unavailable(
            f"no server of embedding model {model!r} answered", code="engine_unavailable"
        )

    async def _ask(self, settings: EmbeddingModelSettings, base: str, body: Json) -> Json | None:
        key = settings.resolved_api_key()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        url = f"{base.rstrip('/')}/embeddings"
        try:
            r = await self._client.post(
                url, json=body, headers=headers, timeout=settings.timeout_seconds
            )
        except httpx.HTTPError as e:
            log.warning("embedding server %s: %s", url, e)
            return None
        if r.status_code >= 500:
            log.warning("embedding server %s answered %d", url, r.status_code)
            return None
        answer: Any = _json(r)
        if r.status_code >= 400 or not isinstance(answer, dict):
            raise InvalidRequest(
                f"the embedding server refused the request: {_message(answer, r)}",
                code="upstream_rejected",
            )
        return answer

    @staticmethod
    def _embedded(model: str, answer: Json, body: Json) -> Embedded:
        usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else None
        tokens = usage.get("prompt_tokens") if usage else None
        if not isinstance(tokens, int):
            tokens = estimated_tokens(body.get("input", ""))
        data = answer.get("data") if isinstance(answer.get("data"), list) else []
        out = {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return Embedded(out, tokens)


def _json(r: httpx.Response) -> Any:
    try:
        return r.json()
    except ValueError:
        return None


def _message(answer: Any, r: httpx.Response) -> str:
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        return str(answer["error"].get("message", ""))[:500]
    return f"HTTP {r.status_code}"
