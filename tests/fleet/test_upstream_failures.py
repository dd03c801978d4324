"""Every way an upstream fails, each from a real server that misbehaves that way, as the run
the user sees: its state, its error and the text it keeps."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from tests.fleet.conftest import FLEET_MODEL, Fleet
from tests.fleet.servers import Misbehaving
from tests.helpers import bearer, new_api_key
from tests.processes import free_port
from tests.runs.helpers import send_json, stored_message, wait_run
from tests.sse import Event, collect

# mode -> (error code, words in the error message, text the run keeps)
CASES = {
    "error500": ("engine_unavailable", "the GPU caught fire", ""),
    "hang": ("engine_unavailable", "did not answer within 2 s", ""),
    "reject400": ("upstream_rejected", "temperature must be at most 1.5", ""),
    "context": ("context_length_exceeded", "maximum context length is 2048", ""),
    "malformed": ("upstream_failed", "malformed chunk", "Hello"),
    "cut": ("upstream_failed", "broke off mid-answer", "Hello world"),
    "silent": ("upstream_failed", "went silent for 1 s", "Hello"),
    # a redirect is not followed (as httpx's own client: nor the key sent somewhere else)
    "redirect": ("upstream_rejected", "refused the request (307)", ""),
}


async def _one_run(
    fleet: Fleet, url: str, **upstream: Any
) -> tuple[dict[str, Any], dict[str, Any], list[Event]]:
    async with fleet([url], **upstream) as front:
        r = await front.client.post("/api/chats", json={"title": "t"}, headers=front.auth)
        chat_id = r.json()["id"]
        sent = await send_json(front.client, front.auth, chat_id)
        run = await wait_run(front.client, front.auth, sent["run_id"])
        message = await stored_message(front.client, front.auth, chat_id, sent["message_id"])
        async with front.client.stream(
            "GET", f"/api/runs/{sent['run_id']}/events", headers=front.auth
        ) as response:
            evs = await collect(response)
        return run, message, evs


@pytest.mark.parametrize("mode", list(CASES))
async def test_a_misbehaving_upstream_fails_the_run_clearly(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving], mode: str
) -> None:
    code, words, kept = CASES[mode]
    server = misbehaving(mode)
    run, message, evs = await _one_run(
        fleet, server.url, first_token_timeout_seconds=2, idle_timeout_seconds=1, max_attempts=1
    )
    assert run["status"] == "failed", run
    assert run["error"]["code"] == code
    assert words in run["error"]["message"]
    assert message["status"] == "failed"
    assert message["content"] == kept  # what was streamed before the failure stays
    errors = [e for e in evs if e.event == "error"]
    assert [e.data["code"] for e in errors] == [code]
    assert evs[-1].event == "done"
    assert server.requests() == 1


async def test_a_refused_connection_is_an_unavailable_engine(fleet: Fleet) -> None:
    nobody = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    run, message, evs = await _one_run(fleet, nobody, max_attempts=1)
    assert run["status"] == "failed"
    assert run["error"]["code"] == "engine_unavailable"
    assert "unreachable" in run["error"]["message"]
    assert message["content"] == ""
    assert [e.event for e in evs][-2:] == ["error", "done"]


async def test_the_api_key_named_by_the_settings_is_sent_and_never_logged(
    fleet: Fleet,
    misbehaving: Callable[[str], Misbehaving],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("PARLEY_TEST_UPSTREAM_KEY", secret)
    server = misbehaving("error500")
    caplog.set_level(logging.DEBUG)
    run, _, _ = await _one_run(
        fleet, server.url, api_key_env="PARLEY_TEST_UPSTREAM_KEY", max_attempts=1
    )
    assert run["error"]["code"] == "engine_unavailable"
    assert server.authorization() == f"Bearer {secret}"
    assert secret not in caplog.text
    assert secret not in run["error"]["message"]


@pytest.mark.parametrize(
    ("mode", "text", "finish", "usage"),
    [
        ("quirky", "Quirky but fine.", "stop", (21, 7)),  # the upstream's own usage
        ("gzip", "Quirky but fine.", "stop", (21, 7)),  # decompressed once
        ("no-usage", "Counted by chunks", "length", (None, 3)),  # one token a content chunk
    ],
)
async def test_a_real_servers_quirks_are_read_past(
    fleet: Fleet,
    misbehaving: Callable[[str], Misbehaving],
    mode: str,
    text: str,
    finish: str,
    usage: tuple[int | None, int],
) -> None:
    server = misbehaving(mode)
    run, message, evs = await _one_run(fleet, server.url)
    assert run["status"] == "completed", run
    assert message["content"] == text
    assert run["finish_reason"] == finish
    prompt, completion = usage
    if prompt is not None:
        assert run["usage"]["prompt_tokens"] == prompt
        assert run["usage"]["prompt_tokens_details"] == {"cached_tokens": 16}
    else:  # parley's own estimate, from the claim
        assert run["usage"]["prompt_tokens"] > 0
        assert run["usage"]["prompt_tokens_details"] is None
    assert run["usage"]["completion_tokens"] == completion
    assert [e.event for e in evs if e.event in ("error", "done")] == ["done"]


async def test_whole_answers_give_their_connection_back_for_the_next(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    """Each answer read to its end returns its keep-alive connection to the pool (it once
    stayed "in use" for ever: a new connection, and a leaked socket, per request). A replica
    probe in flight as an answer starts may make it open a second one, so the claim is that
    most answers reuse one, not that all do."""
    server = misbehaving("quirky")
    async with fleet([server.url]) as front:
        r = await front.client.post("/api/chats", json={"title": "t"}, headers=front.auth)
        chat_id = r.json()["id"]
        for _ in range(6):
            sent = await send_json(front.client, front.auth, chat_id)
            run = await wait_run(front.client, front.auth, sent["run_id"])
            assert run["status"] == "completed", run
    ports = server.client_ports()
    assert len(ports) == 6
    assert len(set(ports)) <= 3, f"a connection per request: client ports {ports}"


async def test_sampling_parameters_reach_the_upstream_as_sent(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    """An openai engine honours every sampling parameter by sending it on (the server
    decides): /v1's penalties, logit bias and the vendors' top_k and min_p arrive as given."""
    server = misbehaving("quirky")
    sent = {
        "frequency_penalty": 0.5,
        "presence_penalty": -0.5,
        "logit_bias": {"42": -100},
        "top_k": 20,
        "min_p": 0.05,
        "top_p": 0.9,
        "seed": 3,
    }
    async with fleet([server.url]) as front:
        key = await new_api_key(front.client, "program@example.com")
        body = {"model": FLEET_MODEL, "messages": [{"role": "user", "content": "hi"}], **sent}
        r = await front.client.post("/v1/chat/completions", json=body, headers=bearer(key))
        assert r.status_code == 200, r.text
    received = server.last_body()
    assert {k: received.get(k) for k in sent} == sent


async def test_an_upstream_is_reached_through_the_proxy_the_environment_names(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HTTP_PROXY`` is honoured for an upstream, as httpx's own client honoured it, and
    ``NO_PROXY`` spares what it names (here the test's own client to parley). The upstream's
    name resolves nowhere, so only the proxy can have answered; it serves a request in the
    absolute form a proxy is sent as its own."""
    proxy = misbehaving("quirky")
    monkeypatch.setenv("HTTP_PROXY", proxy.base)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    run, message, _ = await _one_run(fleet, "http://upstream.invalid/v1", max_attempts=1)
    assert run["status"] == "completed", run
    assert message["content"] == "Quirky but fine."
    assert proxy.requests() == 1


async def test_an_upstream_no_proxy_names_is_reached_directly(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = misbehaving("quirky")
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")  # nobody listens
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    run, message, _ = await _one_run(fleet, server.url, max_attempts=1)
    assert run["status"] == "completed", run
    assert message["content"] == "Quirky but fine."


@pytest.mark.parametrize("trusted", [False, True])
async def test_an_https_upstream_is_trusted_only_by_the_roots_ssl_cert_file_names(
    fleet: Fleet,
    misbehaving: Callable[..., Misbehaving],
    monkeypatch: pytest.MonkeyPatch,
    trusted: bool,
) -> None:
    """An upstream's certificate is verified: one signed by nobody the client trusts fails
    the run, naming it; trusted by the file ``SSL_CERT_FILE`` names (as httpx's own client
    trusts), the same server answers."""
    server = misbehaving("quirky", tls=True)
    if trusted:
        monkeypatch.setenv("SSL_CERT_FILE", str(server.cert))
    run, message, _ = await _one_run(fleet, server.url, max_attempts=1)
    if trusted:
        assert run["status"] == "completed", run
        assert message["content"] == "Quirky but fine."
    else:
        assert run["status"] == "failed", run
        assert run["error"]["code"] == "engine_unavailable"
        assert "certificate verify failed" in run["error"]["message"]
