"""Whether the engine runs its decode steps natively: the ``native_decode`` setting."""

from __future__ import annotations

import logging
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from parley.engines.builtin.native.build import NativeUnavailable
from parley.engines.builtin.native.decoder import NativeDecoder

if TYPE_CHECKING:
    from parley.engines.builtin.model import LlamaModel

log = logging.getLogger(__name__)


class NativeMode(StrEnum):
    AUTO = "auto"  # where it can be had (this precision, this device, a compiler)
    ON = "on"  # or the engine does not start
    OFF = "off"


def attach_native(model: LlamaModel, mode: NativeMode) -> bool:
    """Give ``model`` its native decode step as ``mode`` says (before packing); whether it
    has one. ``ON`` raises NativeUnavailable where ``AUTO`` logs why not and goes on."""
    if mode is NativeMode.OFF:
        return False
    try:
        use_native(model)
    except NativeUnavailable as exc:
        if mode is NativeMode.ON:
            raise
        log.info("engine decode steps in PyTorch: %s", exc)
        return False
    log.info("engine decode steps native (%s)", model.precision.value)
    return True


def use_native(
    model: LlamaModel,
    threads: int | None = None,
    cache_dir: Path | None = None,
    march: str = "native",
) -> None:
    """Run the model's all-decode steps (up to ``native.max_rows`` rows) with the native
    decode step, built for this CPU (or ``march``); NativeUnavailable when it cannot be had.
    Call before ``pack_weights``: the native step reads the plain matrices (keeping the
    quantized ones, copying fp32's in fours)."""
    model.native = NativeDecoder.for_model(model, threads, cache_dir, march)
