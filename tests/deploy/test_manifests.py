"""The Kubernetes manifests in launch/k8s/ validate strictly and are fit for production.

Validators: kubernetes-validate (--strict, pinned Kubernetes version) for built-in kinds; the
vendored CRD schemas (KAITO v0.12.0 Workspace, prometheus-operator v0.93.0 PodMonitor and
PrometheusRule, tests/deploy/crds/) through jsonschema for custom resources; a Workspace's
inference.template, which the CRD leaves open (x-kubernetes-preserve-unknown-fields), is
validated as a core/v1 PodTemplate. Then the contract the plugin needs (the annotation through
the downward API as env and file) and what an operator expects (probes, /dev/shm,
securityContext, resources, Service, PodMonitor)."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
from deploy_support import (
    ANNOTATIONS_FILE,
    INFERENCE_CONFIG,
    K8S,
    K8S_VERSION,
    K8S_VERSIONS,
    OPT_IN,
    OPT_IN_ENV,
    OPT_IN_FIELD,
    REPO,
    all_docs,
    crd_schema,
    group_of,
    is_custom,
    load_docs,
    manifest_files,
    missing,
    pod_templates,
    quantity,
)

EXPECTED = {
    "deployment.yaml": "gpu",                 # route 2, NVIDIA
    "deployment-cpu.yaml": "cpu",             # route 2, CPU
    "deployment-rbln.yaml": "rbln",           # route 4, RBLN (hand-written only)
    "statefulset/statefulset.yaml": "gpu",    # route 2, NVIDIA, TP=2, claims
    "kaito/workspace.yaml": "gpu",            # route 1, KAITO inference.template
}
ACCELERATOR = {"gpu": "nvidia.com/gpu", "rbln": "rebellions.ai/npu", "cpu": None}
WORKLOADS = [(name, flavour) for name, flavour in EXPECTED.items()]


def kubernetes_validate():
    try:
        import kubernetes_validate
    except ImportError:
        missing("kubernetes-validate", "pip install -r requirements/test.txt")
    return kubernetes_validate


def test_every_route_has_its_manifest():
    names = {str(p.relative_to(K8S)) for p in manifest_files()}
    assert names == set(EXPECTED), f"launch/k8s/ holds {sorted(names)}"


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_builtin_kinds_validate_strictly(version: str):
    kv = kubernetes_validate()
    checked = 0
    for path, doc in all_docs():
        if is_custom(doc):
            continue
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as exc:
            pytest.fail(f"{path.relative_to(REPO)} {doc['kind']}/{doc['metadata']['name']} "
                        f"against Kubernetes {version}: {exc.message} at "
                        f"{'/'.join(map(str, exc.path))}")
        checked += 1
    assert checked >= 11  # 4 workloads, 5 Services, 2 ConfigMaps


def test_kubernetes_validate_cli_strict():
    """What CI runs: `python -m kubernetes_validate --strict -k 1.33.0 launch/k8s/**/*.yaml`.
    It passes every built-in resource and only warns about the custom ones (no schema of its
    own for CRDs): those are validated against the vendored CRDs below."""
    kubernetes_validate()
    files = [str(p.relative_to(REPO)) for p in manifest_files()]
    done = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k",
                           K8S_VERSION, *files], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    lines = [line for line in out.splitlines() if line.strip()]
    builtin = sum(1 for _, doc in all_docs() if not is_custom(doc))
    assert sum(" passed for resource " in line for line in lines) == builtin, out
    others = [line for line in lines if " passed for resource " not in line]
    assert all(re.search(r"Couldn't find schema for kind (Workspace|PodMonitor|PrometheusRule)"
                         r" with api version (kaito\.sh|monitoring\.coreos\.com)/", line)
               for line in others), out


def test_custom_resources_match_their_crds():
    import jsonschema

    checked = []
    for path, doc in all_docs():
        if not is_custom(doc):
            continue
        version = doc["apiVersion"].split("/")[1]
        schema = crd_schema(group_of(doc), doc["kind"], version)
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=str)
        assert not errors, (f"{path.relative_to(REPO)} {doc['kind']}: "
                            + "; ".join(f"{e.message} at {'/'.join(map(str, e.path))}"
                                        for e in errors))
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])
        checked.append(doc["kind"])
    assert checked.count("Workspace") == 1 and checked.count("PodMonitor") == len(EXPECTED)


def test_workspace_is_kaito_v1beta1_with_a_template_not_a_preset():
    (doc,) = [d for d in load_docs(K8S / "kaito/workspace.yaml") if d["kind"] == "Workspace"]
    assert doc["apiVersion"] == "kaito.sh/v1beta1"
    assert "preset" not in doc["inference"]  # KAITO refuses preset and template together
    assert doc["resource"]["labelSelector"]["matchLabels"]  # required by the CRD
    # The annotation belongs on the template: KAITO copies the template's metadata into its
    # pods, never the Workspace's own annotations.
    assert OPT_IN not in (doc["metadata"].get("annotations") or {})
    assert doc["inference"]["template"]["metadata"]["annotations"][OPT_IN] == "true"
    # KAITO replaces the template's affinity with its own node selection.
    assert "affinity" not in doc["inference"]["template"]["spec"]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_workspace_template_is_a_valid_pod_template(version: str):
    kv = kubernetes_validate()
    (doc,) = [d for d in load_docs(K8S / "kaito/workspace.yaml") if d["kind"] == "Workspace"]
    wrapped = {"apiVersion": "v1", "kind": "PodTemplate",
               "metadata": {"name": doc["metadata"]["name"]},
               "template": doc["inference"]["template"]}
    try:
        kv.validate(wrapped, version, strict=True)
    except kv.ValidationError as exc:
        pytest.fail(f"inference.template: {exc.message} at {'/'.join(map(str, exc.path))}")


def test_kaito_workspace_relies_on_kaitos_own_service():
    docs = load_docs(K8S / "kaito/workspace.yaml")
    assert not [d for d in docs if d["kind"] == "Service"]  # KAITO creates <name>: 80 -> 5000
    (_, template), = pod_templates(K8S / "kaito/workspace.yaml")
    ports = {p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
    assert 5000 in ports


# --- the plugin's contract, in every workload --------------------------------------------------

def container(template: dict[str, Any]) -> dict[str, Any]:
    (vllm,) = [c for c in template["spec"]["containers"] if c["name"] == "vllm"]
    return vllm


@pytest.mark.parametrize(("name", "flavour"), WORKLOADS)
def test_annotation_reaches_the_container_as_env_and_file(name: str, flavour: str):
    ((_, template),) = pod_templates(K8S / name)
    assert template["metadata"]["annotations"][OPT_IN] == "true"
    vllm = container(template)
    env = {e["name"]: e for e in vllm.get("env", [])}
    assert env[OPT_IN_ENV]["valueFrom"]["fieldRef"]["fieldPath"] == OPT_IN_FIELD
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in vllm["volumeMounts"]}
    directory, file = ANNOTATIONS_FILE.rsplit("/", 1)
    podinfo = volumes[mounts[directory]["name"]]["downwardAPI"]["items"]
    assert {"path": file, "fieldRef": {"fieldPath": "metadata.annotations"}} in podinfo
    config_dir = INFERENCE_CONFIG.rsplit("/", 1)[0]
    if config_dir in mounts:
        config_map = volumes[mounts[config_dir]["name"]]["configMap"]["name"]
        (cm,) = [d for d in load_docs(K8S / name)
                 if d["kind"] == "ConfigMap" and d["metadata"]["name"] == config_map]
        assert "vllm" in __import__("yaml").safe_load(cm["data"]["inference_config.yaml"])


@pytest.mark.parametrize(("name", "flavour"), WORKLOADS)
def test_image_and_launcher_match_the_host(name: str, flavour: str):
    ((_, template),) = pod_templates(K8S / name)
    vllm = container(template)
    assert vllm["image"].endswith(f"-{flavour}"), vllm["image"]
    assert "command" not in vllm  # the image's entrypoint is the launcher
    assert vllm["args"][:1] == ["--model"] and "--" in vllm["args"]


@pytest.mark.parametrize(("name", "flavour"), WORKLOADS)
def test_probes_fit_model_load(name: str, flavour: str):
    ((_, template),) = pod_templates(K8S / name)
    vllm = container(template)
    ports = {p["name"]: p["containerPort"] for p in vllm["ports"]}
    probes = {kind: vllm.get(f"{kind}Probe") for kind in ("startup", "liveness", "readiness")}
    assert all(probes.values()), f"missing probes: {[k for k, v in probes.items() if not v]}"
    for kind, probe in probes.items():
        assert probe["httpGet"]["path"] == "/health", kind
        assert probe["httpGet"]["port"] in ports or probe["httpGet"]["port"] in ports.values()
        assert probe.get("timeoutSeconds", 1) >= 3, kind  # /health under load answers late
    startup = probes["startup"]
    budget = startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3)
    # A download, weight loading and torch.compile: 10 minutes at least; an RBLN NPU compiles
    # the model on first start, far slower.
    assert budget >= (3600 if flavour == "rbln" else 600), f"startup budget {budget}s"
    liveness = probes["liveness"]
    assert liveness.get("periodSeconds", 10) * liveness.get("failureThreshold", 3) >= 45
    assert "initialDelaySeconds" not in liveness  # the startup probe holds it back


@pytest.mark.parametrize(("name", "flavour"), WORKLOADS)
def test_shared_memory_volume(name: str, flavour: str):
    ((_, template),) = pod_templates(K8S / name)
    vllm = container(template)
    mounts = {m["mountPath"]: m["name"] for m in vllm["volumeMounts"]}
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    shm = volumes[mounts["/dev/shm"]]["emptyDir"]
    assert shm["medium"] == "Memory" and quantity(shm["sizeLimit"]) >= 1 << 30
    # A memory-backed emptyDir counts against the container's memory limit.
    assert quantity(vllm["resources"]["limits"]["memory"]) > 2 * quantity(shm["sizeLimit"])


@pytest.mark.parametrize(("name", "flavour"), WORKLOADS)
def test_security_context(name: str, flavour: str):
    ((_, template),) = pod_templates(K8S / name)
    pod = template["spec"].get("securityContext", {})
    vllm = container(template)
    ctx = vllm.get("securityContext", {})
    assert ctx.get("allowPrivilegeEscalation") is False
    assert ctx.get("capabilities", {}).get("drop") == ["ALL"]
    assert not ctx.get("capabilities", {}).get("add")
    assert not ctx.get("privileged", False)
    run_as_non_root = ctx.get("runAsNonRoot", pod.get("runAsNonRoot"))
    run_as_user = ctx.get("runAsUser", pod.get("runAsUser"))
    assert run_as_non_root is True and run_as_user not in (None, 0)
    assert (ctx.get("seccompProfile") or pod.get("seccompProfile", {})).get("type") == (
        "RuntimeDefault")
    assert template["spec"].get("automountServiceAccountToken") is False
    assert template["spec"].get("hostNetwork") is not True
    assert template["spec"].get("hostIPC") is not True


@pytest.mark.parametrize(("name", "flavour"), WORKLOADS)
def test_resources(name: str, flavour: str):
    ((_, template),) = pod_templates(K8S / name)
    resources = container(template)["resources"]
    for key in ("cpu", "memory"):
        assert key in resources["requests"] and key in resources["limits"], key
        assert quantity(resources["requests"][key]) <= quantity(resources["limits"][key])
    accelerator = ACCELERATOR[flavour]
    if accelerator:
        assert resources["limits"][accelerator] == resources["requests"][accelerator]
    else:
        assert not any(k.endswith(("/gpu", "/npu")) for k in resources["limits"])


@pytest.mark.parametrize(("name", "flavour"), WORKLOADS)
def test_graceful_shutdown(name: str, flavour: str):
    ((_, template),) = pod_templates(K8S / name)
    # The launcher passes --shutdown-timeout 25: the pod must not be killed before the drain.
    assert template["spec"].get("terminationGracePeriodSeconds", 30) >= 30


@pytest.mark.parametrize(("name", "flavour"), WORKLOADS)
def test_service_and_podmonitor_select_the_pods(name: str, flavour: str):
    docs = load_docs(K8S / name)
    ((kind, template),) = pod_templates(K8S / name)
    labels = dict(template["metadata"].get("labels", {}))
    if kind == "Workspace":
        workspace = next(d for d in docs if d["kind"] == "Workspace")
        labels["kaito.sh/workspace"] = workspace["metadata"]["name"]  # added by KAITO
    port_names = {p["name"] for p in container(template)["ports"]}
    services = [d for d in docs if d["kind"] == "Service"]
    if kind != "Workspace":
        assert services
    for service in services:
        assert service["spec"]["selector"].items() <= labels.items(), service["metadata"]
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= port_names
    if kind == "StatefulSet":
        workload = next(d for d in docs if d["kind"] == "StatefulSet")
        (governing,) = [s for s in services
                        if s["metadata"]["name"] == workload["spec"]["serviceName"]]
        assert governing["spec"]["clusterIP"] == "None"
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in port_names and endpoint.get("path", "/metrics") == "/metrics"
    # kube-prometheus-stack selects PodMonitors by its Helm release label (docs/deploy.md).
    assert "release" in monitor["metadata"]["labels"]


def test_workload_selectors_match_their_templates():
    for path, doc in all_docs():
        if doc["kind"] in ("Deployment", "StatefulSet"):
            selector = doc["spec"]["selector"]["matchLabels"]
            assert selector.items() <= doc["spec"]["template"]["metadata"]["labels"].items(), path


# --- what launch/ says about KAITO ---------------------------------------------------------------

CLAIM = re.compile(r"\bKAITO\b(?:'s controller)?[^.;]*?\b(copies|copy|passes|pass|propagates|"
                   r"generates)\b[^.;]*", re.IGNORECASE)


def test_no_claim_that_kaito_passes_annotations_to_pods():
    """KAITO v0.12 keeps a Workspace's annotations on the Workspace; its pods never see them.
    Nothing under launch/ (or docs/deploy.md) may say otherwise."""
    files = [p for p in (REPO / "launch").rglob("*") if p.is_file() and p.suffix != ".png"]
    files += [REPO / "docs" / "deploy.md"]
    claims = []
    for path in files:
        text = re.sub(r"\s*\n\s*#?\s*", " ", path.read_text())  # comments joined into sentences
        for match in CLAIM.finditer(text):
            sentence = match.group(0)
            if re.search(r"\b(not|never|n't)\b", sentence, re.IGNORECASE):
                continue
            if re.search(r"annotation|equivalent|pods?\b", sentence, re.IGNORECASE):
                claims.append(f"{path.relative_to(REPO)}: {sentence.strip()[:160]}")
    assert not claims, "\n".join(claims)


def test_no_placeholder_left_in_the_pod_specs():
    for path, doc in all_docs():
        text = str(doc)
        assert "TODO" not in text and "CHANGEME" not in text, path
