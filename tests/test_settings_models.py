"""The models setting: what a configuration of engines and replicas must say, refused at
start-up with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from parley.config import load_settings
from parley.engines.registry import configured_models, engine_capacity
from parley.errors import ConfigurationError

FLEET = {
    "name": "llama",
    "engine": "openai",
    "replicas": [
        {"base_url": "http://gpu1:8000/v1", "slots": 32},
        {"base_url": "http://gpu2:8000/v1", "slots": 16},
    ],
}


def test_several_models_are_served_the_first_the_default() -> None:
    settings = load_settings(models=[FLEET, {"name": "parley-fake", "engine": "fake"}])
    assert configured_models(settings.engines) == ["llama", "parley-fake"]
    assert engine_capacity(settings.engines) == 32 + 16 + settings.engines.fake.slots


def test_without_models_the_one_engine_serves() -> None:
    assert configured_models(load_settings(engine="fake").engines) == ["parley-fake"]


@pytest.mark.parametrize(
    ("models", "reason"),
    [
        ([{"name": "x", "engine": "openai"}], "needs at least one replica"),
        ([{**FLEET, "engine": "fake"}], "only an openai engine has replicas"),
        ([FLEET, FLEET], "two models have one name"),
        (
            [{**FLEET, "replicas": [FLEET["replicas"][0]] * 2}],
            "a replica is listed twice",
        ),
        (
            [{**FLEET, "replicas": [{"base_url": "gpu1:8000"}]}],
            "base_url",
        ),
        (
            [{**FLEET, "upstream": {"api_key_env": "PARLEY_SURELY_UNSET_KEY"}}],
            "PARLEY_SURELY_UNSET_KEY named by api_key_env is not set",
        ),
        (
            [{"name": "a", "engine": "fake"}, {"name": "b", "engine": "fake"}],
            "at most one model may use the fake engine",
        ),
    ],
)
def test_a_wrong_models_setting_is_refused_with_its_reason(
    models: list[dict[str, Any]], reason: str
) -> None:
    with pytest.raises(ConfigurationError, match=reason):
        load_settings(models=models)


def test_engine_openai_needs_its_replicas_under_models() -> None:
    with pytest.raises(ConfigurationError, match="configure it under `models`"):
        load_settings(engine="openai")


def test_the_api_key_is_never_shown_in_the_settings() -> None:
    settings = load_settings(models=[{**FLEET, "upstream": {"api_key": "sk-secret-value"}}])
    assert "sk-secret-value" not in repr(settings)
    assert settings.engines.models[0].upstream.resolved_api_key() == "sk-secret-value"
