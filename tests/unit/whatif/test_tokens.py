"""`whatif`'s tokenization (`whatif/tokens.py`) on the project's tiny tokenizer: the token ids
vLLM's OpenAI server would run (special tokens, chat template), the records it cannot replay,
and a model directory that has no usable tokenizer, each as one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.tiny_tokenizer import BOS_TOKEN, CHAT_TEMPLATE, build_tokenizer

from vllm_specdec_plugin.inputs.traffic import TrafficRecord, parse_traffic_chunks
from vllm_specdec_plugin.whatif import tokens
from vllm_specdec_plugin.whatif.tokens import (
    WhatifError,
    load_tokenizer,
    tokenize_traffic,
)

USER = {"role": "user", "content": "What is the capital of France?"}
FIX = "give a local checkpoint directory with its tokenizer files"


@pytest.fixture(scope="module")
def plain_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def bos_dir(plain_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny tokenizer with a BOS post-processor (as Llama's), so `add_special_tokens`
    shows in the ids."""
    out = tmp_path_factory.mktemp("tok-bos")
    shutil.copytree(plain_dir, out, dirs_exist_ok=True)
    spec = json.loads((out / "tokenizer.json").read_text())
    bos_id = next(t["id"] for t in spec["added_tokens"] if t["content"] == BOS_TOKEN)
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": BOS_TOKEN, "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {BOS_TOKEN: {"id": BOS_TOKEN, "ids": [bos_id], "tokens": [BOS_TOKEN]}}}
    (out / "tokenizer.json").write_text(json.dumps(spec))
    return out


@pytest.fixture(scope="module")
def tok(bos_dir: Path) -> Any:
    tokenizer = load_tokenizer(str(bos_dir))
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert tokenizer.encode("hi", add_special_tokens=True)[0] == tokenizer.convert_tokens_to_ids(
        BOS_TOKEN) != tokenizer.encode("hi", add_special_tokens=False)[0]
    return tokenizer


def one(tokenizer: Any, record: TrafficRecord) -> tuple[list[int], list[int]]:
    done = tokenize_traffic(tokenizer, [record])
    assert done.skipped == 0, done.first_bad
    (request,) = done.requests
    assert request.prompt_ids.dtype == np.int32 and request.completion_ids.dtype == np.int32
    return request.prompt_ids.tolist(), request.completion_ids.tolist()


def test_completion_prompt_with_special_tokens_completion_without(tok):
    prompt, completion = one(tok, TrafficRecord(3, "The capital of France", None, " is Paris."))
    assert prompt == tok.encode("The capital of France", add_special_tokens=True)
    assert completion == tok.encode(" is Paris.", add_special_tokens=False)


def test_completions_request_add_special_tokens_false_is_honoured(tok):
    prompt, _ = one(tok, TrafficRecord(1, "The capital", None, " is", add_special_tokens=False))
    assert prompt == tok.encode("The capital", add_special_tokens=False)


def test_chat_rendered_with_the_chat_template_and_no_special_tokens(tok):
    messages = ({"role": "system", "content": "Be brief."}, USER)
    prompt, completion = one(tok, TrafficRecord(1, None, messages, "Paris."))
    text = ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is the capital of "
            "France?<|im_end|>\n<|im_start|>assistant\n")  # CHAT_TEMPLATE, generation prompt
    assert prompt == tok.encode(text, add_special_tokens=False)
    assert completion == tok.encode("Paris.", add_special_tokens=False)


def test_chat_request_template_arguments_are_honoured(tok):
    record = TrafficRecord(1, None, (USER,), "Paris.",
                           chat_kwargs={"add_generation_prompt": False})
    prompt, _ = one(tok, record)
    assert prompt == tok.encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n",
                                add_special_tokens=False)


def test_logged_token_ids_are_used_as_they_are(tok):
    record = TrafficRecord(1, "ignored", None, "ignored", (5, 6, 7), (8, 9))
    assert one(tok, record) == ([5, 6, 7], [8, 9])
    chat = TrafficRecord(1, None, (USER,), "ignored", None, (8,))
    prompt, completion = one(tok, chat)
    assert completion == [8] and prompt == tok.apply_chat_template(
        [USER], add_generation_prompt=True, tokenize=True, return_dict=False)


def test_batched_encoding_equals_encode_one_at_a_time(tok, monkeypatch):
    monkeypatch.setattr(tokens, "BATCH", 7)  # several batches, a last short one
    texts = [f"def fibonacci(n): return {i} * n # Paris {i}" for i in range(40)]
    records = [TrafficRecord(i + 1, text, None, text[::-1]) if i % 3 else
               TrafficRecord(i + 1, None, ({"role": "user", "content": text},), text)
               for i, text in enumerate(texts)]
    done: list[int] = []
    result = tokenize_traffic(tok, records, progress=done.append)
    assert done == [7, 7, 7, 7, 7, 5] and result.skipped == 0
    for record, request in zip(records, result.requests, strict=True):
        assert request.line == record.line
        assert request.completion_ids.tolist() == tok.encode(record.completion,
                                                             add_special_tokens=False)
        if record.prompt is not None:
            assert request.prompt_ids.tolist() == tok.encode(record.prompt)


def test_records_that_cannot_be_replayed_each_say_why(tok):
    records = [TrafficRecord(1, "fine", None, " yes"),
               TrafficRecord(2, "p", None, ""),
               TrafficRecord(3, None, None, "x", (), (1,)),
               TrafficRecord(4, "p" * 50, None, " the end"),
               TrafficRecord(5, "p", None, "ok\ud800"),
               TrafficRecord(6, None, (USER,), "x", chat_kwargs={"continue_final_message": True}),
               TrafficRecord(7, "also fine", None, " yes")]
    result = tokenize_traffic(tok, records, max_tokens_per_request=30)
    assert [r.line for r in result.requests] == [1, 7] and result.skipped == 5
    assert result.first_bad == (2, "line 2: the completion is empty (no tokens to replay)")
    whys = {r.line: tokenize_traffic(tok, [r], max_tokens_per_request=30).first_bad
            for r in records[2:6]}
    prompt = len(tok.encode("p" * 50))
    total = prompt + len(tok.encode(" the end", add_special_tokens=False))
    assert whys == {
        3: (3, "line 3: the prompt is empty (vLLM refuses an empty prompt)"),
        4: (4, f"line 4: {total} tokens (prompt {prompt} + completion {total - prompt}), over "
               "the bound of 30 per request"),
        5: (5, "line 5: the tokenizer refuses its text (TypeError)"),
        6: (6, "line 6: the chat template fails on it (ValueError: 'continue_final_message "
               "and add_generation_prompt are not compatible. Use continue_final_message when "
               "you want the model to continue the final message, and...' (268 chars))")}


def test_no_chat_template(plain_dir, tmp_path):
    shutil.copytree(plain_dir, tmp_path, dirs_exist_ok=True)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = load_tokenizer(str(tmp_path))
    traffic = parse_traffic_chunks([b'{"messages": [{"role": "user", "content": "q"}], '
                                    b'"completion": "a"}\n{"prompt": "q", "completion": "a"}'],
                                   "t")
    result = tokenize_traffic(tokenizer, traffic.records, unit="conversation")
    assert [r.line for r in result.requests] == [2]
    assert result.first_bad == (1, "conversation 1: the model has no chat template")


def test_total_token_bound_stops_and_says_so(tok):
    records = [TrafficRecord(i, "The capital", None, " is Paris.") for i in range(1, 6)]
    each = sum(len(side) for side in one(tok, records[0]))
    progress: list[int] = []
    result = tokenize_traffic(tok, records, progress=progress.append,
                              max_total_tokens=2 * each + 1)
    assert len(result.requests) == 2 and result.truncated and sum(progress) == 2
    assert result.stop_reason == (f"stopped at {2 * each + 1:,} tokens in all (the bound on "
                                  "tokens held for the replay); the rest was not tokenized")


def test_model_directory_problems_are_one_line(tmp_path, plain_dir):
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{not json")
    cases = {
        str(tmp_path / "nope"): "nothing is there",
        str(tmp_path / "file"): "not a directory",
        str(tmp_path / "empty"): "no tokenizer files (none of tokenizer.json, "
                                 "tokenizer_config.json, tokenizer.model, vocab.json, "
                                 "spiece.model)",
        str(broken): "its tokenizer does not load (JSONDecodeError: 'Expecting property name "
                     "enclosed in double quotes: line 1 column 2 (char 1)')",
    }
    for model, problem in cases.items():
        with pytest.raises(WhatifError) as exc:
            load_tokenizer(model)
        assert str(exc.value) == f"vllm-specdec-plugin: --model '{model}': {problem}; {FIX}"
    with pytest.raises(WhatifError) as exc:
        load_tokenizer("a\x00b")
    assert str(exc.value) == ("vllm-specdec-plugin: --model 'a\\x00b' contains a NUL "
                              "character; fix the value")
