"""Torch work on threads that end (the start-up's, and each busy period's steps), so that
the stepping thread's OpenMP workers spin between products.

PyTorch's CPU kernels run their parallel regions on OpenMP (libgomp in PyTorch's Linux
wheels), which keeps one pool of worker threads per thread that ever ran such a region.
While libgomp manages more threads than there are CPUs, it "throttles" its workers: they
sleep at the end of each region instead of spinning, and every next product pays their
wake-up. A decode step is some 120 products of a few hundred microseconds each, so this
doubles it: on 2 cores an int8 step's products took 10.4 ms on the engine thread when the
main thread had loaded the model, 5.6 ms when the loading had run on a thread that had
since ended (docs/ENGINE_PROFILE.md, "One pool of OpenMP threads"). A thread's pool ends
with it: ``on_fresh_thread`` runs the loading and building there, and ``EngineLoop`` each
busy period, so the pool of the thread that steps is the only one (an idle engine holds
none).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def on_fresh_thread(fn: Callable[[], T], name: str = "parley-engine-build") -> T:
    """``fn()`` run on a new thread that ends before this returns; its result, or its
    exception raised here."""
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)

    thread = threading.Thread(target=run, name=name)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]
