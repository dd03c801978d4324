"""The router's ring, without a network: what consistent hashing promises."""

from __future__ import annotations

from collections import Counter

from parley.engines.router import Router
from parley.engines.settings import ReplicaSettings, UpstreamSettings

KEYS = [f"chat-{i}" for i in range(3000)]


def _router(weights: list[float], **upstream: float) -> Router:
    replicas = [
        ReplicaSettings(base_url=f"http://10.0.0.{i + 1}:8000/v1", weight=w)
        for i, w in enumerate(weights)
    ]
    return Router("m", replicas, UpstreamSettings(**upstream))


def _homes(router: Router) -> dict[str, str]:
    homes = {}
    for key in KEYS:
        home = router.home(key)
        assert home is not None
        homes[key] = home.label
    return homes


def test_a_replica_leaving_moves_only_its_own_chats_and_they_come_back() -> None:
    router = _router([1, 1, 1, 1])
    before = _homes(router)
    gone = router.replicas[2]
    router.set_health(gone, healthy=False, why="test")
    during = _homes(router)
    moved = {k for k in KEYS if before[k] != during[k]}
    assert moved == {k for k in KEYS if before[k] == gone.label}
    assert all(during[k] != gone.label for k in KEYS)
    router.set_health(gone, healthy=True, why="test")
    assert _homes(router) == before


def test_chats_spread_by_weight() -> None:
    router = _router([1, 1, 2], virtual_nodes=256)
    share = Counter(_homes(router).values())
    light = (share["10.0.0.1:8000"] + share["10.0.0.2:8000"]) / 2
    assert 1.5 < share["10.0.0.3:8000"] / light < 2.7, share


def test_a_replica_at_its_bound_passes_the_chat_to_the_next_on_the_ring() -> None:
    router = _router([1, 1, 1], balance_factor=1.25)
    key = KEYS[0]
    home = router.home(key)
    assert home is not None
    assert router.pick(key) is home
    home.in_flight = 2  # with one more, 3 in flight: the bound is ceil(1.25 * 3 / 3) = 2
    nxt = router.pick(key)
    assert nxt is not None and nxt is not home
    assert nxt is router.pick(key, exclude={home})  # the next one along this chat's ring
    for replica in router.replicas:
        replica.in_flight = 1  # even load: 4 in flight with the next, bound 2, room at home
    assert router.pick(key) is home


def test_when_every_replica_is_down_all_are_still_tried() -> None:
    router = _router([1, 1])
    for replica in router.replicas:
        router.set_health(replica, healthy=False, why="test")
    first = router.pick(KEYS[0])
    assert first is not None
    second = router.pick(KEYS[0], exclude={first})
    assert second is not None and second is not first
    assert router.pick(KEYS[0], exclude={first, second}) is None
