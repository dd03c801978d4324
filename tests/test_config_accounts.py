"""The accounts hardening settings (``config.py``): proxies, the public URL, sessions."""

from __future__ import annotations

from ipaddress import ip_network

import pytest

from parley.config import load_settings
from parley.errors import ConfigurationError


@pytest.mark.parametrize(
    "value", ["10.0.0.0/8, 192.0.2.1", '["10.0.0.0/8", "192.0.2.1"]', " 10.0.0.0/8 ,192.0.2.1 "]
)
def test_trusted_proxies_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PARLEY_TRUSTED_PROXIES", value)
    assert load_settings().http.trusted_proxies == [
        ip_network("10.0.0.0/8"),
        ip_network("192.0.2.1"),
    ]


def test_trusted_proxies_default_to_none_and_refuse_what_is_no_address() -> None:
    assert load_settings().http.trusted_proxies == []
    with pytest.raises(ConfigurationError, match="trusted_proxies"):
        load_settings(trusted_proxies=["proxy.internal"])
    with pytest.raises(ConfigurationError, match="trusted_proxies"):
        load_settings(trusted_proxies=["10.1.2.3/8"])  # host bits set: a typo, likely


def test_an_https_public_url_means_hsts_and_secure_cookies() -> None:
    assert not load_settings().http.https
    assert not load_settings().http.cookie_secure
    settings = load_settings(public_url="https://chat.example.com")
    assert settings.http.https and settings.http.cookie_secure
    assert not load_settings(
        public_url="https://chat.example.com", cookie_secure=False
    ).http.cookie_secure
    assert not load_settings(public_url="http://chat.example.com").http.https
    for bad in ("chat.example.com", "ftp://chat.example.com", "https://"):
        with pytest.raises(ConfigurationError, match="public_url"):
            load_settings(public_url=bad)


def test_the_idle_timeout_is_longer_than_the_last_use_granularity() -> None:
    assert load_settings().accounts.session_idle_timeout_seconds == 7 * 24 * 3600
    with pytest.raises(ConfigurationError, match="session_idle_timeout_seconds"):
        load_settings(session_idle_timeout_seconds=60)
