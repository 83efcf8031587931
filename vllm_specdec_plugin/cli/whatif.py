"""`vllm-specdec whatif`: before opting in, what each draft-free method would buy on your traffic.

    vllm-specdec whatif --model DIR --traffic FILE [--method ngram|suffix|adaptive ...]
        [--k N ...] [--prompt-lookup-min N] [--prompt-lookup-max N] [--costs FILE]
        [--platform cpu|cuda|rbln] [--gpu NAME] [--runner v1|v2] [--batches B,...]
        [--max-requests N] [--max-model-len N] [--json] [--plot FILE.png]

The flags and exit statuses; the stages are `whatif/run.py`'s, the outputs `whatif/render.py`'s.
Exit 0 with a report, 2 on bad input (one line on stderr naming the input and the fix; the
flags' own errors too, not argparse's usage block). Every number is bounded (`core/limits.py`)
and every cheap input (the flags, `--plot`, `--costs`, the platform's row, the traffic path,
the checkpoint) is checked before the traffic is read.
Defaults: the plugin's own fallbacks as it would inject them (`core/methods.FALLBACKS`: ngram
k=5 with KAITO's prompt_lookup_max 4, suffix with vLLM's defaults, adaptive with its cap 16);
`--k` replaces each method's k (several `--k` replay each).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from vllm_specdec_plugin.core.errors import EXIT_INVALID, SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.limits import (
    MAX_BATCH_SIZE,
    MAX_BATCH_SIZES,
    MAX_MODEL_LEN,
    MAX_NGRAM_LOOKUP,
    MAX_SPEC_TOKENS,
    MAX_TRAFFIC_REQUESTS,
    ascii_decimal,
)
from vllm_specdec_plugin.core.methods import FALLBACKS
from vllm_specdec_plugin.whatif.types import METHODS, MethodConfig

EXIT_OK = 0


def _count(low: int, high: int) -> Callable[[str], int]:
    """A flag's whole number from `low` to `high` (ASCII digits only: no "1e3", "10**12",
    "1_000" or other scripts' digits), else argparse's one-line error."""
    def parse(text: str) -> int:
        value = ascii_decimal(text, max_digits=len(str(high)))
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low} to {high}, "
                                             f"got {quote_value(text, 40)}")
        return value

    return parse


def _batches(text: str) -> tuple[int, ...]:
    parts = [ascii_decimal(part, max_digits=len(str(MAX_BATCH_SIZE)))
             for part in text.split(",") if part.strip()]
    values = tuple(sorted({v for v in parts if v is not None}))
    if not values or None in parts or values[0] < 1 or values[-1] > MAX_BATCH_SIZE \
            or len(values) > MAX_BATCH_SIZES:
        raise argparse.ArgumentTypeError(
            f"must be up to {MAX_BATCH_SIZES} comma-separated batch sizes from 1 to "
            f"{MAX_BATCH_SIZE}, got {quote_value(text, 40)}")
    return values


class _Parser(argparse.ArgumentParser):
    """argparse's errors as one line naming the flag and the fix (not its usage block)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {' '.join(message.split())}; see {self.prog} --help",
              file=sys.stderr)
        raise SystemExit(EXIT_INVALID)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="vllm-specdec whatif",
        description="Replay logged requests through the draft-free speculative methods vLLM "
                    "runs (exact under greedy decoding) and predict the speedup per batch "
                    "size. Nothing is downloaded.")
    p.add_argument("--model", required=True, metavar="DIR",
                   help="local checkpoint directory (its tokenizer and chat template are used)")
    p.add_argument("--traffic", required=True, metavar="FILE",
                   help="JSONL ({prompt|messages, completion} or {request, response} per line) "
                        "or ShareGPT JSON (a regular file)")
    p.add_argument("--method", action="append", choices=METHODS,
                   help="replay this method (repeatable; default: all three)")
    p.add_argument("--k", action="append", type=_count(1, MAX_SPEC_TOKENS), metavar="N",
                   help=f"num_speculative_tokens, 1 to {MAX_SPEC_TOKENS} (repeatable; default: "
                        "each method's own)")
    for flag in ("--prompt-lookup-min", "--prompt-lookup-max"):
        p.add_argument(flag, type=_count(1, MAX_NGRAM_LOOKUP), metavar="N",
                       help=f"ngram, 1 to {MAX_NGRAM_LOOKUP}")
    p.add_argument("--costs", metavar="FILE",
                   help="step costs from `vllm-specdec status --json` of a running engine")
    p.add_argument("--platform", choices=("cpu", "cuda", "rbln"),
                   help="the prior's platform (default: cuda with --gpu, else cpu)")
    p.add_argument("--gpu", metavar="NAME", help="hardware table row, e.g. H100-SXM")
    p.add_argument("--runner", choices=("v1", "v2"),
                   help="the target's model runner, as VLLM_USE_V2_MODEL_RUNNER=0/1 forces it "
                        "(default: vLLM's choice: Model Runner V2 for ngram on cuda)")
    p.add_argument("--batches", type=_batches, metavar="B,B,...",
                   help=f"batch sizes to predict, 1 to {MAX_BATCH_SIZE} (default 1,2,4,...,128)")
    p.add_argument("--max-requests", type=_count(1, MAX_TRAFFIC_REQUESTS), metavar="N",
                   help=f"replay the first N requests (at most {MAX_TRAFFIC_REQUESTS})")
    p.add_argument("--max-model-len", type=_count(2, MAX_MODEL_LEN), metavar="N",
                   help=f"context length, 2 to {MAX_MODEL_LEN} (default: the checkpoint's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="FILE.png",
                   help="write the speedup plot here (.png, .svg, .pdf; needs matplotlib)")
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
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a flag's one-line error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_INVALID
    from vllm_specdec_plugin.whatif.run import DEFAULT_BATCHES, WhatifOptions, run_whatif

    if (args.prompt_lookup_min or args.prompt_lookup_max) and args.method \
            and "ngram" not in args.method:
        return _fail("--prompt-lookup-min/--prompt-lookup-max apply to ngram only; add "
                     "--method ngram or drop them")
    if args.prompt_lookup_min and args.prompt_lookup_max \
            and args.prompt_lookup_min > args.prompt_lookup_max:
        return _fail(f"--prompt-lookup-min {args.prompt_lookup_min} is above "
                     f"--prompt-lookup-max {args.prompt_lookup_max}; lower the first")
    if args.gpu and args.platform not in (None, "cuda"):
        return _fail(f"--gpu {args.gpu} with --platform {args.platform}: --gpu names a GPU row; "
                     "use --platform cuda or drop --gpu")
    from vllm_specdec_plugin.whatif import render

    if args.plot is not None and (problem := render.plot_problem(args.plot)):
        return _fail(problem)
    options = WhatifOptions(
        model=args.model, traffic=args.traffic, configs=configs_of(args), costs=args.costs,
        platform=args.platform, gpu=args.gpu, batches=args.batches or DEFAULT_BATCHES,
        max_requests=args.max_requests, max_model_len=args.max_model_len, runner=args.runner)
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
    print(render.dumps(report) if args.json else render.render_table(report), flush=True)
    if args.plot:  # checked up front; the report is out before the image is drawn
        try:
            render.plot(report, args.plot)
        except (OSError, ImportError, ValueError) as exc:
            return _fail(f"--plot {args.plot}: cannot write it ({type(exc).__name__}: "
                         f"{str(exc)[:120]}); the report above is complete")
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
