"""A moderation endpoint that misbehaves one way, for the classifiers' fail-mode tests.

    python -m tests.safety.moderation_server MODE PORT

Modes (``POST /v1/moderations`` and ``POST /v1/chat/completions``):

* ``slow``: answers "allowed" (and "safe") after 3 s;
* ``error500``: a 500 with an OpenAI error body;
* ``garbage``: a 200 whose body is not a moderation result (nor a completion).

``GET /count`` answers the number of requests taken.
"""

from __future__ import annotations

import asyncio
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

SLOW_SECONDS = 3.0


def app(mode: str) -> Starlette:
    taken = [0]

    async def judge(request: Request) -> Response:
        taken[0] += 1
        await request.body()
        if mode == "error500":
            return JSONResponse({"error": {"message": "the classifier is down"}}, 500)
        if mode == "garbage":
            return JSONResponse({"surprise": True})
        await asyncio.sleep(SLOW_SECONDS)
        if request.url.path.endswith("/moderations"):
            return JSONResponse({"id": "m", "model": "slow", "results": [{"flagged": False}]})
        message = {"role": "assistant", "content": "safe"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return JSONResponse(
            {"id": "c", "model": "slow", "created": 0, "choices": [choice], "usage": {}}
        )

    async def count(_: Request) -> Response:
        return JSONResponse({"count": taken[0]})

    return Starlette(
        routes=[
            Route("/v1/moderations", judge, methods=["POST"]),
            Route("/v1/chat/completions", judge, methods=["POST"]),
            Route("/count", count, methods=["GET"]),
        ]
    )


if __name__ == "__main__":
    uvicorn.run(app(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
