"""The ShareGPT benchmark workload (`benchmarks/workloads/sharegpt.py`): the packaged array is
cut mid-string, so conversations are decoded one by one up to the cut; first turns are kept
where a human wrote them and their length is in range; the sample is fixed by its seed."""

from __future__ import annotations

import json

from benchmarks.workloads import sharegpt


def conversation(i: int, first: str, speaker: str = "human") -> dict:
    return {"id": f"c{i}", "conversations": [{"from": speaker, "value": first},
                                             {"from": "gpt", "value": "an answer"}]}


def test_conversations_stop_at_the_cut_and_keep_everything_before():
    whole = json.dumps([conversation(i, f"question {i}") for i in range(5)])
    cut = whole[:whole.index("question 3") + 4]  # inside the fourth conversation's string
    assert [c["id"] for c in sharegpt.conversations(cut)] == ["c0", "c1", "c2"]
    assert [c["id"] for c in sharegpt.conversations(whole)] == [f"c{i}" for i in range(5)]
    assert list(sharegpt.conversations("[]")) == [] and list(sharegpt.conversations("[")) == []


def test_first_turns_are_a_humans_within_the_length_bounds():
    assert sharegpt.first_turn(conversation(0, "  What is a monad?  ")) == "What is a monad?"
    assert sharegpt.first_turn(conversation(0, "Hi there", speaker="gpt")) is None
    assert sharegpt.first_turn(conversation(0, "ok")) is None  # under MIN_CHARS
    assert sharegpt.first_turn(conversation(0, "x" * (sharegpt.MAX_CHARS + 1))) is None
    assert sharegpt.first_turn(conversation(0, "x" * sharegpt.MAX_CHARS)) is not None
    assert sharegpt.first_turn({"id": "c", "conversations": []}) is None
    assert sharegpt.first_turn({"id": "c", "conversations": [{"from": "human", "value": 7}]}) \
        is None


def test_the_workload_is_a_fixed_sample_of_count_first_turns(tmp_path, monkeypatch):
    monkeypatch.setattr(sharegpt, "COUNT", 10)
    rows = [conversation(i, f"question number {i}", "gpt" if i % 7 == 0 else "human")
            for i in range(60)]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(rows)[:-40])  # cut, as the packaged file is
    first, again = sharegpt.workload(path), sharegpt.workload(path)
    assert first == again and len(first["prompts"]) == 10
    usable = [i for i in range(59) if i % 7]  # the last one is cut off
    assert "of 50 " in first["description"] and len(usable) == 50
    ids = [p["id"] for p in first["prompts"]]
    assert len(set(ids)) == 10 and ids != sorted(ids, key=lambda x: int(x[1:]))  # shuffled
    for prompt in first["prompts"]:
        (message,) = prompt["messages"]
        assert message == {"role": "user", "content": f"question number {prompt['id'][1:]}"}


def test_output_lengths_are_the_same_per_request_in_every_arm():
    """`--lengths`: fixed gives every request the length; uniform draws tokens/5..9*tokens/5
    per request with a fixed seed (the same request i in every arm and engine, mean ~tokens),
    and an unknown kind is refused by name."""
    import pytest

    from benchmarks.lib.workloads import output_lengths

    assert output_lengths("fixed", 40, 5) == [40] * 5
    drawn = output_lengths("uniform", 40, 400)
    assert drawn == output_lengths("uniform", 40, 400)
    assert drawn[:16] == output_lengths("uniform", 40, 16)
    assert min(drawn) >= 8 and max(drawn) <= 72 and len(set(drawn)) > 30
    assert 36 <= sum(drawn) / len(drawn) <= 44
    assert output_lengths("uniform", 1, 3) == [1, 1, 1]
    with pytest.raises(ValueError, match="'poisson'"):
        output_lengths("poisson", 40, 3)
