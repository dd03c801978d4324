"""Safetensors files whose every tensor starts on a 64-byte boundary.

The built-weights cache is memory-mapped and its tensors go straight into PyTorch's CPU
kernels, and some of those (the int8 product's, for one) fault on weights that are not
aligned. ``safetensors.save_file`` packs tensors back to back after a header of any length
(a mapped file's tensors then sat 40 bytes past a boundary). This writer follows the same
format, which any safetensors reader reads: the header is padded with spaces (the format
allows it) so the data begins aligned, and each gap before a tensor is filled by a uint8
tensor named ``__pad<n>`` (the format allows no holes), which ``read_aligned`` drops.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch
from safetensors.torch import load_file

ALIGN = 64
PAD_PREFIX = "__pad"
_DTYPES = {
    torch.float32: "F32",
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.int32: "I32",
    torch.int64: "I64",
}


def write_aligned(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
    """As ``safetensors.torch.save_file`` (same arguments), every tensor 64-byte aligned."""
    header: dict[str, object] = {"__metadata__": metadata}
    order: list[torch.Tensor] = []
    offset = 0
    for name, tensor in tensors.items():
        gap = -offset % ALIGN
        if gap:
            order.append(torch.zeros(gap, dtype=torch.uint8))
            header[f"{PAD_PREFIX}{len(order)}"] = _entry(order[-1], offset)
            offset += gap
        order.append(tensor.detach().contiguous().cpu())
        header[name] = _entry(order[-1], offset)
        offset += order[-1].nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % ALIGN)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for tensor in order:
            f.write(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())


def read_aligned(path: Path) -> dict[str, torch.Tensor]:
    tensors = load_file(path)
    return {k: v for k, v in tensors.items() if not k.startswith(PAD_PREFIX)}


def _entry(tensor: torch.Tensor, offset: int) -> dict[str, object]:
    return {
        "dtype": _DTYPES[tensor.dtype],
        "shape": list(tensor.shape),
        "data_offsets": [offset, offset + tensor.nbytes],
    }
