"""The drafter interface `whatif/replay.py`'s Python loop drives (kept apart so the drafters of
`whatif/replay_adaptive.py` and the loop that drives them import it without importing each
other)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class Drafter:
    """One method's drafter as `replay_python` drives it, in the engine's call order: `start`
    before a request's first proposal (`rows`: the (1, max_model_len) token row, holding the
    prompt and the prefill's token), `propose` after every step (the prefill's included) with
    the context length and the tokens the step emitted, `verified` after each verify step with
    the draft tokens it verified, `finish` after the request's last step (the engine proposes
    there too; the draft is thrown away), `close` after the traffic."""

    def start(self, index: int, prompt_len: int, n: int, rows: np.ndarray) -> None:
        raise NotImplementedError

    def propose(self, num_tokens: int, emitted: list[int]) -> Sequence[int]:
        raise NotImplementedError

    def verified(self, drafted: int) -> None:  # noqa: B027 (nothing by default)
        pass

    def finish(self, num_tokens: int, emitted: list[int]) -> None:
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027 (nothing to release by default)
        pass

    @property
    def notes(self) -> tuple[str, ...]:
        """What the result should say about this drafter, after the replay."""
        return ()
