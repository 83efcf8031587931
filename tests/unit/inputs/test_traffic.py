"""`whatif`'s traffic files (`inputs/traffic.py`): every format, every bad line with its own
message, the counts, the request cap and the whole-file errors as one line. The streaming
bounds (time, memory): test_traffic_properties.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vllm_specdec_plugin.core.limits import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    MIB,
)
from vllm_specdec_plugin.inputs.traffic import (
    TrafficError,
    TrafficFile,
    TrafficRecord,
    parse_traffic_chunks,
    read_traffic,
)

USER = {"role": "user", "content": "hi"}
NO_ANSWER = "no answer was logged (whatif replays the text the model answered)"


def parse(*entries: Any, **kwargs: Any) -> TrafficFile:
    """A JSONL file of `entries` (objects dumped as JSON; bytes and str as they are)."""
    lines = [e if isinstance(e, bytes) else (e if isinstance(e, str) else json.dumps(e)).encode()
             for e in entries]
    return parse_traffic_chunks([b"\n".join(lines) + b"\n"], "t.jsonl", **kwargs)


def why(entry: Any) -> str:
    """Why a file of a good line and then `entry` skips line 2 (without "line 2: ")."""
    traffic = parse({"prompt": "p", "completion": "c"}, entry)
    assert traffic.skipped == 1 and len(traffic.records) == 1, traffic
    assert traffic.first_bad is not None and traffic.first_bad[0] == 2
    assert traffic.first_bad[1].startswith("line 2: ")
    return traffic.first_bad[1].removeprefix("line 2: ")


# --- the formats ---------------------------------------------------------------------------

def test_prompt_completion_with_and_without_token_ids():
    traffic = parse({"prompt": "p", "completion": "c"},
                    {"prompt": "p", "completion": "c", "prompt_token_ids": [1, 2],
                     "completion_token_ids": [3]})
    assert traffic.records == (
        TrafficRecord(1, "p", None, "c"),
        TrafficRecord(2, "p", None, "c", (1, 2), (3,)))
    assert (traffic.format, traffic.entries, traffic.skipped, traffic.first_bad,
            traffic.truncated) == ("jsonl", 2, 0, None, False)


def test_messages_completion_text_parts_joined_and_roles_mapped():
    messages = [{"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "a"},
                                             {"type": "input_text", "text": "b"}]},
                {"role": "assistant", "content": None}, {"role": "tool", "content": "42"}]
    (record,) = parse({"messages": messages, "completion": "c"}).records
    assert record.prompt is None and record.completion == "c"
    assert record.messages == ({"role": "system", "content": "be brief"},
                               {"role": "user", "content": "a\nb"},
                               {"role": "assistant", "content": ""},
                               {"role": "tool", "content": "42"})


def test_openai_chat_pair_each_choice_a_record_with_vllm_token_ids():
    request = {"messages": [USER], "tools": [{"type": "function", "function": {"name": "f"}}],
               "chat_template_kwargs": {"enable_thinking": False, "tokenize": True},
               "add_generation_prompt": True}
    response = {"prompt_token_ids": [5, 6],  # vLLM's return_token_ids: on the response
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "yo"},
                             "token_ids": [7, 8]},
                            {"index": 1, "message": {"role": "assistant", "content": "hey",
                                                     "reasoning": "think"}}]}
    first, second = parse({"request": request, "response": response}).records
    kwargs = {"enable_thinking": False, "add_generation_prompt": True,
              "tools": request["tools"]}  # "tokenize" is not the template's: dropped
    assert first == TrafficRecord(1, None, (USER,), "yo", (5, 6), (7, 8), None, kwargs)
    assert second == TrafficRecord(1, None, (USER,), "think\nhey", (5, 6), None, None, kwargs)


def test_openai_chat_pair_without_token_ids():
    (record,) = parse({"request": {"messages": [USER]},
                       "response": {"choices": [{"message": {"content": "yo"}}]}}).records
    assert record == TrafficRecord(1, None, (USER,), "yo")


def test_openai_chat_tool_call_replayed_only_with_its_token_ids():
    choice = {"message": {"content": None, "tool_calls": [{"id": "x"}]}}
    assert why({"request": {"messages": [USER]}, "response": {"choices": [choice]}}) == (
        '"response.choices[0].message" has no text (a tool call is replayed only with '
        "its token_ids)")
    (record,) = parse({"request": {"messages": [USER]},
                       "response": {"choices": [{**choice, "token_ids": [9]}]}}).records
    assert record.completion == "" and record.completion_token_ids == (9,)


@pytest.mark.parametrize("prompt", ["say", ["say"]])
def test_openai_completions_pair(prompt):
    request = {"prompt": prompt, "add_special_tokens": False, "n": 2}
    response = {"choices": [{"index": 0, "text": " it", "token_ids": [1],
                             "prompt_token_ids": [4, 5]},  # per choice on completions
                            {"index": 1, "text": " so"}]}
    first, second = parse({"request": request, "response": response}).records
    assert first == TrafficRecord(1, "say", None, " it", (4, 5), (1,), False)
    assert second == TrafficRecord(1, "say", None, " so", None, None, False)


@pytest.mark.parametrize("prompt", [[3, 4], [[3, 4]]])
def test_openai_completions_prompt_given_as_token_ids(prompt):
    (record,) = parse({"request": {"prompt": prompt},
                       "response": {"choices": [{"text": "x"}]}}).records
    assert record == TrafficRecord(1, None, None, "x", (3, 4))


def test_openai_completions_echo_strips_the_prompt():
    (record,) = parse({"request": {"prompt": "say", "echo": True},
                       "response": {"choices": [{"text": "say it"}]}}).records
    assert record.completion == " it"


SHAREGPT = [
    {"id": "a", "conversations": [{"from": "system", "value": "sys"},
                                  {"from": "human", "value": "q1"},
                                  {"from": "gpt", "value": "a1"},
                                  {"from": "human", "value": "q2"},
                                  {"from": "gpt", "value": "a2"}]},
    {"conversations": [{"from": "human", "value": "alone"}]},
    {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
]


def sharegpt_expected(first: int) -> tuple[TrafficRecord, ...]:
    system = {"role": "system", "content": "sys"}
    q1, a1 = {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}
    return (TrafficRecord(first, None, (system, q1), "a1"),
            TrafficRecord(first, None, (system, q1, a1, {"role": "user", "content": "q2"}), "a2"),
            TrafficRecord(first + 2, None, ({"role": "user", "content": "q"},), "a"))


def test_sharegpt_json_array_each_assistant_turn_with_its_history():
    traffic = parse_traffic_chunks([b"\n  " + json.dumps(SHAREGPT).encode()], "s.json")
    assert traffic.records == sharegpt_expected(1)
    assert (traffic.format, traffic.entries, traffic.skipped) == ("sharegpt", 3, 1)
    assert traffic.first_bad == (2, "conversation 2: the conversation has no assistant turn "
                                    f"after another turn: {NO_ANSWER}")


def test_sharegpt_conversations_one_per_jsonl_line():
    traffic = parse(*SHAREGPT)
    assert traffic.records == sharegpt_expected(1)
    assert traffic.first_bad == (2, "line 2: the conversation has no assistant turn after "
                                    f"another turn: {NO_ANSWER}")


# --- bad lines: each skipped with its own message ------------------------------------------

BAD_LINES = [
    (b"not json", "the text is not valid JSON (Expecting value at char 0): 'not json'"),
    (b'{"prompt": "\xff"}', "not UTF-8 (byte 0xff at offset 12)"),
    ("[1, 2]", "a list is not a request (one JSON object per line)"),
    ('"text"', "a string is not a request (one JSON object per line)"),
    ({"prompt": "p"}, f'"completion" is missing: {NO_ANSWER}'),
    ({"prompt": "p", "completion": ""}, f'"completion" is empty: {NO_ANSWER}'),
    ({"messages": [USER], "completion": ""}, f'"completion" is empty: {NO_ANSWER}'),
    ({"messages": [USER]}, "the conversation has no assistant turn after another turn: "
                           f"{NO_ANSWER}"),
    ({"request": {"prompt": "p"}, "response": {"choices": [{"text": ""}]}},
     f'"response.choices[0].text" is empty: {NO_ANSWER}'),
    ({"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": ""},
                        {"from": "human", "value": "q2"}, {"from": "gpt", "value": None}]},
     f"2 assistant turn(s) after another turn, all empty: {NO_ANSWER}"),
    ({"prompt": 3, "completion": "c"}, '"prompt" is a number, not a string'),
    ({"prompt": "p", "completion": ["c"]}, '"completion" is a list, not a string'),
    ({"completion": "c"}, '"prompt" is missing'),
    ({"text": "t"}, 'none of "prompt", "messages", "request" or "conversations" is '
                    "there"),
    ({"prompt": "p", "completion": "c", "completion_token_ids": [1, True]},
     '"completion_token_ids" is not a list of token ids (item 1 is a boolean)'),
    ({"prompt": "p", "completion": "c", "prompt_token_ids": [-1]},
     '"prompt_token_ids" is not a list of token ids (item 0 is -1, outside '
     "0..2147483647)"),
    ({"prompt": "p", "completion": "c", "completion_token_ids": [0, 2 ** 31]},
     '"completion_token_ids" is not a list of token ids (item 1 is 2147483648, outside '
     "0..2147483647)"),
    ({"prompt": "p", "completion": "c", "prompt_token_ids": "1 2"},
     '"prompt_token_ids" is a string, not a list of token ids'),
    ({"messages": {"role": "user"}, "completion": "c"},
     '"messages" is an object, not a list of messages'),
    ({"messages": [], "completion": "c"}, '"messages" is empty'),
    ({"messages": ["hi"], "completion": "c"},
     '"messages[0]" is a string, not a message object'),
    ({"messages": [{"role": "bot", "content": "x"}], "completion": "c"},
     "\"messages[0].role\" is 'bot' (known: system, developer, user, human, assistant, "
     "gpt, tool)"),
    ({"messages": [{"content": "x"}], "completion": "c"},
     '"messages[0].role" is missing (known: system, developer, user, human, assistant, '
     "gpt, tool)"),
    ({"messages": [{"role": "user", "content": 5}], "completion": "c"},
     '"messages[0].content" is a number, not text'),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
      "completion": "c"},
     "multimodal content is not replayed (messages[0].content[0] is 'image_url' part)"),
    ({"messages": [{"role": "user", "content": ["x"]}], "completion": "c"},
     "multimodal content is not replayed (messages[0].content[0] is a non-text part)"),
    ({"response": {"choices": []}}, '"request" is missing'),
    ({"request": {"prompt": "p"}, "response": "ok"},
     '"response" is a string, not an object'),
    ({"request": {"prompt": "p"}, "response": {"error": {"message": "boom", "code": 400}}},
     "the response has no choices (an error response: 'boom')"),
    ({"request": {"prompt": "p"}, "response": {"choices": []}},
     "the response has no choices"),
    ({"request": {"model": "m"}, "response": {"choices": [{"text": "x"}]}},
     'the request has neither "messages" nor "prompt"'),
    ({"request": {"prompt": ["a", "b"]}, "response": {"choices": [{"text": "x"}]}},
     '"request.prompt" is a batch of 2 prompts (replayed: one prompt a request)'),
    ({"request": {"prompt": "p"}, "response": {"choices": [{"index": 0}]}},
     f'"response.choices[0].text" is missing: {NO_ANSWER}'),
    ({"request": {"prompt": "p"}, "response": {"choices": [7]}},
     '"response.choices[0]" is a number, not an object'),
    ({"request": {"messages": [USER]}, "response": {"choices": [{"text": "x"}]}},
     '"response.choices[0].message" is missing'),
    ({"request": {"prompt": "p"}, "response": {"choices": [{"text": "x", "token_ids": [1.5]}]}},
     '"response.choices[0].token_ids" is not a list of token ids (item 0 is a number)'),
    ({"conversations": [{"from": "gpt", "value": "first"}]},
     f"the conversation has no assistant turn after another turn: {NO_ANSWER}"),
    ({"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": None},
                        {"from": "x", "value": "y"}]},
     "\"conversations[2].from\" is 'x' (known: system, developer, user, human, "
     "assistant, gpt, tool)"),
    ('{"prompt": "p", "completion": NaN}',
     "the text is refused: NaN is not a JSON number (NaN and Infinity are refused)"),
    ('{"prompt": "p", "completion": ' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "}",
     f"the text is refused: it nests {MAX_DEPTH + 2} levels deep (at most {MAX_DEPTH})"),
    ('{"prompt": "p", "completion": "c", "prompt_token_ids": [' + "9" * 40 + "]}",
     f"the text is refused: the integer '{'9' * 40}' has more than {MAX_INT_DIGITS} "
     "digits"),
]


@pytest.mark.parametrize(("entry", "message"), BAD_LINES, ids=range(len(BAD_LINES)))
def test_each_bad_line_is_skipped_with_why(entry, message):
    assert why(entry) == message


def test_counts_blank_lines_bom_and_first_bad():
    data = (b"\xef\xbb\xbf\n\n" + json.dumps({"prompt": "a", "completion": "b"}).encode()
            + b"\r\n   \n{bad\n" + json.dumps({"prompt": "c"}).encode() + b"\n"
            + json.dumps({"prompt": "d", "completion": "e"}).encode())  # no final newline
    traffic = parse_traffic_chunks([data[:5], data[5:17], data[17:]], "t")  # lines across chunks
    assert [(r.line, r.prompt) for r in traffic.records] == [(3, "a"), (7, "d")]
    assert (traffic.entries, traffic.skipped) == (4, 2)
    assert traffic.first_bad == (5, "line 5: the text is not valid JSON (Expecting property "
                                    "name enclosed in double quotes at char 1): '{bad'")


# --- bounds on the whole file --------------------------------------------------------------

def test_max_requests_stops_and_says_so():
    lines = [{"prompt": str(i), "completion": "c"} for i in range(5)]
    for enough in (5, 10 ** 9):  # a file of exactly the cap is whole; no cap over the bound
        exact = parse(*lines, max_requests=enough)
        assert len(exact.records) == 5 and not exact.truncated and exact.stop_reason is None
    cut = parse(*lines, max_requests=3)
    assert [r.prompt for r in cut.records] == ["0", "1", "2"] and cut.entries == 3
    assert cut.truncated and cut.stop_reason == "stopped at 3 requests (--max-requests)"
    turns = parse(SHAREGPT[0], max_requests=1)  # a conversation's later turns are cut too
    assert len(turns.records) == 1 and turns.truncated


# --- whole-file errors: one line naming the file and the fix -------------------------------

def one_line(exc: pytest.ExceptionInfo[TrafficError]) -> str:
    text = str(exc.value)
    assert "\n" not in text and text.startswith("vllm-specdec-plugin: "), text
    return text.removeprefix("vllm-specdec-plugin: ")


SHAPES_TEXT = ('each line must be {"prompt", "completion"}, {"messages", "completion"}, '
               '{"request", "response"} or a ShareGPT conversation')


def test_missing_directory_empty_and_unusable_files(tmp_path):
    with pytest.raises(TrafficError) as exc:
        read_traffic(tmp_path / "nope.jsonl")
    assert one_line(exc) == (f"--traffic '{tmp_path}/nope.jsonl' does not exist; give the path "
                             "of a JSONL or ShareGPT JSON traffic file")
    with pytest.raises(TrafficError) as exc:
        read_traffic(tmp_path)
    assert one_line(exc) == (f"--traffic '{tmp_path}' is a directory; give the path of a JSONL "
                             "or ShareGPT JSON traffic file")
    for content in (b"", b" \n\r\n\t"):
        (tmp_path / "e.jsonl").write_bytes(content)
        with pytest.raises(TrafficError) as exc:
            read_traffic(tmp_path / "e.jsonl")
        assert one_line(exc) == f"--traffic '{tmp_path}/e.jsonl' is empty; {SHAPES_TEXT}"
    (tmp_path / "bad.jsonl").write_text('{"prompt": 1}\nnope\n\n{"prompt": "p"}\n')
    with pytest.raises(TrafficError) as exc:
        read_traffic(tmp_path / "bad.jsonl")
    assert one_line(exc) == (f"--traffic '{tmp_path}/bad.jsonl': no usable request in 3 lines "
                             '(first bad: line 1: "prompt" is a number, not a string); '
                             f"{SHAPES_TEXT}")
    with pytest.raises(TrafficError) as exc:
        read_traffic("a\x00b")
    assert one_line(exc) == "--traffic 'a\\x00b' contains a NUL character; fix the value"


def test_unreadable_file():
    # a read that fails whoever runs it (root reads a chmod-0 file): /proc/self/mem at offset 0
    with pytest.raises(TrafficError) as exc:
        read_traffic("/proc/self/mem")
    assert one_line(exc) == ("--traffic '/proc/self/mem' cannot be read (Input/output error); "
                             "give the path of a JSONL or ShareGPT JSON traffic file")


SHAREGPT_FIX = ("a file that starts with '[' is read as one ShareGPT JSON array; write it as "
                "JSONL (one conversation a line: jq -c '.[]' FILE > FILE.jsonl) to stream it")


def test_sharegpt_whole_file_errors():
    with pytest.raises(TrafficError) as exc:
        parse_traffic_chunks([b'[{"conversations": ['], "s.json")
    assert one_line(exc) == ("s.json is not valid JSON (Expecting value at char 20): "
                             f"'[{{\"conversations\": ['; {SHAREGPT_FIX}")
    with pytest.raises(TrafficError) as exc:
        parse_traffic_chunks([b'["\xfe"]'], "s.json")
    assert one_line(exc) == f"s.json is not UTF-8 (byte 0xfe at offset 2); {SHAREGPT_FIX}"
    with pytest.raises(TrafficError) as exc:
        parse_traffic_chunks([b"[" + b" " * (2 * MIB) + b"]"], "s.json",
                             max_sharegpt_bytes=MIB)
    assert one_line(exc) == f"s.json is a JSON array of more than 1 MiB; {SHAREGPT_FIX}"
    with pytest.raises(TrafficError) as exc:
        parse_traffic_chunks([b"[1, {}]"], "s.json")
    assert one_line(exc) == ("s.json: no usable request in 2 conversations (first bad: "
                             "conversation 1: a number is not a request (one JSON object per "
                             f"line)); {SHAPES_TEXT}")


def test_max_requests_below_one_refused():
    with pytest.raises(TrafficError) as exc:
        parse({"prompt": "p", "completion": "c"}, max_requests=0)
    assert one_line(exc) == "--max-requests 0 is not a request count; give 1 or more"
