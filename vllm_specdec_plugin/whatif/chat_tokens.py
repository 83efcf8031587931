"""Chat prompts as vLLM's server tokenizes them, each turn of a conversation without
re-tokenizing its whole history: linear in the line where the chat template allows it, bounded
where it does not.

vLLM renders each request's messages with the chat template (`add_generation_prompt=True`
unless the request said otherwise) and encodes the text with `add_special_tokens=False`
(`tokens.py` has the rules). A conversation replays one request per assistant turn, with the
history before it, so rendering and encoding each turn anew costs the square of the line (an
806 KB line took 60 s and 1.7 GB). Here, per line (`ChatPrompts`):

- each turn is still rendered by the template, exactly as the server renders it (the template
  may treat the last messages differently); that is cheap (memcpy speed, a few us a message);
- the line's longest history F is encoded once, with offsets;
- a turn's text P shares a prefix with F. A fast tokenizer cuts the text at its added tokens
  (`<|im_start|>`, `<|eot_id|>`...) before anything else and encodes the pieces between them
  independently (the normalizer, the pre-tokenizer and the model run per piece; only the
  first piece of the text is told it is first, as Metaspace's `prepend_scheme: first` asks), so
  P's ids are F's ids up to the last added token A inside the common prefix, followed by the
  ids of P from A on (encoded as a text that starts with A, so its first piece is not first
  either). The first id of that tail must be A's, else P is encoded whole;
- turns that are not a prefix (a template that drops earlier reasoning, say) are encoded whole.

What a line may cost is bounded (`core/limits.py`), checked before the work: the messages and
characters its turns render (`MAX_LINE_RENDERED_MESSAGES`, `MAX_LINE_RENDERED_CHARS`) and the
characters it tokenizes beyond F (`MAX_LINE_TOKENIZED_CHARS`); a turn past a bound is skipped
with why, and so are the line's later turns. Slow (Python) tokenizers encode every turn whole,
within the same bounds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vllm_specdec_plugin.core.errors import quote_value
from vllm_specdec_plugin.core.limits import (
    MAX_LINE_RENDERED_CHARS,
    MAX_LINE_RENDERED_MESSAGES,
    MAX_LINE_TOKENIZED_CHARS,
)
from vllm_specdec_plugin.inputs.traffic import TrafficRecord

Encode = Callable[[list[str], bool], list[Any]]
"""encode(texts, add_special_tokens): each text's ids, or why it cannot be encoded (a str)."""


class Bad(Exception):
    """One record that cannot be replayed, and why."""


def render(tokenizer: Any, record: TrafficRecord) -> str:
    """The chat prompt as vLLM renders it (tokenized by the caller, without special tokens)."""
    if not getattr(tokenizer, "chat_template", None):
        raise Bad("the model has no chat template")
    kwargs = {"add_generation_prompt": True, **(record.chat_kwargs or {})}
    try:
        text = tokenizer.apply_chat_template(list(record.messages or ()), tokenize=False,
                                             **kwargs)
    except Exception as exc:  # a template may raise anything (jinja2's raise_exception)
        raise Bad(f"the chat template fails on it ({type(exc).__name__}: "
                  f"{quote_value(str(exc), 160)})") from None
    if not isinstance(text, str):
        raise Bad(f"the chat template gave {type(text).__name__}, not text")
    return text


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of `a` and `b` (C-speed comparisons of halving
    slices: linear, unlike a character loop in Python)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        mid = (low + high) // 2
        if a[low:mid] == b[low:mid]:
            low = mid
        else:
            high = mid
    return low


@dataclass
class _Longest:
    """The line's longest history, encoded once: its text, ids, and where its added tokens
    are (token index, start and end character), the points a turn's tail may start from."""

    messages: tuple[dict[str, str], ...]
    kwargs: dict[str, Any] | None
    text: str
    ids: np.ndarray
    anchor_index: np.ndarray
    anchor_start: np.ndarray
    anchor_end: np.ndarray


class ChatPrompts:
    """The chat prompts of the traffic's records, line after line; the per-line state (what
    was rendered and tokenized, the longest history) lasts until the line changes, so a
    conversation split across two batches is still one line."""

    def __init__(self, tokenizer: Any, encode: Encode) -> None:
        self.tokenizer, self.encode = tokenizer, encode
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        self.added = {int(i): str(getattr(t, "content", t)) for i, t in added.items()}
        self.incremental = bool(getattr(tokenizer, "is_fast", False)) and bool(self.added)
        self.line: int | None = None
        self.messages = self.chars = self.tokenized = 0
        self.over: str | None = None
        self.longest: _Longest | None = None

    def prompts(self, records: Sequence[TrafficRecord]) -> list[np.ndarray | str]:
        """Each chat record's prompt ids (int32), or why it cannot be replayed; `records` are
        chat records without logged prompt ids, in traffic order."""
        out: list[np.ndarray | str] = []
        start = 0
        while start < len(records):  # one line's records at a time
            end = start + 1
            while end < len(records) and records[end].line == records[start].line:
                end += 1
            out.extend(self._line(records[start:end]))
            start = end
        return out

    def _line(self, records: Sequence[TrafficRecord]) -> list[np.ndarray | str]:
        """One line's records: the longest history encoded once, every other turn as its
        shared ids and its tail; one rendered text held at a time besides the longest's."""
        if records[0].line != self.line:
            self.line, self.messages, self.chars, self.tokenized = records[0].line, 0, 0, 0
            self.over, self.longest = None, None
        out: list[np.ndarray | str] = [""] * len(records)
        admitted = []
        for i, record in enumerate(records):
            why = self._admit(record, records[i - 1] if i else None)
            if why is None:
                admitted.append(i)
            else:
                out[i] = why
        longest = None
        while admitted and longest is None:  # the longest history that renders and encodes
            last = max(admitted, key=lambda i: len(records[i].messages or ()))
            try:
                longest = self._longest(records[last])
            except Bad as exc:
                out[last] = str(exc)
                admitted.remove(last)
        tails: list[tuple[int, int, str]] = []  # (record, the longest's ids kept, tail text)
        stopped: str | None = None  # the bound on tokenizing passed at an earlier turn
        for i in admitted:
            assert longest is not None
            if stopped is not None:
                out[i] = stopped
                continue
            try:
                text = self._text(records[i], longest)
            except Bad as exc:
                out[i] = str(exc)
                continue
            if text is longest.text or text == longest.text:
                out[i] = longest.ids
                continue
            keep, tail = self._split(longest, text)
            if self.tokenized + len(tail) > MAX_LINE_TOKENIZED_CHARS:
                stopped = out[i] = _over(f"{MAX_LINE_TOKENIZED_CHARS} characters tokenized "
                                         "(the chat template does not render earlier turns "
                                         "as a prefix of later ones)")
                self.over = self.over or stopped
                continue
            self.tokenized += len(tail)
            tails.append((i, keep, tail))
        encoded = self.encode([tail for _, _, tail in tails], False)
        for (i, keep, _), ids in zip(tails, encoded, strict=True):
            assert longest is not None
            out[i] = self._join(longest, keep, records[i], ids)
        return out

    def _admit(self, record: TrafficRecord, previous: TrafficRecord | None) -> str | None:
        """Why the line's rendering bounds refuse `record` (counted before rendering), or
        None; a record with the previous one's very messages (an OpenAI response's choices)
        renders nothing new."""
        if self.over is not None:
            return self.over
        if previous is not None and record.messages is previous.messages:
            return None
        messages = record.messages or ()
        chars = sum(len(m.get("content") or "") for m in messages)
        if self.messages + len(messages) > MAX_LINE_RENDERED_MESSAGES:
            self.over = _over(f"{MAX_LINE_RENDERED_MESSAGES} messages rendered")
        elif self.chars + chars > MAX_LINE_RENDERED_CHARS:
            self.over = _over(f"{MAX_LINE_RENDERED_CHARS} characters rendered")
        self.messages += len(messages)
        self.chars += chars
        return self.over

    def _text(self, record: TrafficRecord, longest: _Longest) -> str:
        """The record's rendered text; the longest's own where it has its messages."""
        if record.messages is longest.messages and record.chat_kwargs == longest.kwargs:
            return longest.text
        return render(self.tokenizer, record)

    def _longest(self, record: TrafficRecord) -> _Longest:
        """The line's longest history rendered and encoded once (with its added tokens'
        places; kept for the line's next batch), or `Bad` with why not."""
        held = self.longest
        if held is not None and record.messages is held.messages \
                and record.chat_kwargs == held.kwargs:
            return held
        text = render(self.tokenizer, record)
        if held is not None and held.text == text:
            return held
        if not self.incremental:
            (ids,) = self.encode([text], False)
            if isinstance(ids, str):
                raise Bad(ids)
            none = np.zeros(0, dtype=np.int64)
            self.longest = _Longest(record.messages or (), record.chat_kwargs, text,
                                    np.asarray(ids, dtype=np.int32), none, none, none)
            return self.longest
        try:
            encoding = self.tokenizer([text], add_special_tokens=False,
                                      return_offsets_mapping=True)
        except Exception:  # why, as `encode` says it
            (why,) = self.encode([text], False)
            raise Bad(why if isinstance(why, str) else "the tokenizer refuses its text") from None
        ids = np.asarray(encoding["input_ids"][0], dtype=np.int32)
        offsets = encoding["offset_mapping"][0]
        found = [(i, offsets[i][0], offsets[i][1])
                 for i in np.flatnonzero(np.isin(ids, list(self.added))).tolist()
                 if text[offsets[i][0]:offsets[i][1]] == self.added[int(ids[i])]]
        index, starts, ends = (np.asarray([row[j] for row in found], dtype=np.int64)
                               for j in range(3))
        self.longest = _Longest(record.messages or (), record.chat_kwargs, text, ids,
                                index, starts, ends)
        return self.longest

    def _split(self, longest: _Longest, text: str) -> tuple[int, str]:
        """(how many of the longest's ids `text` starts with, the rest of `text` to encode):
        up to the last added token inside their common prefix, the tail from that token on."""
        if not len(longest.anchor_index):
            return 0, text
        shared = common_prefix(longest.text, text)
        k = int(np.searchsorted(longest.anchor_end, shared, side="right")) - 1
        if k < 0:
            return 0, text
        return int(longest.anchor_index[k]), text[int(longest.anchor_start[k]):]

    def _join(self, longest: _Longest, keep: int, record: TrafficRecord, tail: Any
              ) -> np.ndarray | str:
        """The longest's first `keep` ids and the tail's, checked: the tail starts with the
        added token the longest has there; else the record's text encoded whole."""
        if isinstance(tail, str):
            return tail
        if keep == 0:
            return np.asarray(tail, dtype=np.int32)
        if tail and tail[0] == longest.ids[keep]:
            return np.concatenate([longest.ids[:keep], np.asarray(tail, dtype=np.int32)])
        try:
            text = render(self.tokenizer, record)
        except Bad as exc:
            return str(exc)
        if self.tokenized + len(text) > MAX_LINE_TOKENIZED_CHARS:
            self.over = self.over or _over(f"{MAX_LINE_TOKENIZED_CHARS} characters tokenized")
            return self.over
        self.tokenized += len(text)
        (ids,) = self.encode([text], False)
        return ids if isinstance(ids, str) else np.asarray(ids, dtype=np.int32)


def _over(what: str) -> str:
    return (f"this turn and the line's later ones are skipped: each turn renders its whole "
            f"history, and this line's would pass {what} (the bound on one line)")
