"""The fleet's fixtures (``parley`` in front of real upstream servers), for the trace tests of
the upstream request."""

from __future__ import annotations

from tests.fleet.conftest import fleet, misbehaving

__all__ = ["fleet", "misbehaving"]
