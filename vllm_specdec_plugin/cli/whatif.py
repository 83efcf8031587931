"""`vllm-specdec whatif`: before opting in, what each draft-free method would buy on your traffic.

    vllm-specdec whatif --model DIR --traffic FILE [--method ngram|suffix|adaptive ...]
        [--k N ...] [--prompt-lookup-min N] [--prompt-lookup-max N] [--costs FILE]
        [--platform cpu|cuda|rbln] [--gpu NAME] [--json] [--plot FILE.png]

The flags and exit statuses; the stages are `whatif/run.py`'s, the outputs `whatif/render.py`'s.
Exit 0 with a report, 2 on bad input (one line on stderr naming the input and the fix).
Defaults: the plugin's own fallbacks as it would inject them (`core/methods.FALLBACKS`: ngram
k=5 with KAITO's prompt_lookup_max 4, suffix with vLLM's defaults, adaptive with its cap 16);
`--k` replaces each method's k (several `--k` replay each).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Sequence
from typing import Any

from vllm_specdec_plugin.core.errors import EXIT_INVALID, SpecDecodeConfigError
from vllm_specdec_plugin.core.methods import FALLBACKS
from vllm_specdec_plugin.whatif.types import METHODS, MethodConfig

EXIT_OK = 0
MAX_K = 64
"""The largest --k replayed (vLLM's samplers verify at most 32 on RBLN, 64 is generous)."""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_K:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_K}, got "
                                         f"{text[:40]!r}")
    return value


def _batches(text: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        values = ()
    if not values or values[0] < 1 or values[-1] > 4096 or len(values) > 32:
        raise argparse.ArgumentTypeError(
            f"must be up to 32 comma-separated batch sizes from 1 to 4096, got {text[:40]!r}")
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vllm-specdec whatif",
        description="Replay logged requests through the draft-free speculative methods vLLM "
                    "runs (exact under greedy decoding) and predict the speedup per batch "
                    "size. Nothing is downloaded.")
    p.add_argument("--model", required=True, metavar="DIR",
                   help="local checkpoint directory (its tokenizer and chat template are used)")
    p.add_argument("--traffic", required=True, metavar="FILE",
                   help="JSONL ({prompt|messages, completion} or {request, response} per line) "
                        "or ShareGPT JSON")
    p.add_argument("--method", action="append", choices=METHODS,
                   help="replay this method (repeatable; default: all three)")
    p.add_argument("--k", action="append", type=_positive, metavar="N",
                   help="num_speculative_tokens (repeatable; default: each method's own)")
    p.add_argument("--prompt-lookup-min", type=_positive, metavar="N", help="ngram")
    p.add_argument("--prompt-lookup-max", type=_positive, metavar="N", help="ngram")
    p.add_argument("--costs", metavar="FILE",
                   help="step costs from `vllm-specdec status --json` of a running engine")
    p.add_argument("--platform", choices=("cpu", "cuda", "rbln"),
                   help="the prior's platform (default: cuda with --gpu, else cpu)")
    p.add_argument("--gpu", metavar="NAME", help="hardware table row, e.g. H100-SXM")
    p.add_argument("--batches", type=_batches, metavar="B,B,...",
                   help="batch sizes to predict (default 1,2,4,...,128)")
    p.add_argument("--max-requests", type=int, metavar="N", help="replay the first N requests")
    p.add_argument("--max-model-len", type=int, metavar="N",
                   help="context length (default: the checkpoint's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="FILE.png", help="write the speedup plot here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return p


def configs_of(args: argparse.Namespace) -> tuple[MethodConfig, ...]:
    """The (method, k) pairs to replay, from the flags and the plugin's fallback defaults."""
    methods = args.method or [m for m in METHODS
                              if m != "suffix" or importlib.util.find_spec("arctic_inference")]
    configs = []
    for method in dict.fromkeys(methods):
        default = FALLBACKS[method].config
        ks = args.k or [int(default.get("num_speculative_tokens") or 24)]
        for k in dict.fromkeys(ks):
            lookup_max = args.prompt_lookup_max
            if method == "ngram" and lookup_max is None and args.prompt_lookup_min is None:
                lookup_max = default.get("prompt_lookup_max")
            configs.append(MethodConfig(
                method, k,
                prompt_lookup_min=args.prompt_lookup_min if method == "ngram" else None,
                prompt_lookup_max=lookup_max if method == "ngram" else None))
    return tuple(configs)


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    from vllm_specdec_plugin.whatif.run import DEFAULT_BATCHES, WhatifOptions, run_whatif

    if (args.prompt_lookup_min or args.prompt_lookup_max) and args.method \
            and "ngram" not in args.method:
        return _fail("--prompt-lookup-min/--prompt-lookup-max apply to ngram only; add "
                     "--method ngram or drop them")
    if args.prompt_lookup_min and args.prompt_lookup_max \
            and args.prompt_lookup_min > args.prompt_lookup_max:
        return _fail(f"--prompt-lookup-min {args.prompt_lookup_min} is above "
                     f"--prompt-lookup-max {args.prompt_lookup_max}; lower the first")
    for flag, value in (("--max-requests", args.max_requests),
                        ("--max-model-len", args.max_model_len)):
        if value is not None and value < 1:
            return _fail(f"{flag} {value}: give a positive number")
    platform = args.platform or ("cuda" if args.gpu else "cpu")
    if args.gpu and platform != "cuda":
        return _fail(f"--gpu {args.gpu} with --platform {platform}: --gpu names a GPU row; "
                     "use --platform cuda or drop --gpu")
    options = WhatifOptions(
        model=args.model, traffic=args.traffic, configs=configs_of(args), costs=args.costs,
        platform=platform, gpu=args.gpu, batches=args.batches or DEFAULT_BATCHES,
        max_requests=args.max_requests, max_model_len=args.max_model_len)
    progress = None if args.no_progress or not sys.stderr.isatty() else ProgressBar()
    try:
        report = run_whatif(options, progress)
    except SpecDecodeConfigError as exc:
        return _fail(exc.message)
    except KeyboardInterrupt:
        return _fail("interrupted")
    finally:
        if progress is not None:
            progress.close()
    from vllm_specdec_plugin.whatif import render

    if args.plot:
        try:
            render.plot(report, args.plot)
        except (OSError, ImportError) as exc:
            return _fail(f"--plot {args.plot}: cannot write it ({type(exc).__name__}: "
                         f"{str(exc)[:120]}); give a writable .png path (matplotlib needed)")
    print(render.dumps(report) if args.json else render.render_table(report), flush=True)
    return EXIT_OK


def _fail(message: str) -> int:
    text = message.removeprefix("vllm-specdec-plugin: ")
    print(f"vllm-specdec whatif: {text}", file=sys.stderr)
    return EXIT_INVALID


class ProgressBar:
    """One line on stderr, redrawn at most every 0.2 s: stage, done/total, rate."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.shown = 0.0
        self.started: dict[str, float] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        start = self.started.setdefault(stage, now)
        if now - self.shown < 0.2 and done < total:
            return
        self.shown = now
        width = 30
        filled = int(width * done / total) if total else width
        rate = done / (now - start) if now > start else 0.0
        self.stream.write(f"\r{stage:<24} [{'#' * filled}{'.' * (width - filled)}] "
                          f"{done}/{total} ({rate:,.0f}/s)")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * 90 + "\r")
            self.stream.flush()
