"""The one assembly: engine arguments, env, files and the host -> (EngineRequest, Decision).

The engine hook, `vllm-specdec explain` and the launcher all decide through `assemble`, so the
same inputs always give the same decision. The opt-in is read once, first and alone: absent or
"false", nothing else is read, so no other input (a broken presets or config file) can affect an
engine that did not opt in. The capabilities are built once, complete, before `decide`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from vllm_specdec_plugin.core.decide import decide
from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.presets import PresetTable
from vllm_specdec_plugin.core.settings import check_settings
from vllm_specdec_plugin.core.types import (
    SOURCE_OFF,
    Annotation,
    Decision,
    EngineRequest,
    KaitoRequest,
    PlatformCapabilities,
)
from vllm_specdec_plugin.inputs.annotations import read_opt_in
from vllm_specdec_plugin.inputs.checkpoint import inspect_checkpoint
from vllm_specdec_plugin.inputs.engine_args import engine_request
from vllm_specdec_plugin.inputs.files import local_path
from vllm_specdec_plugin.inputs.kaito import read_kaito_request
from vllm_specdec_plugin.inputs.presets import load_preset_table
from vllm_specdec_plugin.inputs.vllm_caps import installed_capabilities
from vllm_specdec_plugin.platforms import get_platform


@dataclass(frozen=True)
class Assembled:
    """One engine start's request and the decision for it (`request` is None when the engine
    arguments themselves could not be read; the decision then carries the error)."""

    request: EngineRequest | None
    decision: Decision
    caps: PlatformCapabilities | None = None


def assemble(args: Any, environ: Mapping[str, str], platform: str, device_name: str | None,
             *, annotation: Annotation | None = None,
             overrides: Mapping[str, Any] | None = None) -> Assembled:
    """The decision for vLLM engine arguments; input errors come back in `Decision.errors`.

    `annotation` is the opt-in when the caller read it already (or took it from a flag);
    `overrides` replaces fields of the KaitoRequest read from env and files (explain's flags).
    """
    overrides = dict(overrides or {})
    given = overrides.pop("annotation", None)  # explain's --annotation: the opt-in itself
    try:
        annotation = annotation or given or read_opt_in(environ)
        request = engine_request(args)
    except SpecDecodeConfigError as exc:
        return Assembled(None, _refused(platform, exc))
    policy = get_platform(platform)
    try:
        if annotation.opt_in == "off":
            caps = installed_capabilities(platform)
            return Assembled(request, decide(KaitoRequest(annotation), request, caps,
                                             PresetTable()), caps)
        if annotation.opt_in == "on":  # a bad annotation gets its own error first (decide)
            check_settings(environ)
        if request.checkpoint is None:
            request = replace(request, checkpoint=inspect_checkpoint(request.model))
        caps = policy.capabilities(installed_capabilities(platform), request, args, environ,
                                   device_name)
        kaito = read_kaito_request(environ, annotation, request.checkpoint)
        if overrides:
            kaito = replace(kaito, **overrides)
        decision = decide(kaito, request, caps, load_preset_table(environ))
        return Assembled(request, _check_draft_path(decision), caps)
    except SpecDecodeConfigError as exc:
        return Assembled(request, _refused(platform, exc))


def _refused(platform: str, exc: SpecDecodeConfigError) -> Decision:
    return Decision(False, SOURCE_OFF, platform=platform, errors=(exc.message,))


def _check_draft_path(decision: Decision) -> Decision:
    """A draft `model` given as a local path must exist (vLLM would try the hub instead)."""
    draft = (decision.speculative_config or {}).get("model")
    if not isinstance(draft, str) or not draft.startswith(("/", "./", "../", "~")):
        return decision
    if local_path(draft, f"the draft model (speculative-config from {decision.source})"):
        return decision
    return replace(decision, enabled=False, errors=(
        f"the draft model {quote_value(draft)} (speculative-config from {decision.source}) "
        "does not exist; mount the draft checkpoint there or fix the path",))


def capabilities_for(platform: str, *, device_name: str | None = None, args: Any = None,
                     environ: Mapping[str, str] | None = None,
                     engine: EngineRequest | None = None) -> PlatformCapabilities:
    """The complete capabilities of `platform` with the installed vLLM, as `assemble` builds
    them (tests of other vLLM releases take these and `dataclasses.replace` what they vary)."""
    return get_platform(platform).capabilities(
        installed_capabilities(platform), engine or EngineRequest(), args, environ or {},
        device_name)
