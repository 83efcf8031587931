"""The configurations the benchmark compares (two at a time): one row each, one engine each.

Add a row to `CONFIGURATIONS` to benchmark another setup (e.g. a `plugin-schedule` row with
`env={"KAITO_ENABLE_SPECULATIVE_DECODING": "true", "VLLM_SPECDEC_SCHEDULE": ...}`). A row's
`speculative_config` goes to `LLM(speculative_config=...)` as given; its `env` is added to a
clean process env (no plugin inputs from the caller's shell).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from benchmarks.lib.null_proposer import CLASS_PATH as NULL_PROPOSER
from vllm_specdec_plugin.core.methods import NGRAM_FALLBACK

BASELINE = "none"
OPT_IN = {"KAITO_ENABLE_SPECULATIVE_DECODING": "true"}
# ngram k=5 whose schedule drafts 0 tokens at every batch size: the speculative path, no drafts.
NGRAM_IDLE_SPEC = {**NGRAM_FALLBACK, "num_speculative_tokens_per_batch_size": [[1, 65536, 0]]}
# A custom_class proposer that never drafts (benchmarks/lib/null_proposer.py).
NULL_SPEC = {"method": "custom_class", "model": NULL_PROPOSER,
             "num_speculative_tokens": 1}


@dataclass(frozen=True)
class Configuration:
    """One engine setup to benchmark."""

    name: str
    description: str
    speculative_config: Mapping[str, Any] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    requires_module: str | None = None
    """A module that must import for this configuration to run (e.g. arctic_inference)."""
    platforms: tuple[str, ...] | None = None
    """Platforms ("cpu", "cuda", "rbln") it runs on; None for all."""
    uses_plugin: bool = False
    """The plugin decides the speculative config: record its decision."""
    by_default: bool = True
    """Part of a run that names no configurations (else only when named with --configs)."""


CONFIGURATIONS: tuple[Configuration, ...] = (
    Configuration(BASELINE, "no speculative decoding"),
    Configuration("kaito-static", "KAITO's fallback passed explicitly: ngram k=5 lookup_max=4",
                  speculative_config=dict(NGRAM_FALLBACK)),
    Configuration("plugin", "no speculative_config; KAITO opt-in env: the plugin decides",
                  env=OPT_IN, uses_plugin=True),
    Configuration("adaptive", "the plugin's adaptive proposer (custom_class; acceptance- and "
                  "load-aware): KAITO opt-in env + VLLM_SPECDEC_FALLBACK=adaptive, with its "
                  "suffix tree kept to each request's own tokens "
                  "(VLLM_SPECDEC_ADAPTIVE_SUFFIX_CACHE=0): the harness repeats a cell's prompts "
                  "in every burst, and a cross-request cache would replay its own earlier "
                  "answers",
                  env={**OPT_IN, "VLLM_SPECDEC_FALLBACK": "adaptive",
                       "VLLM_SPECDEC_ADAPTIVE_SUFFIX_CACHE": "0"}, uses_plugin=True),
    Configuration("suffix", "suffix decoding (arctic-inference), vLLM defaults",
                  speculative_config={"method": "suffix"}, requires_module="arctic_inference"),
    Configuration("suffix-local", "suffix decoding (arctic-inference) with its cross-request "
                  "cache off (suffix_decoding_max_cached_requests=0), as the adaptive row runs "
                  "its own suffix tree: the harness repeats a cell's prompts, and vLLM's default "
                  "cache of 10000 requests would replay its own earlier answers",
                  speculative_config={"method": "suffix",
                                      "suffix_decoding_max_cached_requests": 0},
                  requires_module="arctic_inference", by_default=False),
    Configuration("ngram-gpu", "ngram on the GPU, KAITO's k=5 lookup_max=4",
                  speculative_config={**NGRAM_FALLBACK, "method": "ngram_gpu"},
                  platforms=("cuda",)),
    Configuration("null", "a custom_class proposer that never drafts "
                  "(benchmarks/lib/null_proposer.py) given as the user's config, KAITO opt-in env: "
                  "the price of a speculative config with the plugin (its zero-draft shortcuts)",
                  speculative_config=NULL_SPEC, env=OPT_IN, uses_plugin=True, by_default=False),
    Configuration("null-vllm", "the same never-drafting proposer without the plugin: vLLM's own "
                  "price of a speculative config", speculative_config=NULL_SPEC,
                  by_default=False),
    Configuration("ngram-idle", "ngram k=5 whose schedule drafts 0 tokens at every batch size: "
                  "the price of the speculative path alone",
                  speculative_config=NGRAM_IDLE_SPEC, by_default=False),
)



def by_name(names: list[str] | None) -> list[Configuration]:
    """The named configurations in table order (all when `names` is None); baseline first."""
    known = {config.name: config for config in CONFIGURATIONS}
    unknown = sorted(set(names or ()) - set(known))
    if unknown:
        raise ValueError(f"unknown configuration(s) {unknown}; known: {sorted(known)}")
    default = {config.name for config in CONFIGURATIONS if config.by_default}
    wanted = set(names or default) | {BASELINE}
    return [config for config in CONFIGURATIONS if config.name in wanted]


def unavailable_reason(config: Configuration, platform: str) -> str | None:
    """Why `config` cannot run here, or None when it can."""
    if config.platforms is not None and platform not in config.platforms:
        return f"runs on {', '.join(config.platforms)} only; this platform is {platform}"
    module = config.requires_module
    if module is not None and importlib.util.find_spec(module) is None:
        return f"needs the {module} package, which does not import here"
    return None
