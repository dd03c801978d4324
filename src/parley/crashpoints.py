"""Named points where a test has the process die on the spot, to aim a kill at a window
instead of hoping a SIGKILL lands in it.

``crash_point(name)`` is a no-op unless the process was started with ``crash_at`` (the
``PARLEY_CRASH_AT`` setting, refused in production) naming that point, as ``name`` or
``name:N`` (die at its Nth pass): then the process ends at once with ``os._exit(137)``, as
SIGKILL would leave it (no cleanup, no flush, no transaction ended). The points:

- ``archive.written``: a chat's archive object is written, not yet verified nor marked;
- ``archive.marked``: a chat is marked archived (its rows moved), the pass not yet on.
"""

from __future__ import annotations

import os

KILLED = 137  # what a shell reports for a process ended by SIGKILL

_armed: tuple[str, int] | None = None
_passes = 0


def arm(spec: str | None) -> None:
    """Die at the point ``spec`` names (``name`` or ``name:N``); None: never."""
    global _armed, _passes
    _passes = 0
    if spec is None:
        _armed = None
        return
    name, _, count = spec.partition(":")
    _armed = (name, int(count) if count else 1)


def crash_point(name: str) -> None:
    global _passes
    if _armed is None or _armed[0] != name:
        return
    _passes += 1
    if _passes >= _armed[1]:
        os._exit(KILLED)
