"""Ranking a chat's older messages by embedding similarity to a new one.

The vectors come from an OpenAI-compatible endpoint (``POST {base_url}/embeddings``) and are
cached per message (``store/embeddings.py``): a retrieval embeds the query and at most
``MAX_NEW_PER_CALL`` of the chat's messages that have no vector yet (the newest first), so
a long chat is covered over a few calls and never stalls one. Every failure of the endpoint
is an ``EmbeddingsError``, for the caller to fall back to full-text search. The endpoint is
never waited on inside a transaction: reads and writes each take a short one of their own.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from parley.context.settings import EmbeddingsSettings
from parley.store import embeddings as cache
from parley.store.database import Database
from parley.store.schema import Message

log = logging.getLogger(__name__)

MAX_NEW_PER_CALL = 256  # messages embedded by one retrieval, at most
MAX_CANDIDATES = 5000  # the chat's newest messages one retrieval ranks, at most
INPUT_MAX_CHARS = 2000  # of a text sent to be embedded (an embedding model's window is small)


class EmbeddingsError(Exception):
    """The endpoint failed: unreachable, timed out, refused, or answered nonsense."""


class EmbeddingsClient:
    """An OpenAI-compatible embeddings endpoint, one connection pool."""

    def __init__(
        self, settings: EmbeddingsSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.settings = settings
        key = settings.resolved_api_key()
        self._http = httpx.AsyncClient(
            base_url=settings.base_url.rstrip("/"),
            timeout=settings.timeout_seconds,
            headers={"Authorization": f"Bearer {key}"} if key else None,
            transport=transport,
        )

    @property
    def model(self) -> str:
        return self.settings.model

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, in requests of at most ``max_batch`` inputs."""
        vectors: list[list[float]] = []
        size = self.settings.max_batch
        for start in range(0, len(texts), size):
            vectors.extend(await self._batch(texts[start : start + size]))
        return vectors

    async def _batch(self, texts: Sequence[str]) -> list[list[float]]:
        body = {"model": self.model, "input": [t[:INPUT_MAX_CHARS] for t in texts]}
        try:
            response = await self._http.post("/embeddings", json=body)
        except httpx.HTTPError as e:
            raise EmbeddingsError(f"embeddings endpoint unreachable: {e!r}") from e
        if not response.is_success:
            raise EmbeddingsError(f"embeddings endpoint answered {response.status_code}")
        try:
            return _vectors(response.json(), len(texts))
        except ValueError as e:  # JSON's own errors are ValueErrors too
            raise EmbeddingsError(f"embeddings endpoint answered nonsense: {e}") from e

    async def close(self) -> None:
        await self._http.aclose()


def _vectors(payload: Any, count: int) -> list[list[float]]:
    """``data[i].embedding`` ordered by ``index``: ``count`` vectors of one length of finite
    numbers, or ValueError."""
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        raise ValueError("no data list")
    items = payload["data"]
    if len(items) != count or not all(isinstance(item, dict) for item in items):
        raise ValueError(f"{len(items)} items for {count} inputs")
    by_index = sorted(items, key=lambda item: _index(item, count))
    if [_index(item, count) for item in by_index] != list(range(count)):
        raise ValueError("indexes are not 0..n-1")
    vectors = [_embedding(item) for item in by_index]
    if len({len(v) for v in vectors}) > 1:
        raise ValueError("vectors of different lengths")
    return vectors


def _index(item: dict[str, Any], count: int) -> int:
    index = item.get("index")
    if type(index) is not int or not 0 <= index < count:
        raise ValueError(f"bad index {index!r}")
    return index


def _embedding(item: dict[str, Any]) -> list[float]:
    values = item.get("embedding")
    if not isinstance(values, list) or not values:
        raise ValueError("no embedding")
    if not all(type(x) in (int, float) and math.isfinite(x) for x in values):
        raise ValueError("an embedding holds something other than finite numbers")
    return [float(x) for x in values]


async def rank(
    db: Database,
    client: EmbeddingsClient,
    *,
    user_id: str,
    chat_id: str,
    query: str,
    before_seq: int,
    limit: int,
) -> list[Message]:
    """The chat's messages before ``before_seq`` that go into prompts, most similar to
    ``query`` first; missing vectors embedded and cached first. EmbeddingsError if the
    endpoint fails.

    No transaction is held while the endpoint is waited on: the candidates and their
    cached vectors are read in one short transaction, the new vectors written in another
    (on SQLite every transaction holds the process's one write lock)."""
    if limit <= 0 or not query.strip():
        return []
    async with db.transaction() as s:
        found = await cache.candidates(
            s,
            user_id=user_id,
            chat_id=chat_id,
            before_seq=before_seq,
            model=client.model,
            limit=MAX_CANDIDATES,
        )
    if not found:
        return []
    missing = [c.message for c in found if c.vector is None][:MAX_NEW_PER_CALL]
    embedded = await client.embed([query, *(m.content for m in missing)])
    query_vector = np.asarray(embedded[0], dtype=np.float32)
    new = [(m, np.asarray(v, dtype=np.float32)) for m, v in zip(missing, embedded[1:], strict=True)]
    await _keep(db, client.model, new)
    known = {c.message.id: c.vector for c in found if c.vector is not None}
    known.update((m.id, v) for m, v in new)
    ranked = [c.message for c in found if _fits(known.get(c.message.id), query_vector)]
    order = _best(query_vector, [known[m.id] for m in ranked], limit)
    return [ranked[i] for i in order]


def _fits(vector: cache.Vector | None, query: cache.Vector) -> bool:
    """Whether a message's vector can be compared with the query's (one model's vectors
    all have one length; a cached one of another length is ignored)."""
    return vector is not None and vector.shape == query.shape


async def _keep(db: Database, model: str, vectors: list[tuple[Message, cache.Vector]]) -> None:
    """Cache the new vectors in a short transaction of their own: any failure to write
    (a message deleted meanwhile, say) undoes it alone and loses these vectors (embedded
    again next time), never the ranking."""
    if not vectors:
        return
    try:
        async with db.transaction() as s:
            await cache.store(s, model=model, vectors=vectors)
    except Exception:
        log.warning("embeddings: could not cache %d vectors", len(vectors), exc_info=True)


def _best(query: cache.Vector, vectors: list[cache.Vector], limit: int) -> list[int]:
    """Indexes of ``vectors`` by cosine similarity to ``query``, best first, at most
    ``limit`` (ties: the earlier, i.e. newer, first)."""
    if not vectors:
        return []
    matrix = np.stack(vectors)
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(query) or 1.0)
    similarity = (matrix @ query) / np.where(norms == 0, 1.0, norms)
    order = np.argsort(-similarity, kind="stable")
    return [int(i) for i in order[:limit]]
