"""infra/k8s: strict schema validation (offline) and the restricted Pod Security profile on every pod.

kubernetes-validate ships the OpenAPI schemas inside its wheel, so this runs
without a cluster or network. The profile checks are ours: the schema says a
field is well-formed, not that it is there.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

K8S = ROOT / "infra" / "k8s"
#: The oldest Kubernetes minor we support; bump deliberately.
K8S_VERSION = "1.33.0"
#: Workloads whose pods run forever must have probes; a Job's pod runs to completion.
LONG_RUNNING = {"Deployment", "StatefulSet", "DaemonSet"}


def manifests(folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for path in sorted(folder.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        out += [(path, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return out


def pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    kind = doc.get("kind")
    if kind in LONG_RUNNING or kind == "Job":
        return doc["spec"]["template"]["spec"]
    if kind == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    if kind == "Pod":
        return doc["spec"]
    return None


def profile_violations(doc: dict[str, Any]) -> list[str]:
    """What keeps this workload's pods from the restricted profile (plus our own rules), as messages."""
    spec = pod_spec(doc)
    if spec is None:
        return []
    name = f"{doc['kind']}/{doc['metadata']['name']}"
    problems: list[str] = []
    psc = spec.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            problems.append(f"{name}: {flag}")
    if any("hostPath" in v for v in spec.get("volumes") or []):
        problems.append(f"{name}: hostPath volume")
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for c in (spec.get("initContainers") or []) + spec["containers"]:
        where = f"{name} container {c['name']}"
        csc = c.get("securityContext") or {}

        def effective(key: str, csc: dict[str, Any] = csc) -> Any:
            return csc.get(key, psc.get(key))

        if effective("runAsNonRoot") is not True:
            problems.append(f"{where}: runAsNonRoot is not true")
        if not isinstance(effective("runAsUser"), int) or effective("runAsUser") == 0:
            problems.append(f"{where}: runAsUser missing or 0")
        if (effective("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{where}: seccompProfile is not RuntimeDefault")
        if csc.get("privileged"):
            problems.append(f"{where}: privileged")
        if csc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allowPrivilegeEscalation is not false")
        caps = csc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            problems.append(f"{where}: capabilities do not drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{where}: adds capabilities {caps.get('add')}")
        if csc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{where}: readOnlyRootFilesystem is not true")
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts") or []}
        for path in ("/tmp", "/var/lib/freshindex"):
            if "emptyDir" not in volumes.get(mounts.get(path, ""), {}):
                problems.append(f"{where}: no emptyDir mounted at {path}")
        res = c.get("resources") or {}
        for kind, keys in (("requests", ("cpu", "memory")), ("limits", ("cpu", "memory"))):
            missing = [k for k in keys if k not in (res.get(kind) or {})]
            if missing:
                problems.append(f"{where}: resources.{kind} lacks {', '.join(missing)}")
        if doc["kind"] in LONG_RUNNING:
            for probe in ("livenessProbe", "readinessProbe") if _serves(c, doc) else ("livenessProbe",):
                if probe not in c:
                    problems.append(f"{where}: no {probe}")
    return problems


def _serves(container: dict[str, Any], doc: dict[str, Any]) -> bool:
    """Containers that take work (api, workers) need readiness too; beat only liveness."""
    return doc["metadata"]["name"] != "freshindex-beat"


def schema_errors(folder: Path, version: str = K8S_VERSION) -> list[str]:
    import kubernetes_validate

    errors = []
    for path, doc in manifests(folder):
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{path.name}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}: {exc.message}")
    return errors


def test_every_manifest_validates_strictly_offline() -> None:
    docs = manifests(K8S)
    kinds = sorted({d["kind"] for _, d in docs})
    assert {"Deployment", "Job", "Namespace", "Service", "ConfigMap"} <= set(kinds)
    assert schema_errors(K8S) == []


def test_every_pod_meets_the_restricted_profile_and_has_probes() -> None:
    docs = [d for _, d in manifests(K8S)]
    workloads = [d for d in docs if pod_spec(d) is not None]
    assert len(workloads) >= 5  # api, worker-sync, worker-parse, beat, migrate
    assert [p for d in workloads for p in profile_violations(d)] == []
    # the worker and beat probes are the real heartbeat check, not a placeholder
    for d in workloads:
        c = pod_spec(d)["containers"][0]
        if d["metadata"]["name"].startswith(("freshindex-worker", "freshindex-beat")):
            assert c["livenessProbe"]["exec"]["command"][:2] == ["freshindex", "probe"]


def test_namespace_enforces_restricted_and_kustomization_uses_it() -> None:
    ns = [d for _, d in manifests(K8S) if d["kind"] == "Namespace"]
    assert len(ns) == 1 and ns[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kust["namespace"] == ns[0]["metadata"]["name"]
    listed = set(kust["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert listed == on_disk


def _plant(tmp_path: Path, file: str, mutate) -> Path:
    target = tmp_path / "k8s"
    shutil.copytree(K8S, target)
    docs = list(yaml.safe_load_all((target / file).read_text()))
    mutate(docs[0])
    (target / file).write_text(yaml.safe_dump_all(docs))
    return target


@pytest.mark.parametrize(("file", "mutate", "expected"), [
    ("worker-parse.yaml", lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("livenessProbe"),
     "no livenessProbe"),
    ("worker-sync.yaml", lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("readinessProbe"),
     "no readinessProbe"),
    ("beat.yaml", lambda d: d["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(
        privileged=True, allowPrivilegeEscalation=True), "privileged"),
    ("api.yaml", lambda d: d["spec"]["template"]["spec"]["securityContext"].pop("seccompProfile"),
     "seccompProfile"),
    ("api.yaml", lambda d: d["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(
        readOnlyRootFilesystem=False), "readOnlyRootFilesystem"),
    ("migrate-job.yaml", lambda d: d["spec"]["template"]["spec"]["containers"][0]["securityContext"][
        "capabilities"].update(drop=[]), "drop ALL"),
    ("worker-parse.yaml", lambda d: d["spec"]["template"]["spec"]["containers"][0]["resources"].pop("limits"),
     "resources.limits"),
])
def test_a_planted_violation_fails(tmp_path: Path, file: str, mutate, expected: str) -> None:
    target = _plant(tmp_path, file, mutate)
    problems = [p for _, d in manifests(target) for p in profile_violations(d)]
    assert any(expected in p for p in problems), problems


def test_a_planted_schema_error_fails(tmp_path: Path) -> None:
    def typo(d: dict[str, Any]) -> None:
        c = d["spec"]["template"]["spec"]["containers"][0]
        c["livenessProbes"] = c.pop("livenessProbe")  # strict mode rejects unknown fields

    target = _plant(tmp_path, "beat.yaml", typo)
    errors = schema_errors(target)
    assert len(errors) == 1 and "beat.yaml" in errors[0], errors
