"""The request shapes of a traffic file: one parsed JSON entry -> `TrafficRecord`s, or why not.

`inputs/traffic.py` streams the file and counts; this module knows the shapes: `{"prompt",
"completion"}`, `{"messages", "completion"}`, an OpenAI `{"request", "response"}` pair (chat and
completions, each choice one record, with vLLM's `return_token_ids` ids where logged) and a
ShareGPT conversation (each assistant turn one record, with the history before it). Every
string, list and id is bounded (`core/limits.py`); a bad entry raises `BadEntry` with why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_specdec_plugin.core.errors import quote_value
from vllm_specdec_plugin.core.limits import (
    MAX_REQUEST_TOKENS,
    MAX_TRAFFIC_MESSAGES,
    MAX_TRAFFIC_TEXT_CHARS,
)

_ROLES = {"system": "system", "developer": "system", "user": "user", "human": "user",
          "assistant": "assistant", "gpt": "assistant", "tool": "tool"}
"""Roles as the chat template gets them. ShareGPT's human/gpt are user/assistant; OpenAI's
"developer" is "system", as vLLM renders it for templates without a developer role."""
_ID_END = 2 ** 31
"""Token ids are int32 (vLLM's token buffers); a logged id outside [0, 2**31) is no token."""
_TEXT_PARTS = ("text", "input_text", "output_text")
"""Content parts vLLM reads as text (`renderers/chat_utils.py` `TEXT_PART_TYPES`)."""
_TEMPLATE_KEYS = ("add_generation_prompt", "continue_final_message", "tools", "documents")
"""Chat request fields vLLM hands the template (`ChatCompletionRequest.build_chat_params`)."""
_NOT_TEMPLATE_VARS = {"chat_template", "tokenize", "return_dict", "padding", "truncation",
                      "max_length", "return_tensors", "return_assistant_tokens_mask",
                      "tokenizer_kwargs"}
"""`chat_template_kwargs` vLLM refuses or that steer the tokenizer, not the template."""


@dataclass(frozen=True)
class TrafficRecord:
    """One request to replay: its prompt (plain text, or a chat history the model's chat
    template renders) and what the model answered. Token ids, where the log carries them
    (vLLM's `return_token_ids`), make the replay exact and are used as they are."""

    line: int
    """The JSONL line (1-based), or the ShareGPT array's conversation (1-based)."""
    prompt: str | None
    messages: tuple[dict[str, str], ...] | None
    """Roles system/user/assistant/tool, content text (text parts joined with "\\n", as vLLM
    joins them). Tool calls in the history are not kept: exact only with prompt ids."""
    completion: str
    prompt_token_ids: tuple[int, ...] | None = None
    completion_token_ids: tuple[int, ...] | None = None
    add_special_tokens: bool | None = None
    """A completions request's own `add_special_tokens`; None: vLLM's default."""
    chat_kwargs: dict[str, Any] | None = None
    """What the chat request gives the template (add_generation_prompt, tools, its
    chat_template_kwargs...); None: vLLM's defaults."""


_NO_ANSWER = "no answer was logged (whatif replays the text the model answered)"


class BadEntry(Exception):
    """One entry that cannot be replayed, and why (its text: no line number)."""


def _answer(obj: dict[str, Any], key: str, ids: tuple[int, ...] | None, where: str = "") -> str:
    """The logged answer's text: empty only where its token ids are logged."""
    if obj.get(key) is None:
        raise BadEntry(f'"{where}{key}" is missing: {_NO_ANSWER}')
    text = _text(obj, key, where)
    if not text and not ids:
        raise BadEntry(f'"{where}{key}" is empty: {_NO_ANSWER}')
    return text


def _kind(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             type(None): "null"}
    return names.get(type(value), "a number")


def _text(obj: dict[str, Any], key: str, where: str = "") -> str:
    value = obj.get(key)
    name = f'"{where}{key}"'
    if value is None:
        raise BadEntry(f"{name} is missing")
    if not isinstance(value, str):
        raise BadEntry(f"{name} is {_kind(value)}, not a string")
    if len(value) > MAX_TRAFFIC_TEXT_CHARS:
        raise BadEntry(f"{name} is {len(value)} characters (at most {MAX_TRAFFIC_TEXT_CHARS})")
    return value


def _ids(value: object, name: str) -> tuple[int, ...] | None:
    """A logged token-id list: ints in int32's range, at most `MAX_REQUEST_TOKENS`."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise BadEntry(f'"{name}" is {_kind(value)}, not a list of token ids')
    if len(value) > MAX_REQUEST_TOKENS:
        raise BadEntry(f'"{name}" holds {len(value)} ids (at most {MAX_REQUEST_TOKENS})')
    # Checked in C (map, set, min, max): a logged completion holds thousands of ids.
    if value and not (set(map(type, value)) == {int} and min(value) >= 0
                      and max(value) < _ID_END):
        i, item = next((i, v) for i, v in enumerate(value)
                       if type(v) is not int or not 0 <= v < _ID_END)
        what = (f"{item}, outside 0..{_ID_END - 1}" if type(item) is int else _kind(item))
        raise BadEntry(f'"{name}" is not a list of token ids (item {i} is {what})')
    return tuple(value)


def _content(value: object, where: str) -> str:
    if value is None:  # an assistant turn that only called tools
        return ""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise BadEntry(f'"{where}.content" is {_kind(value)}, not text')
    texts = []
    for i, part in enumerate(value):
        kind = part.get("type", "text") if isinstance(part, dict) else None
        if kind not in _TEXT_PARTS or not isinstance(part.get("text"), str):
            shown = quote_value(kind) if isinstance(kind, str) else "a non-text"
            raise BadEntry(f"multimodal content is not replayed ({where}.content[{i}] is "
                           f"{shown} part)")
        texts.append(part["text"])
    return "\n".join(texts)  # as vLLM joins text parts for string-content templates


def _messages(value: object, name: str, role_key: str = "role",
              content_key: str = "content") -> tuple[dict[str, str], ...]:
    if not isinstance(value, list):
        raise BadEntry(f'"{name}" is {_kind(value)}, not a list of messages')
    if not value:
        raise BadEntry(f'"{name}" is empty')
    if len(value) > MAX_TRAFFIC_MESSAGES:
        raise BadEntry(f'"{name}" has {len(value)} messages (at most {MAX_TRAFFIC_MESSAGES})')
    out, chars = [], 0
    for i, message in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(message, dict):
            raise BadEntry(f'"{where}" is {_kind(message)}, not a message object')
        given = message.get(role_key)
        role = _ROLES.get(given) if isinstance(given, str) else None
        if role is None:
            said = "missing" if given is None else quote_value(given)
            raise BadEntry(f'"{where}.{role_key}" is {said} (known: {", ".join(_ROLES)})')
        content = _content(message.get(content_key), where)
        chars += len(content)
        out.append({"role": role, "content": content})
    if chars > MAX_TRAFFIC_TEXT_CHARS:
        raise BadEntry(f'"{name}" holds {chars} characters (at most {MAX_TRAFFIC_TEXT_CHARS})')
    return tuple(out)


def _conversation(obj: dict[str, Any], line: int) -> list[TrafficRecord]:
    """Each assistant turn after some history, replayed with the history before it."""
    if "conversations" in obj:
        turns = _messages(obj["conversations"], "conversations", "from", "value")
    else:
        turns = _messages(obj.get("messages"), "messages")
    answers = [i for i, turn in enumerate(turns) if i and turn["role"] == "assistant"]
    records = [TrafficRecord(line, None, turns[:i], turns[i]["content"]) for i in answers
               if turns[i]["content"]]  # an empty turn logged no answer (or only tool calls)
    if not records:
        raise BadEntry(f"{len(answers)} assistant turn(s) after another turn, all empty: "
                       f"{_NO_ANSWER}" if answers else
                       f"the conversation has no assistant turn after another turn: {_NO_ANSWER}")
    return records


def _chat_kwargs(request: dict[str, Any]) -> dict[str, Any] | None:
    """The template arguments vLLM derives from a chat request (`build_chat_params`)."""
    given = request.get("chat_template_kwargs")
    given = given if isinstance(given, dict) else {}
    kwargs = {k: v for k, v in given.items() if k not in _NOT_TEMPLATE_VARS}
    kwargs.update({k: request[k] for k in _TEMPLATE_KEYS if request.get(k) is not None})
    effort = request.get("reasoning_effort")
    if isinstance(effort, str):
        kwargs["reasoning_effort"] = effort
        kwargs.setdefault("enable_thinking", effort != "none")
    return kwargs or None


def _openai(obj: dict[str, Any], line: int) -> list[TrafficRecord]:
    request, response = obj.get("request"), obj.get("response")
    for name, value in (("request", request), ("response", response)):
        if not isinstance(value, dict):
            raise BadEntry(f'"{name}" is missing' if value is None else
                           f'"{name}" is {_kind(value)}, not an object')
    assert isinstance(request, dict) and isinstance(response, dict)
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices:
        error = response.get("error")
        said = error.get("message") if isinstance(error, dict) else error
        raise BadEntry("the response has no choices" + (
            f" (an error response: {quote_value(said)})" if said is not None else ""))
    chat = "messages" in request
    messages = _messages(request["messages"], "request.messages") if chat else None
    prompt, ids = None, None
    if not chat:
        given = request.get("prompt")
        if isinstance(given, list) and len(given) == 1 and not isinstance(given[0], int):
            given = given[0]  # a one-prompt batch
        if isinstance(given, list) and any(isinstance(item, (str, list)) for item in given):
            raise BadEntry(f'"request.prompt" is a batch of {len(given)} prompts (replayed: one '
                           "prompt a request)")
        if isinstance(given, list):
            ids = _ids(given, "request.prompt")  # a prompt given as token ids
        elif given is None:
            raise BadEntry('the request has neither "messages" nor "prompt"')
        else:
            prompt = _text({"prompt": given}, "prompt", "request.")
    special = request.get("add_special_tokens")
    kwargs = _chat_kwargs(request) if chat else None
    records = []
    for i, choice in enumerate(choices):
        where = f"response.choices[{i}]"
        if not isinstance(choice, dict):
            raise BadEntry(f'"{where}" is {_kind(choice)}, not an object')
        token_ids = _ids(choice.get("token_ids"), f"{where}.token_ids")
        logged = choice.get("prompt_token_ids")  # completions: per choice; chat: response
        logged = response.get("prompt_token_ids") if logged is None else logged
        given_ids = ids if ids is not None else _ids(logged, "prompt_token_ids")
        if chat:
            message = choice.get("message")
            if not isinstance(message, dict):
                raise BadEntry(f'"{where}.message" is missing')
            text = _content(message.get("content"), f"{where}.message")
            reasoning = message.get("reasoning") or message.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:  # generated before the answer
                text = f"{reasoning}\n{text}" if text else reasoning
            if not text and token_ids is None:
                raise BadEntry(f'"{where}.message" has no text (a tool call is replayed only '
                               "with its token_ids)")
        else:
            text = _answer(choice, "text", token_ids, f"{where}.")
            if request.get("echo") is True and prompt and text.startswith(prompt):
                text = text[len(prompt):]
        records.append(TrafficRecord(line, prompt, messages, text, given_ids, token_ids,
                                     special if isinstance(special, bool) else None, kwargs))
    return records


def records_of(obj: object, line: int) -> list[TrafficRecord]:
    """The records of one JSONL line or ShareGPT conversation, else `BadEntry` with why."""
    if not isinstance(obj, dict):
        raise BadEntry(f"{_kind(obj)} is not a request (one JSON object per line)")
    if "request" in obj or "response" in obj:
        return _openai(obj, line)
    ids = (_ids(obj.get("prompt_token_ids"), "prompt_token_ids"),
           _ids(obj.get("completion_token_ids"), "completion_token_ids"))
    if "messages" in obj and "completion" in obj:
        return [TrafficRecord(line, None, _messages(obj["messages"], "messages"),
                              _answer(obj, "completion", ids[1]), *ids)]
    if "prompt" in obj:
        return [TrafficRecord(line, _text(obj, "prompt"), None,
                              _answer(obj, "completion", ids[1]), *ids)]
    if "conversations" in obj or "messages" in obj:
        return _conversation(obj, line)
    raise BadEntry('none of "prompt", "messages", "request" or "conversations" is there'
               if "completion" not in obj else '"prompt" is missing')
