"""`whatif`'s chat prompts (`whatif/chat_tokens.py`): every turn of a conversation the token
ids vLLM's server runs for it (five chat templates, a byte-level and a SentencePiece-style
tokenizer), each history tokenized once, the per-line bounds on the work, and the issue's
806 KB line in a child under a memory and a time limit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.tiny_tokenizer import CHAT_TEMPLATE, build_tokenizer

from vllm_specdec_plugin.inputs.traffic import TrafficRecord, parse_traffic_chunks
from vllm_specdec_plugin.whatif import tokens
from vllm_specdec_plugin.whatif.tokens import load_tokenizer, tokenize_traffic


@pytest.fixture(scope="module")
def plain_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture
def tok(plain_dir: Path) -> Any:
    return load_tokenizer(str(plain_dir))


THINK_TEMPLATE = (  # earlier turns' reasoning dropped, as Qwen3's template does: not a prefix
    "{%- set ns = namespace(last=messages|length - 1) %}"
    "{%- for m in messages[::-1] %}{%- if m.role == 'user' and ns.last == messages|length - 1 %}"
    "{%- set ns.last = (messages|length - 1) - loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}{%- set content = m.content %}"
    "{%- if m.role == 'assistant' and '</think>' in content and loop.index0 < ns.last %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{ '<|im_start|>' + m.role + '\\n' + content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}")
HEADER_TEMPLATE = (  # Llama 3's shape: a BOS in the text, headers, trimmed contents
    "{{ '<|endoftext|>' }}{% for m in messages %}{{ '<|im_start|>' + m.role + '<|im_end|>\\n\\n'"
    " + m.content | trim + '<|im_end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_end|>\\n\\n' }}{% endif %}")
LAST_TEMPLATE = (  # the last message rendered differently: each turn's end is not a prefix
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' }}{% if loop.last %}"
    "{{ '(latest) ' }}{% endif %}{{ m.content + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
PLAIN_TEMPLATE = (  # no special token at all: every turn is encoded whole
    "{% for m in messages %}{{ m.role + ': ' + m.content + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant:' }}{% endif %}")
TEMPLATES = {"chatml": CHAT_TEMPLATE, "think": THINK_TEMPLATE, "header": HEADER_TEMPLATE,
             "last": LAST_TEMPLATE, "plain": PLAIN_TEMPLATE}
AWKWARD = ["", " ", "  leading and trailing  ", "\n\nnewlines\n", "é 漢字 🙂", "a<|im_end|>b",
           "def add(a, b):\n    return a + b\n", "<think>\nplan\n</think>\n\nanswer"]


def conversation(turns: int, seed: int = 0) -> dict[str, Any]:
    """A ShareGPT conversation of `turns` exchanges with awkward texts (spaces, newlines,
    unicode, a special token's text, reasoning) in every position."""
    rows = []
    for i in range(turns):
        q, a = AWKWARD[(i + seed) % len(AWKWARD)], AWKWARD[(2 * i + seed + 3) % len(AWKWARD)]
        rows += [{"from": "human", "value": f"{q}question {i}{q}"},
                 {"from": "gpt", "value": f"{a}answer {i}{a}"}]
    return {"conversations": [{"from": "system", "value": " Be brief. "}, *rows]}


@pytest.fixture(scope="module")
def metaspace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SentencePiece-style tokenizer (Metaspace, `prepend_scheme: first`: only the text's
    first piece gets the word marker), the case a tail encoded alone would get wrong."""
    from support.tiny_tokenizer import SPECIAL_TOKENS, write_json
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out = tmp_path_factory.mktemp("tok-metaspace")
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    tokenizer.decoder = decoders.Metaspace(prepend_scheme="first")
    corpus = [f"{q} question {i} answer {a}" for i, (q, a) in
              enumerate(zip(AWKWARD, AWKWARD[::-1], strict=True))] * 20
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", *SPECIAL_TOKENS], show_progress=False))
    tokenizer.save(str(out / "tokenizer.json"))
    write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>",
        "bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False})
    return out


def server_tokens(tokenizer: Any, record: TrafficRecord) -> list[int]:
    """What vLLM's server runs for one chat request: the template, tokenize=True."""
    ids = tokenizer.apply_chat_template(list(record.messages or ()), tokenize=True,
                                        return_dict=False, add_generation_prompt=True,
                                        **(record.chat_kwargs or {}))
    return list(ids)


def counting(tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The characters each call hands the tokenizer."""
    calls: list[int] = []
    real = type(tokenizer).__call__

    def call(self: Any, text: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(sum(map(len, text)) if isinstance(text, list) else len(text))
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(type(tokenizer), "__call__", call)
    return calls


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("kind", ["bytelevel", "metaspace"])
def test_each_turn_is_the_servers_tokens(template, kind, plain_dir, metaspace_dir, monkeypatch):
    tokenizer = load_tokenizer(str(plain_dir if kind == "bytelevel" else metaspace_dir))
    tokenizer.chat_template = TEMPLATES[template]
    monkeypatch.setattr(tokens, "BATCH", 7)  # a conversation across batches, lines mixed
    lines = [json.dumps(conversation(12, seed)).encode() for seed in range(3)]
    lines.insert(1, json.dumps({"prompt": "plain", "completion": " text"}).encode())
    traffic = parse_traffic_chunks([b"\n".join(lines)], "t")
    result = tokenize_traffic(tokenizer, traffic.records)
    assert result.skipped == 0 and len(result.requests) == len(traffic.records) == 37
    for record, request in zip(traffic.records, result.requests, strict=True):
        if record.messages is not None:
            assert request.prompt_ids.tolist() == server_tokens(tokenizer, record), record.line


def test_a_history_is_tokenized_once_not_per_turn(tok, monkeypatch):
    record_line = json.dumps(conversation(60)).encode()
    traffic = parse_traffic_chunks([record_line], "t")
    calls = counting(tok, monkeypatch)
    result = tokenize_traffic(tok, traffic.records)
    tokenized = sum(calls)
    assert len(result.requests) == 60
    longest = len(tok.apply_chat_template(list(traffic.records[-1].messages or ()),
                                          tokenize=False, add_generation_prompt=True))
    per_turn = sum(len(tok.apply_chat_template(list(r.messages or ()), tokenize=False,
                                               add_generation_prompt=True))
                   for r in traffic.records)
    completions = sum(len(r.completion) for r in traffic.records)
    # the longest history once, a tail per turn ("<|im_start|>assistant\n"), the answers
    assert tokenized <= longest + 60 * len("<|im_start|>assistant\n") + completions
    assert tokenized < per_turn / 10


def test_a_template_that_is_not_a_prefix_is_bounded_per_line(tok, monkeypatch):
    from vllm_specdec_plugin.whatif import chat_tokens

    tok.chat_template = PLAIN_TEMPLATE  # no special token: each turn is encoded whole
    monkeypatch.setattr(chat_tokens, "MAX_LINE_TOKENIZED_CHARS", 2000)
    lines = [json.dumps(conversation(30)), json.dumps(conversation(2))]
    traffic = parse_traffic_chunks(["\n".join(lines).encode()], "t")
    result = tokenize_traffic(tok, traffic.records)
    kept = [r.line for r in result.requests]
    assert 0 < kept.count(1) < 30 and kept.count(2) == 2  # the next line starts afresh
    assert result.skipped == 30 - kept.count(1)
    assert result.first_bad == (1, "line 1: this turn and the line's later ones are skipped: "
                                   "each turn renders its whole history, and this line's would "
                                   "pass 2000 characters tokenized (the chat template does not "
                                   "render earlier turns as a prefix of later ones) (the bound "
                                   "on one line)")


@pytest.mark.parametrize(("bound", "value", "says"), [
    ("MAX_LINE_RENDERED_MESSAGES", 40, "40 messages rendered"),
    ("MAX_LINE_RENDERED_CHARS", 3000, "3000 characters rendered"),
])
def test_rendering_is_bounded_per_line_before_rendering(tok, monkeypatch, bound, value, says):
    from vllm_specdec_plugin.whatif import chat_tokens

    monkeypatch.setattr(chat_tokens, bound, value)
    rendered = []
    real = chat_tokens.render
    monkeypatch.setattr(chat_tokens, "render", lambda t, r: rendered.append(r) or real(t, r))
    lines = [json.dumps(conversation(30)), json.dumps(conversation(3))]
    result = tokenize_traffic(tok, parse_traffic_chunks(["\n".join(lines).encode()],
                                                        "t").records)
    kept = [r.line for r in result.requests]
    assert 0 < kept.count(1) < 30 and kept.count(2) == 3
    assert len(rendered) == kept.count(1) + 3  # nothing past the bound was rendered
    assert result.first_bad is not None and result.first_bad[0] == 1
    assert result.first_bad[1].endswith(f"would pass {says} (the bound on one line)")


@pytest.mark.parametrize("chat", [False, True])
def test_an_openai_responses_choices_share_one_prompt(tok, monkeypatch, chat):
    """n choices of one logged response repeat its prompt: it is tokenized once, even
    across batches, not n times (a 4 MiB prompt with 300k choices fits in one line)."""
    monkeypatch.setattr(tokens, "BATCH", 7)
    prompt = "def add(a, b):\n    return a + b\n" * 100
    request = ({"messages": [{"role": "user", "content": prompt}]} if chat else
               {"prompt": prompt})
    line = json.dumps({"request": request, "response": {
        "choices": [{"message": {"content": f" {i}"}} if chat else {"text": f" {i}"}
                    for i in range(40)]}})
    traffic = parse_traffic_chunks([line.encode()], "t")
    calls = counting(tok, monkeypatch)
    result = tokenize_traffic(tok, traffic.records)
    tokenized = sum(calls)
    assert len(result.requests) == 40
    first = result.requests[0].prompt_ids.tolist()
    assert all(r.prompt_ids.tolist() == first for r in result.requests)
    assert first == (server_tokens(tok, traffic.records[0]) if chat else tok.encode(prompt))
    assert tokenized < len(prompt) + 100 + 40 * 4


def test_a_long_conversation_line_is_fast_and_small():
    """The issue's 806 KB line took 60 s and 1.7 GB (here: 268 s and 6.4 GB before): every
    turn re-rendered and re-tokenized its history. In a child under a memory and time limit."""
    from support.bounded import run_bounded

    done = run_bounded("""
        import json, sys, time
        from pathlib import Path
        from support.tiny_tokenizer import build_tokenizer
        from vllm_specdec_plugin.inputs.traffic import parse_traffic_chunks
        from vllm_specdec_plugin.whatif.tokens import load_tokenizer, tokenize_traffic

        import tempfile
        tok = load_tokenizer(str(build_tokenizer(Path(tempfile.mkdtemp()))))
        turn = ("def add(a, b):\\n    return a + b  # the quick brown fox " * 40)[:1600]
        turns = [{"from": "human" if i % 2 == 0 else "gpt", "value": f"{i} {turn}"}
                 for i in range(500)]
        line = json.dumps({"conversations": turns}).encode()
        start = time.perf_counter()
        result = tokenize_traffic(tok, parse_traffic_chunks([line], "t").records)
        print(len(line), len(result.requests), result.skipped, time.perf_counter() - start)
        """, memory_mib=1536, timeout_s=90,
        env={"RAYON_NUM_THREADS": "2", "MALLOC_ARENA_MAX": "2"})  # as on any host's cores
    assert done.returncode == 0, done
    size, requests, skipped, seconds = done.stdout.split()
    assert int(size) > 800_000 and (int(requests), int(skipped)) == (250, 0)
    assert float(seconds) < 30, done
