"""Every environment variable the plugin reads, named once, with its allowed values.

KAITO's inputs (the annotation, the runtime, the files it mounts) and the plugin's own
`VLLM_SPECDEC_*` settings. Opted in, `check_settings` validates every `VLLM_SPECDEC_*` variable
up front (the engine hook, `explain` and the launcher all decide through `assembly`, which
calls it): an unknown name or a value outside its choices is refused by name, with the allowed
values.
A new setting is added to `SETTINGS` (and, with fixed values, given `choices`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.request_tokens import parse_default

# --- KAITO's inputs ------------------------------------------------------------------------------
ANNOTATION_KEY = "kaito.sh/enable-speculative-decoding"
RUNTIME_KEY = "kaito.sh/runtime"
ENV_ANNOTATION = "KAITO_ENABLE_SPECULATIVE_DECODING"
ENV_RUNTIME = "KAITO_RUNTIME"
ENV_ANNOTATIONS_FILE = "KAITO_ANNOTATIONS_FILE"
ENV_PRESET_NAME = "KAITO_PRESET_NAME"
ENV_INFERENCE_CONFIG = "KAITO_INFERENCE_CONFIG"
ENV_MODEL = "KAITO_MODEL"
KAITO_ENV = (ENV_ANNOTATION, ENV_RUNTIME, ENV_ANNOTATIONS_FILE, ENV_PRESET_NAME,
             ENV_INFERENCE_CONFIG, ENV_MODEL)

# --- the plugin's own settings -------------------------------------------------------------------
PREFIX = "VLLM_SPECDEC_"
ENV_ON_ERROR = "VLLM_SPECDEC_ON_ERROR"
ENV_FALLBACK = "VLLM_SPECDEC_FALLBACK"
ENV_SCHEDULE = "VLLM_SPECDEC_SCHEDULE"
ENV_SWITCHBACK = "VLLM_SPECDEC_SWITCHBACK"
ENV_DRAFT_MODEL = "VLLM_SPECDEC_DRAFT_MODEL"
ENV_PRESETS_FILE = "VLLM_SPECDEC_PRESETS_FILE"
ENV_ADAPTIVE_STATS = "VLLM_SPECDEC_ADAPTIVE_STATS"
ENV_ADAPTIVE_TRACE = "VLLM_SPECDEC_ADAPTIVE_TRACE"
ENV_ADAPTIVE_SUFFIX_CACHE = "VLLM_SPECDEC_ADAPTIVE_SUFFIX_CACHE"
ENV_CACHE = "VLLM_SPECDEC_CACHE"
ENV_REQUEST_TOKENS = "VLLM_SPECDEC_REQUEST_TOKENS"

OnError = Literal["fail", "serve-without"]
Fallback = Literal["ngram", "suffix", "adaptive"]
Schedule = Literal["on", "static", "off"]
ON_ERROR_CHOICES: tuple[OnError, ...] = get_args(OnError)
FALLBACK_NAMES: tuple[Fallback, ...] = get_args(Fallback)
"""The allowed VLLM_SPECDEC_FALLBACK values (the first is the default, KAITO's ngram); each is
a row of `core.methods.FALLBACKS`."""
SCHEDULE_CHOICES: tuple[Schedule, ...] = get_args(Schedule)


@dataclass(frozen=True)
class Setting:
    """One `VLLM_SPECDEC_*` variable."""

    name: str
    meaning: str
    choices: tuple[str, ...] = ()
    """Its allowed values (empty: a path or name, checked where it is read)."""
    default: str | None = None


SETTINGS: Mapping[str, Setting] = {setting.name: setting for setting in (
    Setting(ENV_ON_ERROR, "what an opted-in engine does when the plugin itself fails",
            ON_ERROR_CHOICES, "fail"),
    Setting(ENV_FALLBACK, "the draft-free fallback", FALLBACK_NAMES, "ngram"),
    Setting(ENV_SCHEDULE, "the load-aware schedule on the plugin's own choice (on: learned per "
            "batch bucket by the schedule controller; static: the fixed table; off: none)",
            SCHEDULE_CHOICES, "on"),
    Setting(ENV_SWITCHBACK, "in-engine switchback measurement, for benchmarks: two arms "
            "alternating in blocks of steps, e.g. 'k0,controller' (arms: k<N>, static, "
            "controller)"),
    Setting(ENV_DRAFT_MODEL, "a draft checkpoint directory"),
    Setting(ENV_PRESETS_FILE, "a presets YAML file in front of the tuned table"),
    Setting(ENV_ADAPTIVE_STATS, "where the adaptive proposer writes its statistics"),
    Setting(ENV_ADAPTIVE_TRACE, "where the adaptive proposer records scored candidates "
            "(JSON lines, for replaying its acceptance model)"),
    Setting(ENV_ADAPTIVE_SUFFIX_CACHE, "finished requests whose responses the adaptive "
            "proposer's suffix tree keeps for later requests (0: none)", default="10000"),
    Setting(ENV_CACHE, "the demo and benchmark model cache (not read by the plugin)"),
    Setting(ENV_REQUEST_TOKENS, "num_speculative_tokens for a request that does not set "
            "vllm_xargs.num_speculative_tokens (a whole number; 0: only requests that ask "
            "speculate; unset: the engine's k)"),
)}
PLUGIN_ENV = (*KAITO_ENV, *SETTINGS)
"""Every variable that can opt an engine in or change its decision."""


def check_settings(environ: Mapping[str, str]) -> None:
    """Refuse an unknown `VLLM_SPECDEC_*` name or a value outside a setting's choices."""
    for name in sorted(key for key in environ if key.startswith(PREFIX)):
        setting = SETTINGS.get(name)
        if setting is None:
            raise SpecDecodeConfigError(
                f"{name} is not a setting of vllm-specdec-plugin; the settings are "
                f"{', '.join(SETTINGS)}; fix the name or unset it")
        value = environ[name]
        if setting.choices and value and value not in setting.choices:  # empty: the default
            raise SpecDecodeConfigError(
                f"{name}={quote_value(value)} is not one of {', '.join(setting.choices)} "
                f"({setting.meaning}; default {setting.default}); set one of them or unset it")
    try:
        parse_default(environ.get(ENV_REQUEST_TOKENS))
    except ValueError as exc:
        raise SpecDecodeConfigError(f"{exc}; fix it or unset it") from None


def setting_value(environ: Mapping[str, str], name: str) -> str:
    """A choice setting's value, its default when unset or empty (validated by the caller)."""
    return environ.get(name) or SETTINGS[name].default or ""
