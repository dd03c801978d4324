"""Each package's section of the settings, and the former flat names that still read: as
keywords (the CLI's flags), in the TOML file, and in the environment, each source keeping
its place in the order (keywords, environment, file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.config import load_settings
from parley.errors import ConfigurationError
from parley.settings_aliases import ALIASES
from parley.tiers import default_tiers

TOML = """
database_url = "postgresql://file@h/db"
lease_seconds = 7
engine = "fake"

[builtin_engine]
kv_cache_tokens = 128

[bus]
redis_namespace = "from-file"
"""


def test_a_section_reads_its_own_names_in_toml_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_RUNS__LEASE_SECONDS", "9")
    monkeypatch.setenv("PARLEY_ENGINES__FAKE__SLOTS", "3")
    file = tmp_path / "parley.toml"
    file.write_text('[http]\nport = 9001\n[qos]\nqueue_max = 5\n[engines]\nkind = "fake"\n')
    settings = load_settings(config_file=file)
    assert (settings.http.port, settings.qos.queue_max) == (9001, 5)
    assert (settings.runs.lease_seconds, settings.engines.fake.slots) == (9, 3)


def test_the_former_flat_names_still_read_from_every_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "parley.toml"
    file.write_text(TOML)
    monkeypatch.setenv("PARLEY_REDIS_URL", "redis://env:6379/0")
    monkeypatch.setenv("PARLEY_FAKE_ENGINE__SLOTS", "5")
    monkeypatch.setenv("PARLEY_TRUSTED_PROXIES", "10.0.0.0/8")
    settings = load_settings(config_file=file, port=8123)
    assert settings.database.resolved_url.startswith("postgresql+asyncpg://file@h/db")
    assert settings.runs.lease_seconds == 7
    assert settings.engines.kind.value == "fake"
    assert settings.engines.builtin.kv_cache_tokens == 128
    assert settings.bus.redis_namespace == "from-file"
    assert settings.bus.redis_url == "redis://env:6379/0"
    assert settings.engines.fake.slots == 5
    assert [str(n) for n in settings.http.trusted_proxies] == ["10.0.0.0/8"]
    assert settings.http.port == 8123


def test_the_sources_keep_their_order_whichever_name_each_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "parley.toml"
    file.write_text("[runs]\nlease_seconds = 3\n")
    monkeypatch.setenv("PARLEY_LEASE_SECONDS", "4")  # the environment, a former name
    assert load_settings(config_file=file).runs.lease_seconds == 4
    assert load_settings(config_file=file, lease_seconds=5).runs.lease_seconds == 5
    monkeypatch.setenv("PARLEY_RUNS__LEASE_SECONDS", "6")  # a section's own name wins
    assert load_settings(config_file=file).runs.lease_seconds == 6


def test_a_wrong_value_under_a_former_name_is_refused_naming_its_section() -> None:
    with pytest.raises(ConfigurationError, match=r"runs\.lease_seconds"):
        load_settings(lease_seconds=-1)
    with pytest.raises(ConfigurationError, match=r"qos: .*default_tier .gold."):
        load_settings(default_tier="gold")


def test_every_former_name_points_at_a_field_that_exists() -> None:
    settings = load_settings()
    for name, (section, field) in ALIASES.items():
        assert hasattr(getattr(settings, section), field), name


def test_one_field_of_a_default_tier_changes_only_that_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 46, item 7: the README's `PARLEY_TIERS__FREE__BURST_TOKENS=5000` keeps the
    rest of the free tier and the other tiers; a tier given whole is taken as given."""
    monkeypatch.setenv("PARLEY_TIERS__FREE__BURST_TOKENS", "5000")
    tiers = load_settings().qos.tiers
    defaults = default_tiers()
    assert list(tiers) == list(defaults)
    assert tiers["free"].burst_tokens == 5000
    assert tiers["free"].model_dump(exclude={"burst_tokens"}) == defaults["free"].model_dump(
        exclude={"burst_tokens"}
    )
    assert tiers["pro"] == defaults["pro"]
    monkeypatch.delenv("PARLEY_TIERS__FREE__BURST_TOKENS")
    gold = {"priority": 5, "tokens_per_minute": 1, "burst_tokens": 1,
            "max_concurrent_runs": 1, "max_output_tokens": 10}  # fmt: skip
    only = load_settings(qos={"tiers": {"gold": gold}, "default_tier": "gold"}).qos.tiers
    assert list(only) == ["gold"] and only["gold"].priority == 5
