"""Shared helpers of the deploy checks (tests/deploy/): where things are, the validators, and the
skip-outside-CI rule for a missing tool (in CI, CI=true, a missing tool fails the test)."""

from __future__ import annotations

import copy
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "launch" / "k8s"
MONITORING = REPO / "launch" / "monitoring"
DOCKERFILES = sorted((REPO / "launch").glob("Dockerfile.*"))
CRDS = Path(__file__).resolve().parent / "crds"
DEPLOY_DOC = REPO / "docs" / "deploy.md"

# The Kubernetes version the manifests are validated for (kubernetes-validate --strict -k), and
# the newest one the pinned kubernetes-validate (requirements/test.txt) ships schemas for.
K8S_VERSION = "1.33.0"
K8S_VERSIONS = (K8S_VERSION, "1.37.0")

# Custom resources and the vendored CRD that defines each (tests/deploy/crds/README.md).
CRD_FILES = {
    ("kaito.sh", "Workspace"): "kaito.sh_workspaces.yaml",
    ("monitoring.coreos.com", "PodMonitor"): "monitoring.coreos.com_podmonitors.yaml",
    ("monitoring.coreos.com", "PrometheusRule"): "monitoring.coreos.com_prometheusrules.yaml",
}

# What the plugin reads (README "Inputs"): the opt-in annotation, its downward-API env var and
# the default annotations file.
OPT_IN = "kaito.sh/enable-speculative-decoding"
OPT_IN_ENV = "KAITO_ENABLE_SPECULATIVE_DECODING"
OPT_IN_FIELD = f"metadata.annotations['{OPT_IN}']"
ANNOTATIONS_FILE = "/etc/podinfo/annotations"
INFERENCE_CONFIG = "/mnt/config/inference_config.yaml"


def in_ci() -> bool:
    return bool(os.environ.get("CI"))


def missing(tool: str, how: str) -> None:
    """A validator is not installed: fail in CI (it must run there), else skip with the reason."""
    message = f"{tool} not installed ({how})"
    if in_ci():
        pytest.fail(f"{message}: CI must run this check")
    pytest.skip(message)


def tool_path(name: str, how: str) -> str:
    """An executable on PATH or beside this interpreter (a venv's bin/, not activated)."""
    beside = Path(sys.executable).parent / name
    found = shutil.which(name) or (str(beside) if beside.exists() else None)
    if found is None:
        missing(name, how)
    return found  # type: ignore[return-value]


def manifest_files() -> list[Path]:
    return sorted(K8S.rglob("*.yaml"))


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def all_docs() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, doc) for path in manifest_files() for doc in load_docs(path)]


def group_of(doc: dict[str, Any]) -> str:
    api = doc["apiVersion"]
    return api.split("/")[0] if "/" in api else ""


def is_custom(doc: dict[str, Any]) -> bool:
    return (group_of(doc), doc["kind"]) in CRD_FILES


def pod_templates(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(workload kind, pod template) of every workload in a manifest file; a KAITO Workspace's
    pod template is its inference.template."""
    found = []
    for doc in load_docs(path):
        if doc["kind"] in ("Deployment", "StatefulSet"):
            found.append((doc["kind"], doc["spec"]["template"]))
        elif doc["kind"] == "Workspace":
            found.append(("Workspace", doc["inference"]["template"]))
    return found


# --- CRD schemas -------------------------------------------------------------------------------

def crd_schema(group: str, kind: str, version: str) -> dict[str, Any]:
    """The openAPIV3Schema of a served version of a vendored CRD, made strict like the API
    server's field validation: unknown fields are errors except under
    x-kubernetes-preserve-unknown-fields; int-or-string fields take either."""
    crd = yaml.safe_load((CRDS / CRD_FILES[(group, kind)]).read_text())
    assert crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == kind
    (entry,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    assert entry.get("served", False), f"{group}/{version} {kind} is not served"
    return strict_schema(entry["schema"]["openAPIV3Schema"])


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    schema = copy.deepcopy(schema)
    preserve = schema.pop("x-kubernetes-preserve-unknown-fields", False)
    if schema.pop("x-kubernetes-int-or-string", False):
        schema.pop("type", None)
        schema["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    for key in [k for k in schema if k.startswith("x-kubernetes-")]:
        schema.pop(key)
    if "properties" in schema:
        schema["properties"] = {k: strict_schema(v) for k, v in schema["properties"].items()}
        if not preserve and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
    if isinstance(schema.get("additionalProperties"), dict):
        schema["additionalProperties"] = strict_schema(schema["additionalProperties"])
    if isinstance(schema.get("items"), dict):
        schema["items"] = strict_schema(schema["items"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in schema:
            schema[key] = [strict_schema(s) for s in schema[key]]
    return schema


# --- Kubernetes quantities ---------------------------------------------------------------------

_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 1e-3}


def quantity(value: str | int | float) -> float:
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(value))
    assert match and match.group(2) in _SUFFIX, f"not a quantity: {value!r}"
    return float(match.group(1)) * _SUFFIX[match.group(2)]


# --- GitHub heading anchors --------------------------------------------------------------------

def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (lowercase, punctuation dropped,
    spaces to hyphens)."""
    anchors = set()
    for line in markdown.splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            text = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower())
            anchors.add(text.replace(" ", "-"))
    return anchors
