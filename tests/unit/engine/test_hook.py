"""The engine hook's isolation and failure policy, on real `EngineArgs` (no engine started)."""

from __future__ import annotations

import logging

import pytest
from vllm.engine.arg_utils import EngineArgs

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.engine.hook import apply_to_engine_args
from vllm_specdec_plugin.inputs.vllm_caps import vllm_serves_architecture

FIELDS = ("speculative_config", "model_impl", "async_scheduling", "spec_method", "spec_tokens",
          "per_request_spec_decode_metrics")


def snapshot(args: EngineArgs) -> dict:
    return {name: getattr(args, name, None) for name in FIELDS}


@pytest.fixture
def env(monkeypatch, tmp_path):
    for name in ("KAITO_ENABLE_SPECULATIVE_DECODING", "VLLM_SPECDEC_ON_ERROR",
                 "KAITO_INFERENCE_CONFIG", "VLLM_SPECDEC_PRESETS_FILE", "KAITO_RUNTIME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KAITO_ANNOTATIONS_FILE", "")
    return monkeypatch


def test_not_opted_in_nothing_read_nothing_changed(env, tiny_llama, tmp_path, plugin_log):
    broken = tmp_path / "broken.yaml"
    broken.write_text("vllm: [")
    env.setenv("KAITO_INFERENCE_CONFIG", str(broken))
    env.setenv("VLLM_SPECDEC_PRESETS_FILE", str(broken))
    args = EngineArgs(model=str(tiny_llama), model_impl="transformers")
    before = snapshot(args)
    assert apply_to_engine_args(args) is None
    assert snapshot(args) == before
    assert plugin_log.records and all(r.levelno == logging.DEBUG for r in plugin_log.records)


def test_opted_in_applies_once(env, tiny_llama):
    env.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    args = EngineArgs(model=str(tiny_llama), async_scheduling=True, spec_tokens=None)
    decision = apply_to_engine_args(args)
    assert args.speculative_config == decision.speculative_config
    assert args.model_impl == "auto" and args.async_scheduling is False  # ngram: vLLM's own
    assert args.per_request_spec_decode_metrics == "summary"  # vLLM's default was "none"
    assert apply_to_engine_args(args) is decision  # a second create_engine_config: same


def test_users_per_request_metrics_level_is_kept(env, tiny_llama):
    env.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    args = EngineArgs(model=str(tiny_llama), per_request_spec_decode_metrics="detailed")
    apply_to_engine_args(args)
    assert args.per_request_spec_decode_metrics == "detailed"


def test_spec_flags_are_the_users_config(env, tiny_llama):
    env.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    args = EngineArgs(model=str(tiny_llama), spec_method="ngram", spec_tokens=3)
    decision = apply_to_engine_args(args)
    assert decision.source == "user-config (engine arguments)"
    assert (args.speculative_config, args.spec_method, args.spec_tokens) == (None, "ngram", 3)


def test_missing_draft_path_is_refused(env, tiny_llama):
    env.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    args = EngineArgs(model=str(tiny_llama), speculative_config={
        "method": "eagle", "model": "/models/no-such-draft", "num_speculative_tokens": 3})
    with pytest.raises(SpecDecodeConfigError, match="no-such-draft.*does not exist"):
        apply_to_engine_args(args)


def test_plugin_failure_stops_the_engine_by_default(env, tiny_llama):
    env.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    args = EngineArgs(model=str(tiny_llama))
    args.speculative_config = 42  # not a mapping: the plugin's own code fails on it
    with pytest.raises(SpecDecodeConfigError, match="plugin failed.*VLLM_SPECDEC_ON_ERROR"):
        apply_to_engine_args(args)


def test_plugin_failure_serve_without(env, tiny_llama, plugin_log):
    env.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    env.setenv("VLLM_SPECDEC_ON_ERROR", "serve-without")
    args = EngineArgs(model=str(tiny_llama))
    args.speculative_config = 42
    assert apply_to_engine_args(args) is None
    assert args.speculative_config == 42 and args.model_impl == "auto"
    assert args.per_request_spec_decode_metrics == "none"  # vLLM refuses it without speculation
    assert any(r.levelno == logging.WARNING and "WITHOUT speculative decoding" in r.getMessage()
               for r in plugin_log.records)


def test_spec_flag_and_same_key_in_speculative_config_refused(env, tiny_llama):
    env.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    args = EngineArgs(model=str(tiny_llama), spec_tokens=2,
                      speculative_config={"method": "ngram", "num-speculative-tokens": 3})
    with pytest.raises(SpecDecodeConfigError, match="mutually exclusive"):
        apply_to_engine_args(args)


def test_prefill_only_instance_changes_nothing(env, tiny_llama, plugin_log):
    env.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    args = EngineArgs(model=str(tiny_llama), kv_transfer_config={
        "kv_connector": "ExampleConnector", "kv_role": "kv_producer"})
    before = snapshot(args)
    decision = apply_to_engine_args(args)
    assert decision.source == "prefill-only" and snapshot(args) == before
    assert any(r.levelno == logging.INFO and "prefill-only" in r.getMessage()
               for r in plugin_log.records)


@pytest.mark.parametrize("policy", ["fail", "serve-without"])
@pytest.mark.parametrize("case", ["deep-json", "nan", "huge-int", "bad-checkpoint", "long-model",
                                  "no-home", "billion-laughs"])
def test_bad_input_is_refused_as_input_never_served_without(env, tiny_llama, tmp_path, policy,
                                                            case, plugin_log):
    """Each parser failure is the input's error (SpecDecodeConfigError naming it), not the
    "plugin failed" path; so serve-without never serves a bad input without speculation."""
    env.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    env.setenv("VLLM_SPECDEC_ON_ERROR", policy)
    model, spec = str(tiny_llama), None
    if case == "deep-json":
        spec = '{"method": "ngram", "x": ' + "[" * 30_000 + "]" * 30_000 + "}"
    elif case == "nan":
        spec = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": float("nan")}
    elif case == "huge-int":
        spec = '{"method": "ngram", "num_speculative_tokens": ' + "9" * 5001 + "}"
    elif case == "bad-checkpoint":
        model = str(tmp_path)
        (tmp_path / "config.json").write_text('{"architectures": 5}')
    elif case == "long-model":
        model = "m" * 300
    elif case == "no-home":
        model = "~nosuchuser-specdec/model"
    else:
        config = tmp_path / "inference_config.yaml"
        config.write_text("vllm:\n  a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
            f"  {n}: &{n} [" + ",".join([f"*{p}"] * 10) + "]\n"
            for p, n in zip("abcdefgh", "bcdefghi", strict=True)))
        env.setenv("KAITO_INFERENCE_CONFIG", str(config))
    args = EngineArgs(model=model)
    args.speculative_config = spec
    with pytest.raises(SpecDecodeConfigError) as exc:
        apply_to_engine_args(args)
    assert "plugin failed" not in exc.value.message
    assert not any("WITHOUT speculative decoding" in r.getMessage() for r in plugin_log.records)


def test_registry_adapter_reads_vllms_own_registry():
    """vLLM serves a target with model_impl "vllm" when its registry lists one architecture
    (it tries each); HeliumForCausalLM it serves only through its Transformers backend."""
    assert vllm_serves_architecture(["HeliumForCausalLM"]) is False
    assert vllm_serves_architecture(["LlamaForCausalLM"]) is True
    assert vllm_serves_architecture(["HeliumForCausalLM", "LlamaForCausalLM"]) is True
    assert vllm_serves_architecture([]) is None


@pytest.fixture
def helium_config(tmp_path):
    """A local checkpoint (config.json only) whose architecture vLLM's registry does not list."""
    (tmp_path / "config.json").write_text(
        '{"architectures": ["HeliumForCausalLM"], "model_type": "helium"}')
    return str(tmp_path)


def test_transformers_only_target_keeps_auto(env, helium_config, plugin_log):
    env.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    args = EngineArgs(model=helium_config)
    decision = apply_to_engine_args(args)
    assert decision.method == "ngram" and decision.model_impl == "auto"
    assert args.model_impl == "auto"
    assert not any("model_impl" in r.getMessage() for r in plugin_log.records
                   if r.levelno >= logging.WARNING)


def test_mtp_on_a_transformers_only_target_is_refused(env, helium_config):
    env.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    args = EngineArgs(model=helium_config, speculative_config={
        "method": "mtp", "num_speculative_tokens": 1})
    with pytest.raises(SpecDecodeConfigError, match="HeliumForCausalLM.*draft-free method"):
        apply_to_engine_args(args)
    assert args.model_impl == "auto"


MODEL_URI = "s3://AKIAEXAMPLE:SECRET1/x@bucket/m?token=SECRET2"
"""A model named by a URI with credentials (userinfo with a raw '/', a query token)."""


def test_info_line_hides_credentials_in_the_model(env, plugin_log):
    """The decision's INFO line names the preset, here the model itself (no preset matched)."""
    env.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    decision = apply_to_engine_args(EngineArgs(model=MODEL_URI))
    assert decision is not None and decision.enabled
    info = [r.getMessage() for r in plugin_log.records
            if r.levelno == logging.INFO and "speculative decoding on" in r.getMessage()]
    assert len(info) == 1 and "(preset s3://<redacted>@bucket/m?token=<redacted>)" in info[0]
    assert not any("SECRET" in r.getMessage() for r in plugin_log.records)


def test_error_quoting_the_model_hides_its_credentials(env, plugin_log):
    env.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    with pytest.raises(SpecDecodeConfigError) as exc:
        apply_to_engine_args(EngineArgs(model="~nosuchuser-specdec/m?token=SECRET3"))
    assert "?token=<redacted>" in exc.value.message and "SECRET" not in str(exc.value)
    assert any(r.levelno == logging.ERROR for r in plugin_log.records)
    assert not any("SECRET" in r.getMessage() for r in plugin_log.records)


def test_metrics_labels_hide_credentials(env, tiny_llama):
    """What the hook exports after vLLM built its config: vLLM serves the model under the
    served name (else the model string), and the preset is that name where none matched."""
    from prometheus_client import generate_latest

    from vllm_specdec_plugin.engine.hook import export_decision

    env.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    args = EngineArgs(model=str(tiny_llama), served_model_name=[MODEL_URI], max_model_len=256,
                      enforce_eager=True)
    apply_to_engine_args(args)
    export_decision(args, args.create_engine_config())
    gauge = [line for line in generate_latest().decode().splitlines()
             if line.startswith("vllm_specdec_decision_info{")]
    assert len(gauge) == 1, gauge
    shown = "s3://<redacted>@bucket/m?token=<redacted>"
    assert f'model_name="{shown}"' in gauge[0] and f'preset="{shown}"' in gauge[0]
    assert "SECRET" not in gauge[0]
