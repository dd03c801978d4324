"""A guard model as a classifier: a Llama Guard-style model behind an OpenAI-compatible
``POST {base_url}/chat/completions`` (vLLM, llama.cpp, ``parley engine serve``).

The model is given the turn to judge as a conversation: a prompt as the user's message, an
answer as the assistant's reply to the user's message it answers. It answers ``safe``, or
``unsafe`` and, on the next line, the codes of the categories it found (``S1,S10``); the
codes are reported by the names ``categories`` gives them. Any other answer, or no answer,
is a failure (its fail mode decides).
"""

from __future__ import annotations

import httpx
from pydantic import ValidationError

from parley.openai.protocol import ChatCompletion
from parley.safety.endpoint import client_for, refusal
from parley.safety.interface import ALLOWED, ClassifierFailed, Sample, Stage, Verdict
from parley.safety.settings import GuardSettings


class GuardModel:
    inline = False

    def __init__(
        self,
        name: str,
        settings: GuardSettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = name
        self._settings = settings
        self._what = f"the guard model {settings.model!r} at {settings.base_url.rstrip('/')}"
        self._client = client_for(
            settings.base_url,
            settings.resolved_api_key(),
            settings.timeout_seconds,
            transport=transport,
        )

    def _conversation(self, sample: Sample) -> list[dict[str, str]]:
        if sample.stage is Stage.INPUT:
            return [{"role": "user", "content": sample.text}]
        return [
            {"role": "user", "content": sample.prompt},
            {"role": "assistant", "content": sample.text},
        ]

    async def check(self, sample: Sample) -> Verdict:
        body = {
            "model": self._settings.model,
            "messages": self._conversation(sample),
            "max_tokens": self._settings.max_tokens,
            "temperature": 0,
            "stream": False,
        }
        try:
            response = await self._client.post("/chat/completions", json=body)
        except httpx.HTTPError as e:
            raise ClassifierFailed(f"{self._what} is unreachable: {type(e).__name__}") from e
        if response.status_code != 200:
            raise await refusal(response, self._what)
        try:
            answer = ChatCompletion.model_validate_json(response.content).choices[0].message
        except (ValidationError, IndexError) as e:
            raise ClassifierFailed(f"{self._what} answered no completion") from e
        return self.read(answer.content or "")

    def read(self, answer: str) -> Verdict:
        """The verdict a guard model's answer says."""
        lines = [line.strip() for line in answer.strip().splitlines() if line.strip()]
        said = lines[0].lower() if lines else ""
        if said == "safe":
            return ALLOWED
        if said != "unsafe":
            raise ClassifierFailed(
                f"{self._what} answered neither safe nor unsafe: {answer[:80]!r}"
            )
        codes = [c.strip() for c in lines[1].split(",") if c.strip()] if len(lines) > 1 else []
        names = [self._settings.categories.get(c.upper(), c.lower()) for c in codes] or ["unsafe"]
        return Verdict(True, names[0], f"the guard model found it unsafe ({', '.join(names)})")

    async def close(self) -> None:
        await self._client.aclose()
