"""The load-aware speculation schedule: how many speculative tokens at which batch size."""

from __future__ import annotations

from collections.abc import Mapping

# Batch sizes up to which the schedule keeps full k, then half k; above: no speculation.
SCHEDULE_BREAKS: Mapping[str, tuple[int, int]] = {
    "ngram": (4, 8), "suffix": (4, 8), "mtp": (8, 16), "eagle": (8, 16), "eagle3": (8, 16),
    "medusa": (8, 16),
}
SCHEDULE_OPEN_END = 1 << 16


def load_aware_schedule(method: str, tokens: int, max_num_seqs: int | None) -> list[list[int]]:
    """`num_speculative_tokens_per_batch_size` ranges: full k at low batch, fewer, then none.

    Speculation pays while decode is memory-bound and the verifier has spare compute; as the
    batch grows each rejected draft token costs a real slot. Draft-free proposers (ngram,
    suffix) guess from repeats and are accepted less on open-ended text, so they back off
    earlier than model-based drafts (mtp, eagle), whose extra forward pass is cheap and
    accurate. KAITO measured no gain above ~6-8 concurrent requests for ngram.
    """
    full, half = SCHEDULE_BREAKS.get(method, SCHEDULE_BREAKS["ngram"])
    last = max(max_num_seqs or 0, SCHEDULE_OPEN_END)
    reduced = max(1, tokens // 2)
    ranges = [[1, full, tokens]]
    if reduced < tokens:
        ranges.append([full + 1, half, reduced])
    else:
        ranges[0][1] = half
    ranges.append([ranges[-1][1] + 1, last, 0])
    return ranges
