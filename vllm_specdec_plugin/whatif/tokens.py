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
from vllm_specdec_plugin.whatif.chat_tokens import ChatPrompts
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
    stop_reason: str | None = None
    """Why it stopped, when it did."""


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


class _Encoder:
    """Records -> (prompt ids, completion ids) a batch at a time. What a line's records share
    is worked out once, whatever the batches: a chat history (`chat_tokens.ChatPrompts`: each
    turn's history is not re-tokenized), and the prompt text or logged ids all the choices of
    one OpenAI response repeat (kept from one batch to the next while the line lasts)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.chats = ChatPrompts(tokenizer, lambda texts, special: _encode(tokenizer, texts,
                                                                           special))
        self.shared: dict[tuple[int, bool | None], tuple[object, Any]] = {}  # one line's
        self.line: int | None = None

    def _ids(self, given: tuple[int, ...] | None) -> np.ndarray | None:
        if given is None:
            return None
        found = self._known(given, None)
        return (self._keep(given, None, np.asarray(given, dtype=np.int32)) if found is None
                else found)

    def _known(self, obj: object, special: bool | None) -> Any:
        """What was worked out for this very object (and `add_special_tokens`) on this line."""
        hit = self.shared.get((id(obj), special))
        return None if hit is None or hit[0] is not obj else hit[1]

    def _keep(self, obj: object, special: bool | None, value: Any) -> Any:
        self.shared[(id(obj), special)] = (obj, value)
        return value

    def batch(self, batch: list[TrafficRecord]) -> list[tuple[Any, Any] | str]:
        """Each record's (prompt ids, completion ids), or why not; the texts of a batch are
        encoded in two calls, one per `add_special_tokens` value."""
        chats = iter(self.chats.prompts([r for r in batch if r.prompt_token_ids is None
                                         and r.messages is not None]))
        plans: list[Any] = []
        for record in batch:
            if record.line != self.line:
                self.shared.clear()
                self.line = record.line
            prompt: Any = self._ids(record.prompt_token_ids)
            if prompt is None and record.messages is not None:
                prompt = next(chats)
            elif prompt is None:
                special = True if record.add_special_tokens is None else record.add_special_tokens
                text = record.prompt or ""
                prompt = self._known(text, special)
                prompt = (text, special) if prompt is None else prompt
            completion = self._ids(record.completion_token_ids)
            plans.append(prompt if isinstance(prompt, str) else
                         [prompt, (record.completion, False) if completion is None else
                          completion])
        for special in (True, False):
            slots = [(plan, side) for plan in plans if not isinstance(plan, str)
                     for side in (0, 1)
                     if isinstance(plan[side], tuple) and plan[side][1] is special]
            texts = {id(plan[side][0]): plan[side][0] for plan, side in slots}
            encoded = dict(zip(texts, _encode(self.tokenizer, list(texts.values()), special),
                               strict=True))
            for plan, side in slots:
                text = plan[side][0]
                ids = encoded[id(text)]
                plan[side] = ids if isinstance(ids, str) else np.asarray(ids, dtype=np.int32)
                if side == 0 and not isinstance(ids, str):
                    self._keep(text, special, plan[side])  # for its line's other choices
        return [plan if isinstance(plan, str) else (plan[0], plan[1]) for plan in plans]


def tokenize_traffic(tokenizer: Any, records: Iterable[TrafficRecord],
                     max_tokens_per_request: int = MAX_REQUEST_TOKENS,
                     progress: Callable[[int], None] | None = None, *, unit: str = "line",
                     max_total_tokens: int | None = None) -> TokenizedTraffic:
    """The records as `ReplayRequest`s (int32 ids), in order; a record that cannot be
    replayed (no chat template, empty prompt or completion, over `max_tokens_per_request`) is
    skipped and counted. `progress(n)` is called with the number of records done since its
    last call. `unit` names where a record came from in messages ("line", "conversation")."""
    if max_total_tokens is None:  # read here, not at import: the bound on all tokens held
        max_total_tokens = MAX_TRAFFIC_TOKENS
    requests: list[ReplayRequest] = []
    skipped, total = 0, 0
    first_bad: tuple[int, str] | None = None
    encoder = _Encoder(tokenizer)
    for batch in _batches(records, BATCH):
        for done, (record, sides) in enumerate(zip(batch, encoder.batch(batch), strict=True)):
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
                return TokenizedTraffic(requests, skipped, first_bad, truncated=True,
                                        stop_reason=f"stopped at {max_total_tokens:,} tokens "
                                                    "in all (the bound on tokens held for the "
                                                    "replay); the rest was not tokenized")
            total += len(prompt) + len(completion)
            requests.append(ReplayRequest(prompt, completion, record.line))
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
    if not len(prompt):
        return "the prompt is empty (vLLM refuses an empty prompt)"
    if not len(completion):
        return "the completion is empty (no tokens to replay)"
    if len(prompt) + len(completion) > limit:
        return (f"{len(prompt) + len(completion)} tokens (prompt {len(prompt)} + completion "
                f"{len(completion)}), over the bound of {limit} per request")
    return None
