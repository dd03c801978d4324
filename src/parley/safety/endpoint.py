"""An OpenAI-compatible moderation endpoint as a classifier: ``POST {base_url}/moderations``.

OpenAI's own, or any server speaking its format (``parley engine serve`` answers it with the
rule set). A text is blocked when the result is flagged, in the flagged category with the
highest score; with ``categories`` configured, only those of the endpoint's categories
count. Anything but a 200 with a moderation result is a failure (its fail mode decides).
"""

from __future__ import annotations

import httpx
from pydantic import ValidationError

from parley.openai.protocol import ModerationResponse, ModerationResult, error_message
from parley.safety.interface import ALLOWED, ClassifierFailed, Sample, Verdict
from parley.safety.settings import EndpointSettings


def client_for(
    base_url: str, api_key: str | None, timeout: float, **kw: object
) -> httpx.AsyncClient:
    """The pooled HTTP client of one remote classifier."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.AsyncClient(
        base_url=base_url.rstrip("/"),
        headers=headers,
        timeout=httpx.Timeout(timeout),
        limits=httpx.Limits(max_keepalive_connections=32),
        **kw,  # type: ignore[arg-type]
    )


async def refusal(response: httpx.Response, what: str) -> ClassifierFailed:
    """The failure a non-200 answer is."""
    try:
        said = error_message(response.json())
    except ValueError:
        said = None
    said = said or response.text[:200] or response.reason_phrase
    return ClassifierFailed(f"{what} answered {response.status_code}: {said}")


class ModerationEndpoint:
    inline = False

    def __init__(
        self,
        name: str,
        settings: EndpointSettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = name
        self._settings = settings
        self._what = f"{settings.base_url.rstrip('/')}/moderations"
        self._client = client_for(
            settings.base_url,
            settings.resolved_api_key(),
            settings.timeout_seconds,
            transport=transport,
        )

    async def check(self, sample: Sample) -> Verdict:
        body: dict[str, object] = {"input": sample.text}
        if self._settings.model is not None:
            body["model"] = self._settings.model
        try:
            response = await self._client.post("/moderations", json=body)
        except httpx.HTTPError as e:
            raise ClassifierFailed(f"{self._what} is unreachable: {type(e).__name__}") from e
        if response.status_code != 200:
            raise await refusal(response, self._what)
        try:
            result = ModerationResponse.model_validate_json(response.content).results[0]
        except ValidationError as e:
            raise ClassifierFailed(f"{self._what} answered no moderation result") from e
        return self._verdict(result)

    def _verdict(self, result: ModerationResult) -> Verdict:
        wanted = self._settings.categories
        flagged = [
            c for c, on in result.categories.items() if on and (wanted is None or c in wanted)
        ]
        if not flagged and (wanted is not None or not result.flagged):
            return ALLOWED
        category = max(flagged, key=lambda c: result.category_scores.get(c, 0.0), default="flagged")
        return Verdict(True, category, f"the moderation service flagged it as {category}")

    async def close(self) -> None:
        await self._client.aclose()
