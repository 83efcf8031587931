"""Traffic records -> the token ids vLLM's OpenAI server would have run, with the model's own
tokenizer and chat template.

The replay is exact only if its tokens are the engine's, so every rule here is vLLM 0.32's:
- completions: the prompt text is encoded with `add_special_tokens=True` unless the request
  said otherwise (`CompletionRequest.add_special_tokens` defaults to True,
  vllm/entrypoints/openai/completion/protocol.py, handed to `tokenizer.encode` by
  `TokenizeParams.get_encode_kwargs`, vllm/renderers/params.py);
- chat: the messages go through the chat template with `add_generation_prompt=True` (the
  request's default) and the rendered text is encoded with `add_special_tokens=False`: vLLM's
  HF renderer calls `apply_chat_template` with `tokenize=True` (`safe_apply_chat_template`,
  vllm/renderers/hf.py), which in transformers encodes with `add_special_tokens=False`, so the
  chat request's own `add_special_tokens` never reaches the tokenizer;
- a completion's text is encoded with `add_special_tokens=False` (it continues the prompt);
- token ids in the log (vLLM's `return_token_ids`) are used as they are.
Layer 5: transformers is imported only when a tokenizer is loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.limits import MAX_REQUEST_TOKENS, MAX_TRAFFIC_TOKENS
from vllm_specdec_plugin.inputs.files import local_path
from vllm_specdec_plugin.inputs.traffic import TrafficRecord
from vllm_specdec_plugin.whatif.types import ReplayRequest

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
                   "spiece.model")
"""A checkpoint has a tokenizer when it has one of these (fast, config, SentencePiece, BPE)."""
BATCH = 512
"""Records encoded per call: a fast tokenizer encodes a batch on all cores."""
_FIX = "give a local checkpoint directory with its tokenizer files"


class WhatifError(SpecDecodeConfigError):
    """Bad input to `vllm-specdec whatif` (the model directory, its tokenizer): one line
    naming the input and the fix; the command exits 2."""


@dataclass(frozen=True)
class TokenizedTraffic:
    """The records as the engine would see them, and those that cannot be replayed."""

    requests: list[ReplayRequest]
    skipped: int
    first_bad: tuple[int, str] | None
    """The first skipped record: its line and why ('line 4: the model has no chat template')."""
    truncated: bool = False
    """Stopped at `MAX_TRAFFIC_TOKENS` tokens in all (the rest was not tokenized)."""


def load_tokenizer(model_dir: str) -> Any:
    """The tokenizer of the local checkpoint at `model_dir`: read from its files only
    (`local_files_only`: nothing is downloaded, as with HF_HUB_OFFLINE=1), never its own code
    (`trust_remote_code=False`). Anything else is a `WhatifError`."""
    shown = f"--model {quote_value(model_dir, 200)}"
    try:
        path = local_path(model_dir, "--model")
    except SpecDecodeConfigError as exc:
        raise WhatifError(exc.message) from None
    if path is None:
        raise WhatifError(f"{shown}: nothing is there; {_FIX}")
    if not path.is_dir():
        raise WhatifError(f"{shown}: not a directory; {_FIX}")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise WhatifError(f"{shown}: no tokenizer files (none of {', '.join(TOKENIZER_FILES)}); "
                          f"{_FIX}")
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(path), local_files_only=True,
                                             trust_remote_code=False)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ImportError...
        said = str(exc).strip().splitlines()
        raise WhatifError(f"{shown}: its tokenizer does not load ({type(exc).__name__}"
                          f"{': ' + quote_value(said[0], 160) if said else ''}); {_FIX}") from None


class _Bad(Exception):
    """One record that cannot be replayed, and why."""


def _render(tokenizer: Any, record: TrafficRecord) -> str:
    """The chat prompt as vLLM renders it (tokenized by the caller, without special tokens)."""
    if not getattr(tokenizer, "chat_template", None):
        raise _Bad("the model has no chat template")
    kwargs = {"add_generation_prompt": True, **(record.chat_kwargs or {})}
    try:
        text = tokenizer.apply_chat_template(list(record.messages or ()), tokenize=False,
                                             **kwargs)
    except Exception as exc:  # a template may raise anything (jinja2's raise_exception)
        raise _Bad(f"the chat template fails on it ({type(exc).__name__}: "
                   f"{quote_value(str(exc), 160)})") from None
    if not isinstance(text, str):
        raise _Bad(f"the chat template gave {type(text).__name__}, not text")
    return text


def _encode(tokenizer: Any, texts: list[str], special: bool) -> list[list[int] | str]:
    """Each text's ids (one batched call), or why it cannot be encoded (a lone surrogate from
    a JSON escape makes the fast tokenizer refuse the whole batch, so then one at a time)."""
    if not texts:
        return []
    try:
        return list(tokenizer(texts, add_special_tokens=special)["input_ids"])
    except Exception:  # find the texts at fault
        out: list[list[int] | str] = []
        for text in texts:
            try:
                out.append(list(tokenizer(text, add_special_tokens=special)["input_ids"]))
            except Exception as exc:
                out.append(f"the tokenizer refuses its text ({type(exc).__name__})")
        return out


def _batches(records: Iterable[TrafficRecord], size: int) -> Iterator[list[TrafficRecord]]:
    it = iter(records)
    while batch := list(islice(it, size)):
        yield batch


def _given(ids: tuple[int, ...] | None) -> list[int] | None:
    return None if ids is None else list(ids)


def _plan(tokenizer: Any, record: TrafficRecord) -> tuple[Any, Any]:
    """(prompt, completion): each given ids, or (text, add_special_tokens) to encode."""
    prompt: Any = _given(record.prompt_token_ids)
    if prompt is None and record.messages is not None:
        prompt = (_render(tokenizer, record), False)
    elif prompt is None:
        special = True if record.add_special_tokens is None else record.add_special_tokens
        prompt = (record.prompt or "", special)
    completion = _given(record.completion_token_ids)
    return prompt, (record.completion, False) if completion is None else completion


def _batch_ids(tokenizer: Any, batch: list[TrafficRecord]) -> list[tuple[Any, Any] | str]:
    """Each record's (prompt ids, completion ids), or why not; the texts of a batch are
    encoded in two calls, one per `add_special_tokens` value."""
    plans: list[Any] = []
    for record in batch:
        try:
            plans.append(list(_plan(tokenizer, record)))
        except _Bad as exc:
            plans.append(str(exc))
    for special in (True, False):
        slots = [(plan, side) for plan in plans if not isinstance(plan, str)
                 for side in (0, 1) if isinstance(plan[side], tuple) and plan[side][1] is special]
        encoded = _encode(tokenizer, [plan[side][0] for plan, side in slots], special)
        for (plan, side), ids in zip(slots, encoded, strict=True):
            plan[side] = ids
    return [plan if isinstance(plan, str) else (plan[0], plan[1]) for plan in plans]


def tokenize_traffic(tokenizer: Any, records: Iterable[TrafficRecord],
                     max_tokens_per_request: int = MAX_REQUEST_TOKENS,
                     progress: Callable[[int], None] | None = None, *, unit: str = "line",
                     max_total_tokens: int = MAX_TRAFFIC_TOKENS) -> TokenizedTraffic:
    """The records as `ReplayRequest`s (int32 ids), in order; a record that cannot be
    replayed (no chat template, empty prompt or completion, over `max_tokens_per_request`) is
    skipped and counted. `progress(n)` is called with the number of records done since its
    last call. `unit` names where a record came from in messages ("line", "conversation")."""
    requests: list[ReplayRequest] = []
    skipped, total = 0, 0
    first_bad: tuple[int, str] | None = None
    for batch in _batches(records, BATCH):
        for done, (record, sides) in enumerate(
                zip(batch, _batch_ids(tokenizer, batch), strict=True)):
            why = _check(sides, max_tokens_per_request)
            if why is not None:
                skipped += 1
                first_bad = first_bad or (record.line, f"{unit} {record.line}: {why}")
                continue
            assert not isinstance(sides, str)  # _check said why otherwise
            prompt, completion = sides
            if total + len(prompt) + len(completion) > max_total_tokens:
                if progress is not None:
                    progress(done)
                return TokenizedTraffic(requests, skipped, first_bad, truncated=True)
            total += len(prompt) + len(completion)
            requests.append(ReplayRequest(np.asarray(prompt, dtype=np.int32),
                                          np.asarray(completion, dtype=np.int32), record.line))
        if progress is not None:
            progress(len(batch))
    return TokenizedTraffic(requests, skipped, first_bad)


def _check(sides: tuple[Any, Any] | str, limit: int) -> str | None:
    """Why a record's (prompt ids, completion ids) cannot be replayed, or None."""
    if isinstance(sides, str):
        return sides
    prompt, completion = sides
    for side in sides:
        if isinstance(side, str):
            return side
    if not prompt:
        return "the prompt is empty (vLLM refuses an empty prompt)"
    if not completion:
        return "the completion is empty (no tokens to replay)"
    if len(prompt) + len(completion) > limit:
        return (f"{len(prompt) + len(completion)} tokens (prompt {len(prompt)} + completion "
                f"{len(completion)}), over the bound of {limit} per request")
    return None
