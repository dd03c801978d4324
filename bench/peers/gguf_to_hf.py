"""Write the bundled GGUF model as a plain Hugging Face folder (float32 safetensors).

    .venv/bin/python bench/peers/gguf_to_hf.py OUT_DIR [--gguf PATH]

For peers that cannot read GGUF (vLLM's CPU build): config.json, model.safetensors and the
tokenizer files, made offline from the GGUF file by transformers (the GGUF is dequantized, as
parley's built-in engine does). Run with parley's venv (it has transformers, gguf, accelerate).
"""

from __future__ import annotations

import argparse
import os
import pathlib

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def convert(gguf: pathlib.Path, out: pathlib.Path) -> list[str]:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    # transformers refuses save_pretrained on a model loaded from GGUF ("quantized with gguf
    # and is not serializable"); the tensors are plain float32 by now, so write them directly.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if getattr(config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return sorted(p.name for p in out.iterdir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--gguf", type=pathlib.Path, default=None)
    args = parser.parse_args()
    if args.gguf is None:
        from parley.engines.builtin.loader import default_model_path

        args.gguf = default_model_path()
    print(convert(args.gguf, args.out))


if __name__ == "__main__":
    main()
