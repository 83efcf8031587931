"""What a pod from one of the shipped manifests (`launch/k8s/`) sees, as Kubernetes makes it.

The container's env (a downward-API `fieldRef` to an absent annotation is set to "", not
left unset) and the downward-API annotations file (`key="value"` lines of the annotations
present, Go-quoted), for the manifest's pod template with its annotations changed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

K8S = Path(__file__).parents[2] / "launch" / "k8s"
_ANNOTATION_REF = re.compile(r"^metadata\.annotations\['([^']+)'\]$")


def pod_template(manifest: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    return next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]


def pod_view(manifest: Path, directory: Path,
             annotations: Mapping[str, str | None]) -> dict[str, str]:
    """The env of the manifest's first container, with the pod's annotations updated by
    `annotations` (None removes one), and its annotations file written under `directory`
    (`KAITO_ANNOTATIONS_FILE` points at it, where the manifest mounts it)."""
    template = pod_template(manifest)
    present = dict(template["metadata"].get("annotations") or {})
    for key, value in annotations.items():
        if value is None:
            present.pop(key, None)
        else:
            present[key] = value
    env: dict[str, str] = {}
    for item in template["spec"]["containers"][0].get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
            continue
        field = (item.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath", "")
        match = _ANNOTATION_REF.match(field)
        if match:
            env[item["name"]] = present.get(match.group(1), "")  # absent: "" (the downward API)
    path = directory / "annotations"
    path.write_text("".join(f"{key}={json.dumps(value)}\n" for key, value in present.items()))
    env["KAITO_ANNOTATIONS_FILE"] = str(path)
    return env
