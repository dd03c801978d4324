"""The Kubernetes manifests (issue 47): every overlay renders with kustomize (kubectl's) and
each object validates, strictly (no unknown field), against Kubernetes' own schema; the
settings they set are parley's; what they promise holds: probes on every parley container,
a read-only root filesystem, SSE unbuffered at the ingress, Postgres reached by parley's
processes alone, workers scaled on a metric parley exposes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from parley.config import Settings

ROOT = Path(__file__).parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
OVERLAYS = ["embedded", "split", "split-vllm", "split-keda"]
VERSION = "1.31.0"
CUSTOM = {("keda.sh/v1alpha1", "ScaledObject")}  # a CRD: no schema in Kubernetes' own


def rendered(overlay: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (kustomize built in) is needed: `make kubectl` asks apt for it"
    out = subprocess.run(
        [kubectl, "kustomize", str(KUBERNETES / "overlays" / overlay)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_renders_and_validates_strictly(overlay: str) -> None:
    docs = rendered(overlay)
    assert docs
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CUSTOM:
            continue
        kubernetes_validate.validate(doc, VERSION, strict=True)


def test_the_validation_refuses_an_unknown_field() -> None:
    """(The check above can fail: a misspelt field is refused.)"""
    deployment = of_kind(rendered("split"), "Deployment")[0]
    deployment["spec"]["replicass"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSION, strict=True)


def parley_containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pods = [d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("Deployment", "Job")]
    return [c for pod in pods for c in pod["containers"] if c["image"].endswith("/parley:local")]


@pytest.mark.parametrize("overlay", ["embedded", "split"])
def test_parley_containers_are_probed_read_only_and_set_only_known_settings(
    overlay: str,
) -> None:
    docs = rendered(overlay)
    containers = parley_containers(docs)
    assert containers
    for c in containers:
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        if c["args"] != ["migrate"]:
            assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert "readinessProbe" in c
    config = of_kind(docs, "ConfigMap")[0]["data"]
    env = {k: v for k, v in config.items() if k.startswith("PARLEY_")}
    names = set(settings_env_names())
    assert set(env) <= names, set(env) - names


def settings_env_names() -> list[str]:
    """Every PARLEY_… name docs/SETTINGS.md lists (written from the settings models)."""
    text = (ROOT / "docs" / "SETTINGS.md").read_text()
    return [part.strip("`") for part in text.split() if part.startswith("`PARLEY_")]


def test_the_ingress_streams_unbuffered() -> None:
    ingress = of_kind(rendered("split"), "Ingress")[0]
    notes = ingress["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert int(notes["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 60


def test_postgres_is_reached_by_parley_alone_and_workers_scale_on_the_queue() -> None:
    docs = rendered("split")
    policies = {p["metadata"]["name"]: p["spec"] for p in of_kind(docs, "NetworkPolicy")}
    postgres = policies["postgres-from-parley-only"]
    assert postgres["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "postgres"}
    (rule,) = postgres["ingress"]
    (source,) = rule["from"]
    allowed = source["podSelector"]["matchExpressions"][0]["values"]
    assert sorted(allowed) == ["api", "migrate", "worker"]
    (hpa,) = of_kind(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "parley-worker"
    metric = hpa["spec"]["metrics"][0]["external"]["metric"]["name"]
    assert metric in (ROOT / "docs" / "OPERATIONS.md").read_text()  # one parley exposes
    keda = rendered("split-keda")
    assert of_kind(keda, "HorizontalPodAutoscaler") == []
    (scaled,) = of_kind(keda, "ScaledObject")
    assert scaled["spec"]["scaleTargetRef"]["name"] == "parley-worker"
    assert metric in scaled["spec"]["triggers"][0]["metadata"]["query"]


def test_the_gpu_example_is_scheduled_on_gpus_and_registered_as_an_upstream() -> None:
    docs = rendered("split-vllm")
    (vllm,) = [d for d in of_kind(docs, "StatefulSet") if d["metadata"]["name"] == "vllm"]
    pod = vllm["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu" and pod["nodeSelector"]
    models = json.loads(of_kind(docs, "ConfigMap")[0]["data"]["PARLEY_MODELS"])
    settings = Settings.model_validate({"models": models})
    (model,) = settings.engines.models
    assert [r.base_url for r in model.replicas] == [
        "http://vllm-0.vllm:8000/v1",
        "http://vllm-1.vllm:8000/v1",
    ]
