"""Numbers and flags as fields of a JSON request body.

Pydantic's lax mode reads ``true`` as 1, ``"5"`` as 5 and ``1`` or ``"yes"`` as true. A
client that sends the wrong JSON type for a number or a flag gets a 422 that says so, not a
guess. An integral float (``100.0``) is still an integer, as JSON Schema has it. ``NaN`` and
``Infinity`` (which Python's JSON reader takes, though JSON has neither) are refused.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BeforeValidator, StrictBool


def _json_number(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a JSON number")
    if isinstance(value, float) and not math.isfinite(value):  # NaN, Infinity: not JSON
        raise ValueError("must be a finite JSON number")
    return value


Integer = Annotated[int, BeforeValidator(_json_number)]
Number = Annotated[float, BeforeValidator(_json_number)]
Flag = StrictBool
