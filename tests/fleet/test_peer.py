"""parley in front of a third-party OpenAI-compatible server: llama.cpp's `llama-server`
serving the bundled SmolLM2-135M-Instruct GGUF: a chat answered, a stop that frees the
server's slot, and a replica that dies while another serves on.

The peer is built from source by `bench/peers/llama_server.sh` (minutes of C++; never a
dependency of parley): `make peer-test` (part of `make test`, so of CI) builds it once per
CPU into a cache outside the clone and runs this module with ``LLAMA_BIN`` naming the
binary (marked ``peer``: the main, parallel run deselects it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fleet.conftest import Fleet
from tests.processes import free_port
from tests.runs.helpers import send_json, stored_message, wait_run
from tests.waiting import eventually, eventually_sync

REPO = Path(__file__).resolve().parents[2]
LLAMA_SERVER = Path(os.environ.get("LLAMA_BIN", REPO / "build" / "peers" / "llama-server"))
MODEL = "SmolLM2-135M-Instruct"
# a busy 2-core machine can stall llama.cpp's spinning threads for seconds between tokens
PATIENT = {"first_token_timeout_seconds": 60, "idle_timeout_seconds": 30}

pytestmark = [pytest.mark.slow, pytest.mark.peer]


@dataclass(frozen=True)
class Llama:
    url: str
    log: Path
    proc: subprocess.Popen[bytes]

    def cancels(self) -> int:
        """Requests llama-server has cancelled because their client left."""
        return self.log.read_text(errors="replace").count("stop: cancel task")


@contextlib.contextmanager
def llama_server(folder: Path, threads: int = 2, *args: str) -> Iterator[Llama]:
    """One llama-server on a port of its own, serving the bundled model (4 slots)."""
    assert LLAMA_SERVER.exists(), f"no {LLAMA_SERVER}: `make peer-test` builds it"
    port = free_port()
    log = folder / f"llama-server-{port}.log"
    env = {
        "PATH": "/usr/bin:/bin",
        "LLAMA_SLOTS": "4",
        "LLAMA_THREADS": str(threads),
        "LLAMA_BIN": str(LLAMA_SERVER),
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(REPO / "bench/peers/llama_server.sh"), "serve", str(port), *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                return httpx.get(f"{base}/health", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        try:
            eventually_sync(ready, "llama-server to load the model", timeout=120)
            yield Llama(f"{base}/v1", log, proc)
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=30)


def _tool_template() -> list[str]:
    found = sorted(LLAMA_SERVER.parent.glob("src/*/llama.cpp/models/templates/Qwen-Qwen2.5-7B-*"))
    return ["--jinja", *(["--chat-template-file", str(found[-1])] if found else [])]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Llama]:
    # --jinja with a chat template that offers tools (Qwen 2.5's: ChatML, as the bundled
    # model's, and Hermes' <tool_call> format), from llama.cpp's own source tree
    with llama_server(tmp_path_factory.mktemp("llama"), 2, *_tool_template()) as server:
        yield server


def _slots_busy(url: str) -> int:
    slots = httpx.get(url.removesuffix("/v1") + "/slots", timeout=5).json()
    return sum(1 for s in slots if s.get("is_processing"))


async def test_llama_server_answers_a_chat_through_parley(fleet: Fleet, llama: Llama) -> None:
    async with fleet([llama.url], upstream_model=MODEL, **PATIENT) as front:
        r = await front.client.post("/api/chats", json={"title": "t"}, headers=front.auth)
        chat_id = r.json()["id"]
        sent = await send_json(
            front.client,
            front.auth,
            chat_id,
            "What is the capital of France?",
            max_tokens=24,
            temperature=0,
        )
        run = await wait_run(front.client, front.auth, sent["run_id"], timeout=120)
        assert run["status"] == "completed", run["error"]
        assert run["finish_reason"] in ("stop", "length")
        message = await stored_message(front.client, front.auth, chat_id, sent["message_id"])
        assert message["content"].strip()  # a 135M model's answer: words, not always right
        # llama-server's own usage: the chat template's tokens, not parley's estimate
        assert run["usage"]["prompt_tokens"] > 20
        assert 0 < run["usage"]["completion_tokens"] <= 24
        second = await send_json(front.client, front.auth, chat_id, "And of Italy?", max_tokens=16)
        run = await wait_run(front.client, front.auth, second["run_id"], timeout=120)
        assert run["status"] == "completed", run["error"]


async def test_a_stop_frees_llama_servers_slot(fleet: Fleet, llama: Llama) -> None:
    async with fleet([llama.url], upstream_model=MODEL, **PATIENT) as front:
        r = await front.client.post("/api/chats", json={"title": "t"}, headers=front.auth)
        chat_id = r.json()["id"]
        sent = await send_json(
            front.client,
            front.auth,
            chat_id,
            "Count from one to a thousand in words.",
            max_tokens=500,
        )

        async def generating() -> bool:
            run = await front.client.get(f"/api/runs/{sent['run_id']}", headers=front.auth)
            return run.json()["status"] == "running" and _slots_busy(llama.url) == 1

        await eventually(generating, "llama-server to be generating", timeout=60)
        cancels_before = llama.cancels()
        r = await front.client.post(
            f"/api/chats/{chat_id}/runs/{sent['run_id']}/cancel", headers=front.auth
        )
        assert r.status_code == 200
        # the server cancels the request as soon as parley closes it (its log says so);
        # freeing the slot waits for its current decode step, which a machine with both
        # cores busy can stretch to seconds (0.03-0.16 s measured on a quiet one)
        await eventually(
            lambda: asyncio.sleep(0, llama.cancels() > cancels_before),
            "llama-server to cancel the request parley closed",
            timeout=10,
        )
        await eventually(lambda: _idle(llama.url), "llama-server's slot to be freed", timeout=30)
        assert (await wait_run(front.client, front.auth, sent["run_id"]))["status"] == "cancelled"


async def _idle(url: str) -> bool:
    return _slots_busy(url) == 0


async def test_a_replica_that_dies_leaves_the_ring_and_the_other_answers(
    fleet: Fleet, llama: Llama, tmp_path: Path
) -> None:
    """Two llama-servers behind one model; one is killed (SIGKILL). Every message sent
    after is answered by the other: a request that finds the dead one before its first
    token is retried on the next replica, and the dead one leaves the ring."""
    with llama_server(tmp_path, threads=1) as doomed:
        async with fleet([doomed.url, llama.url], upstream_model=MODEL, **PATIENT) as front:
            doomed.proc.send_signal(signal.SIGKILL)
            doomed.proc.wait(timeout=30)
            for i in range(4):  # chats hash to both replicas: some were the dead one's
                r = await front.client.post("/api/chats", json={"title": "t"}, headers=front.auth)
                chat_id = r.json()["id"]
                sent = await send_json(
                    front.client, front.auth, chat_id, f"Say hello ({i}).", max_tokens=8
                )
                run = await wait_run(front.client, front.auth, sent["run_id"], timeout=120)
                assert run["status"] == "completed", run["error"]

            async def left_the_ring() -> bool:
                states = {s.base_url: s for s in front.router.states()}
                return not states[doomed.url].healthy

            await eventually(left_the_ring, "the dead replica to leave the ring", timeout=30)


ADD: Any = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Adds two integers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


async def test_tools_and_schemas_reach_llama_server_and_its_answers_come_back_as_given(
    fleet: Fleet, llama: Llama
) -> None:
    """The official client through parley to llama-server --jinja: the tools reach its
    prompt (its own count grows by them, to what it counts asked directly) and its answer
    comes back as it gives it, whole and streamed; a JSON schema holds under its grammar.
    (llama-server b11434 does not enforce ``tool_choice: required`` for this model, and
    the 135M model answers in text: the calls themselves are tested against the built-in
    engine and scripted upstreams.)"""
    import json

    import jsonschema

    from tests.fleet.test_tools import program

    ask: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Add 2 and 3."}],
        "max_tokens": 24,
        "temperature": 0,
    }
    async with httpx.AsyncClient(timeout=120) as http:
        asked = {**ask, "model": MODEL, "tools": [ADD]}
        direct = (await http.post(f"{llama.url}/chat/completions", json=asked)).json()
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
    }
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}
    async with fleet([llama.url], upstream_model=MODEL, **PATIENT) as front, program(front) as c:
        bare = await c.chat.completions.create(model="fleet", **ask)
        done = await c.chat.completions.create(model="fleet", tools=[ADD], **ask)
        stream: Any = await c.chat.completions.create(
            model="fleet", tools=[ADD], stream=True, **ask
        )
        text = "".join([ch.choices[0].delta.content or "" async for ch in stream if ch.choices])
        shaped = await c.chat.completions.create(
            model="fleet",
            messages=[{"role": "user", "content": "Name a city."}],
            response_format=fmt,
            max_tokens=48,
            temperature=0,
        )
    assert done.usage is not None and bare.usage is not None
    assert done.usage.prompt_tokens == direct["usage"]["prompt_tokens"] > bare.usage.prompt_tokens
    # greedy, but llama.cpp's reuse of a cached prompt can move a late token: the start
    said = direct["choices"][0]["message"]["content"]
    assert said and (done.choices[0].message.content or "")[:20] == said[:20] == text[:20]
    assert done.choices[0].finish_reason in ("stop", "length")
    jsonschema.validate(json.loads(shaped.choices[0].message.content or ""), schema)
