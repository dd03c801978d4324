"""Passwords are hashed with Argon2id at OWASP's parameters."""

from __future__ import annotations

from parley.accounts.passwords import Passwords


async def test_default_hash_is_argon2id_at_owasp_parameters() -> None:
    pw = Passwords()
    h = await pw.hash("correct horse battery")
    assert h.startswith("$argon2id$v=19$m=19456,t=2,p=1$")
    assert (await pw.verify(h, "correct horse battery")).ok
    assert not (await pw.verify(h, "wrong")).ok
    assert not (await pw.verify("not a hash", "x")).ok


async def test_weaker_hashes_are_flagged_for_rehash() -> None:
    weak = await Passwords(time_cost=1, memory_kib=64).hash("pw")
    verdict = await Passwords().verify(weak, "pw")
    assert verdict.ok and verdict.needs_rehash
