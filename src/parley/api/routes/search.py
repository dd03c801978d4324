"""Search across all of the user's chats: titles and messages (``store/chat_search.py``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from parley.api.deps import CursorQuery, LimitDep, PrincipalDep, ServicesDep
from parley.api.routes import AUTHED, errors
from parley.store import chat_search

router = APIRouter(prefix="/api/search", tags=["search"])


class SearchHit(BaseModel):
    chat_id: str
    chat_title: str
    message_id: str | None = Field(description="None: the chat's title matched.")
    seq: int | None = Field(description="The message's place in its chat.")
    role: str | None
    snippet: str = Field(description="Plain text (render it as text, never as markup).")
    highlights: list[tuple[int, int]] = Field(
        description="[start, end) of each matched word in snippet, in Unicode code points."
    )
    created_at: datetime = Field(
        description="The message's creation; for a title, the chat's last activity."
    )
    archived: bool = Field(
        description="The chat is archived: its title matched; its messages are searched "
        "again only once it is restored (a new message in it restores it)."
    )


class SearchResults(BaseModel):
    object: str = "list"
    data: list[SearchHit]
    next_cursor: str | None


QueryText = Annotated[
    str,
    Query(
        max_length=chat_search.MAX_QUERY_CHARS * 4,  # longer: 422; then 400 query_too_long
        description="Words to find; every word must match (stemmed: 'runs' finds 'running').",
    ),
]


@router.get("", response_model=SearchResults, responses=errors(400, *AUTHED, 422))
async def search(
    who: PrincipalDep,
    svc: ServicesDep,
    limit: LimitDep,
    q: QueryText = "",
    cursor: CursorQuery = None,
) -> SearchResults:
    """The user's chat titles and messages matching every word of ``q``: best match first,
    then newest first, paged by cursor. Archived chats are found by title only."""
    async with svc.reads.session(who.user_id) as s:
        page = await chat_search.search_chats(
            s, user_id=who.user_id, query=q, limit=limit, cursor=cursor, cursors=svc.cursors
        )
    hits = [SearchHit.model_validate(h, from_attributes=True) for h in page.items]
    return SearchResults(data=hits, next_cursor=page.next_cursor)
