"""infra/k8s: strict schema validation (offline) and the restricted Pod Security profile on every pod.

kubernetes-validate ships the OpenAPI schemas inside its wheel, so this runs
without a cluster or network; KEDA's objects (not Kubernetes kinds) are checked
against cloudcoil-models-keda, pydantic models generated from KEDA's CRDs. The profile checks are ours: the schema says a
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
#: KEDA objects: a folder of their own (applied only where KEDA is installed), validated with its CRD models.
AUTOSCALING = K8S / "autoscaling"
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


def _unknown_fields(given: Any, kept: Any, where: str = "") -> list[str]:
    """Paths present in ``given`` but dropped by a model that ignores unknown fields (``kept``: its dump)."""
    if isinstance(given, dict) and isinstance(kept, dict):
        return [p for k, v in given.items()
                for p in ([f"{where}.{k}"] if k not in kept else _unknown_fields(v, kept[k], f"{where}.{k}"))]
    if isinstance(given, list) and isinstance(kept, list):
        return [p for i, (a, b) in enumerate(zip(given, kept, strict=False)) for p in _unknown_fields(a, b, f"{where}[{i}]")]
    return []


def keda_error(doc: dict[str, Any]) -> str | None:
    """A KEDA object checked against the models cloudcoil-models-keda generates from KEDA's CRDs, strictly.

    The models ignore unknown fields, so a field the dump drops is reported
    as unknown (the API server's strict field validation would reject it).
    """
    import pydantic
    from cloudcoil.models.keda import v1alpha1

    model = getattr(v1alpha1, doc.get("kind", ""), None)
    if doc.get("apiVersion") != "keda.sh/v1alpha1" or model is None:
        return f"not a keda.sh/v1alpha1 kind: {doc.get('apiVersion')} {doc.get('kind')}"
    try:
        obj = model.model_validate(doc)
    except pydantic.ValidationError as exc:
        return str(exc).splitlines()[0] + ": " + "; ".join(e["msg"] + " at " + ".".join(map(str, e["loc"]))
                                                      for e in exc.errors())
    unknown = _unknown_fields(doc, obj.model_dump(by_alias=True, exclude_unset=True, mode="json"))
    return f"unknown fields {unknown}" if unknown else None


def schema_errors(folder: Path, version: str = K8S_VERSION) -> list[str]:
    import kubernetes_validate

    errors = []
    for path, doc in manifests(folder):
        name = f"{path.name}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if str(doc.get("apiVersion", "")).startswith("keda.sh/"):
            if (problem := keda_error(doc)) is not None:
                errors.append(f"{name}: {problem}")
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{name}: {exc.message}")
    return errors


def test_every_manifest_validates_strictly_offline() -> None:
    docs = manifests(K8S)
    kinds = sorted({d["kind"] for _, d in docs})
    assert {"Deployment", "Job", "Namespace", "Service", "ConfigMap", "PodDisruptionBudget",
            "NetworkPolicy"} <= set(kinds)
    assert schema_errors(K8S) == []
    autoscaling = {d["kind"] for _, d in manifests(AUTOSCALING)}
    assert autoscaling == {"ScaledObject", "TriggerAuthentication"}
    assert schema_errors(AUTOSCALING) == []


def _deployments() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for _, d in manifests(K8S) if d["kind"] == "Deployment"}


def test_every_queue_has_a_keda_trigger_on_the_deployment_that_consumes_it() -> None:
    from freshindex.settings import load_settings
    from freshindex.workers.names import Queue, queue_name

    settings = load_settings()
    consumed: dict[str, set[str]] = {}  # Deployment -> queues its worker command consumes
    for name, d in _deployments().items():
        command = pod_spec(d)["containers"][0]["command"]
        if command[:2] == ["freshindex", "worker"]:
            consumed[name] = {queue_name(settings, Queue(q)) for q in command[command.index("--queues") + 1].split(",")}
    assert set().union(*consumed.values()) == {queue_name(settings, q) for q in Queue}  # one worker per stage
    scaled = {d["spec"]["scaleTargetRef"]["name"]: d for _, d in manifests(AUTOSCALING) if d["kind"] == "ScaledObject"}
    assert set(scaled) == set(consumed)
    auths = {d["metadata"]["name"] for _, d in manifests(AUTOSCALING) if d["kind"] == "TriggerAuthentication"}
    for name, so in scaled.items():
        triggers = so["spec"]["triggers"]
        assert {t["metadata"]["listName"] for t in triggers} == consumed[name], name
        assert all(t["type"] == "redis" and t["authenticationRef"]["name"] in auths for t in triggers)
        assert so["spec"]["minReplicaCount"] >= 1  # never 0: FreshindexWorkersDown would fire


def test_compose_and_kubernetes_run_one_worker_per_stage_queue_with_stage_queues_on() -> None:
    from freshindex.workers.names import Queue

    stages = {Queue.PARSE, Queue.OCR, Queue.EMBED}
    compose = yaml.safe_load((ROOT / "infra" / "docker-compose.yml").read_text())["services"]
    kube = {n: pod_spec(d)["containers"][0]["command"] for n, d in _deployments().items()}
    for where, commands in (("compose", {n: s.get("command", []) for n, s in compose.items()}), ("k8s", kube)):
        workers = {n: set(c[c.index("--queues") + 1].split(",")) for n, c in commands.items()
                   if c[:2] == ["freshindex", "worker"]}
        # each stage queue has exactly one worker, and that worker consumes nothing else
        for q in stages:
            takers = [n for n, qs in workers.items() if q.value in qs]
            assert len(takers) == 1 and workers[takers[0]] == {q.value}, (where, q, workers)
    assert compose["worker-parse"]["environment"]["FRESHINDEX_BROKER__STAGE_QUEUES"] == "true"
    config = yaml.safe_load((K8S / "configmap.yaml").read_text())
    assert config["data"]["FRESHINDEX_BROKER__STAGE_QUEUES"] == "true"


def test_workers_outlive_their_tasks_and_every_deployment_with_replicas_has_a_budget() -> None:
    from freshindex.settings import load_settings
    from freshindex.workers.app import task_time_limit

    limit = task_time_limit(load_settings())
    assert limit >= 600
    deployments = _deployments()
    for name, d in deployments.items():
        if name.startswith("freshindex-worker"):
            assert pod_spec(d)["terminationGracePeriodSeconds"] > limit, name
    budgets = [d for _, d in manifests(K8S) if d["kind"] == "PodDisruptionBudget"]
    covered = set()
    for b in budgets:
        sel = b["spec"]["selector"]["matchLabels"]
        covered |= {n for n, d in deployments.items()
                    if sel.items() <= d["spec"]["template"]["metadata"]["labels"].items()}
    assert covered == set(deployments) - {"freshindex-beat"}  # beat: one replica, a budget would block drains


def _allowed_from(policy: dict[str, Any], port: int) -> list[dict[str, Any]]:
    return [peer for rule in policy["spec"].get("ingress", []) if any(p["port"] == port for p in rule["ports"])
            for peer in rule["from"]]


def test_network_policy_denies_by_default_and_admits_the_gateway_and_prometheus_only() -> None:
    policies = {d["metadata"]["name"]: d for _, d in manifests(K8S) if d["kind"] == "NetworkPolicy"}
    deny = [p for p in policies.values() if p["spec"]["podSelector"] == {} and "ingress" not in p["spec"]
            and "egress" not in p["spec"]]
    assert deny and set(deny[0]["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    api_port = next(p["containerPort"] for p in pod_spec(_deployments()["freshindex-api"])["containers"][0]["ports"])
    api = [p for p in policies.values()
           if p["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/component") == "api"]
    peers = [peer for p in api for peer in _allowed_from(p, api_port)]
    # the gateway: a pod selector alone, so only pods of this namespace
    assert {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "gateway"}}} in peers
    assert all("ipBlock" not in peer for peer in peers)
    assert all(peer == {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "gateway"}}}
               or peer["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "prometheus"}} for peer in peers)
    egress_ports = {p["port"] for pol in policies.values() for rule in pol["spec"].get("egress", [])
                    for p in rule["ports"]}
    assert {53, 6379, 5672, 5432, 6333, 443} <= egress_ports


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


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: d["spec"].update(minReplicas=1), "unknown fields ['.spec.minReplicas']"),
    (lambda d: d["spec"].update(minReplicaCount="one"), "minReplicaCount"),
    (lambda d: d["spec"].pop("scaleTargetRef"), "scaleTargetRef"),
])
def test_a_planted_keda_error_fails(tmp_path: Path, mutate, expected: str) -> None:
    target = tmp_path / "autoscaling"
    shutil.copytree(AUTOSCALING, target)
    docs = list(yaml.safe_load_all((target / "keda.yaml").read_text()))
    mutate(next(d for d in docs if d["kind"] == "ScaledObject"))
    (target / "keda.yaml").write_text(yaml.safe_dump_all(docs))
    errors = schema_errors(target)
    assert len(errors) == 1 and expected in errors[0], errors
