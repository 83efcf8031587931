"""Where the adaptive proposer's candidate drafts come from: vLLM's own numba n-gram matcher
(the `ngram` method's code) and arctic_inference's suffix tree, when installed."""

from __future__ import annotations

from typing import Any

SUFFIX_TREE_DEPTH = 24
SUFFIX_MAX_CACHED_REQUESTS = 10000
SUFFIX_MIN_TOKEN_PROB = 0.1


def vllm_ngram_matcher() -> Any:
    """vLLM's numba batch n-gram matcher (the `ngram` method's own code), or None if absent."""
    try:
        from vllm.v1.spec_decode.ngram_proposer import batch_propose_numba
    except ImportError:
        return None
    return batch_propose_numba


def suffix_cache() -> Any:
    """arctic_inference's suffix-tree cache, or None when the package is not installed."""
    try:
        from arctic_inference.suffix_decoding import SuffixDecodingCache
    except ImportError:
        return None
    return SuffixDecodingCache(max_tree_depth=SUFFIX_TREE_DEPTH,
                               max_cached_requests=SUFFIX_MAX_CACHED_REQUESTS)
