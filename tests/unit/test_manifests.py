"""manifests/: every document is valid for the API server that will receive it.

RayClusters are checked against KubeRay's own CRD schema (v1), made strict the way the API
server treats unknown fields (pruned, or rejected by kubectl's default strict field
validation); core kinds go through the `kubernetes` client's models and must come back
unchanged. kustomize is not installed, so `build()` applies the overlays' patches itself
(only the forms the overlays use). No Ray, no cluster.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import shlex
import sys
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes.client
import pytest
import yaml

from raygang.control.config import SchedulerConfig
from tests.kube_standin import merge_patch

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
CRDS = Path("/work/shared/kuberay-crds")
CRD_FILE = next((p / "ray.io_rayclusters.yaml" for p in (CRDS, MANIFESTS / "crds")
                 if (p / "ray.io_rayclusters.yaml").exists()), None)
OVERLAYS = ("kuberay", "autoscaler")
EXAMPLE_SECRET = MANIFESTS / "base" / "secret.example.yaml"
CORE_MODELS = {
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "Service"): "V1Service",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Secret"): "V1Secret",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
}
# What KubeRay puts on a head pod (ray-operator/controllers/ray/common/pod.go).
HEAD_LABELS = {"ray.io/node-type": "head", "ray.io/group": "headgroup",
               "ray.io/is-ray-node": "yes"}


# kustomize, the part the overlays use -------------------------------------------------
def load_documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def build(directory: Path) -> list[dict[str, Any]]:
    """`kustomize build directory` for resources (files or kustomization directories) and
    `patches: [{path: file}]` strategic-merge patches; anything else fails loudly."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "resources", "patches"}, kustomization
    docs: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        docs += build(path) if path.is_dir() else load_documents(path)
    keys = [key(d) for d in docs]
    assert len(keys) == len(set(keys)), f"duplicate resources in {directory}: {keys}"
    for entry in kustomization.get("patches", []):
        assert set(entry) == {"path"}, f"unsupported patch form {entry}"
        for patch in load_documents(directory / entry["path"]):
            matches = [i for i, d in enumerate(docs) if key(d) == key(patch)]
            assert len(matches) == 1, f"patch {entry['path']} matches {len(matches)} resources"
            docs[matches[0]] = merge_patch(docs[matches[0]], patch)
    return docs


@cache
def built(name: str) -> tuple[dict[str, Any], ...]:
    return tuple(build(MANIFESTS / name))


def everything() -> list[tuple[str, dict[str, Any]]]:
    docs = [(f"base:{key(d)}", d) for d in built("base")]
    for overlay in OVERLAYS:
        docs += [(f"{overlay}:{key(d)}", d) for d in built(f"overlays/{overlay}")]
    return docs + [(f"example:{key(d)}", d) for d in load_documents(EXAMPLE_SECRET)]


def only(docs: tuple[dict[str, Any], ...] | list[dict[str, Any]], kind: str,
         name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if key(d) == (kind, name)]
    return doc


# Schemas and models ------------------------------------------------------------------------
def strict(schema: Any) -> Any:
    """The CRD schema with unknown fields rejected wherever the API server would prune them:
    every object with `properties` and no `additionalProperties` or preserve-unknown-fields.
    (KubeRay's CRD itself declares `additionalProperties: false` nowhere.)"""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@cache
def raycluster_validator() -> jsonschema.Draft7Validator:
    if CRD_FILE is None:
        pytest.skip("KubeRay CRDs not found")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRD is 1 MB of YAML
    crd = yaml.load(CRD_FILE.read_text(), Loader=loader)  # noqa: S506 (a safe loader)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert version["served"] and version["storage"]
    # x-kubernetes-* are unknown keywords to jsonschema and ignored; int-or-string fields
    # are spelled anyOf [integer, string] in the CRD, which jsonschema checks as written.
    return jsonschema.Draft7Validator(strict(version["schema"]["openAPIV3Schema"]))


def crd_errors(doc: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in raycluster_validator().iter_errors(doc)]


API = kubernetes.client.ApiClient()


def round_trip(data: dict[str, Any], model: str) -> Any:
    """Through the client's model and back: required fields are enforced on the way in,
    and a field the model does not know is dropped, so it shows as a difference."""
    obj = API._ApiClient__deserialize(copy.deepcopy(data), model)
    return API.sanitize_for_serialization(obj)


def quantity(value: str | int) -> Decimal:
    number, suffix = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(value)).groups()
    scale = {"": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}[suffix]
    return Decimal(number) * scale


def groups(cluster: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    spec = cluster["spec"]
    return [("head", spec["headGroupSpec"])] + [(g["groupName"], g)
                                               for g in spec["workerGroupSpecs"]]


def ray_container(group: dict[str, Any]) -> dict[str, Any]:
    return group["template"]["spec"]["containers"][0]  # KubeRay: the first is Ray's


# Tests -----------------------------------------------------------------------------------------
DOCS = everything()


@pytest.mark.parametrize("where, doc", [d for d in DOCS if d[1]["kind"] == "RayCluster"],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_rayclusters_validate_against_the_kuberay_crd(where, doc):
    assert doc["apiVersion"] == "ray.io/v1"
    assert crd_errors(doc) == []


def test_the_strict_schema_rejects_what_kubectl_would():
    cluster = only(built("base"), "RayCluster", "raygang")
    for path, field, value in [
        (("spec",), "enableInTreeAutoScaling", True),                # misspelt top of spec
        (("spec", "workerGroupSpecs", 0), "maxReplica", 3),
        (("spec", "headGroupSpec", "template", "spec", "containers", 0), "port", []),
        (("spec", "headGroupSpec", "rayStartParams"), "num-cpus", 2),  # must be a string
        (("spec", "workerGroupSpecs", 1), "minReplicas", "0"),
    ]:
        broken = copy.deepcopy(cluster)
        node = broken
        for step in path:
            node = node[step]
        node[field] = value
        assert crd_errors(broken), f"{path} {field}={value!r} was accepted"
    broken = copy.deepcopy(cluster)
    del broken["spec"]["workerGroupSpecs"][0]["groupName"]
    assert crd_errors(broken)


@pytest.mark.parametrize("where, doc", [d for d in DOCS if d[1]["kind"] != "RayCluster"],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_core_kinds_round_trip_through_the_client_models(where, doc):
    model = CORE_MODELS[doc["apiVersion"], doc["kind"]]
    assert round_trip(doc, model) == doc


def test_a_misspelt_core_field_would_be_caught():
    role = only(built("base"), "Role", "raygang")
    broken = copy.deepcopy(role)
    broken["rules"][0]["verb"] = broken["rules"][0].pop("verbs")
    with pytest.raises(ValueError):  # verbs is required
        round_trip(broken, "V1Role")
    binding = copy.deepcopy(only(built("base"), "RoleBinding", "raygang"))
    del binding["roleRef"]
    with pytest.raises(ValueError):
        round_trip(binding, "V1RoleBinding")
    service = copy.deepcopy(only(built("base"), "Service", "raygang-api"))
    service["spec"]["selectors"] = service["spec"].pop("selector")
    assert round_trip(service, "V1Service") != service


@pytest.mark.parametrize("overlay", ("base", *OVERLAYS))
def test_pod_templates_round_trip_through_the_client_models(overlay):
    cluster = only(built(overlay if overlay == "base" else f"overlays/{overlay}"),
                   "RayCluster", "raygang")
    for name, group in groups(cluster):
        assert round_trip(group["template"], "V1PodTemplateSpec") == group["template"], name


def test_requests_equal_limits_equal_ray_start_params():
    cluster = only(built("base"), "RayCluster", "raygang")
    for name, group in groups(cluster):
        resources = ray_container(group)["resources"]
        assert resources["requests"] == resources["limits"], name
        limits, params = resources["limits"], group["rayStartParams"]
        assert quantity(limits["cpu"]) == Decimal(params["num-cpus"]), name
        assert quantity(limits["memory"]) == Decimal(params["memory"]), name
        gpus = limits.get("nvidia.com/gpu", "0")
        assert quantity(gpus) == Decimal(params.get("num-gpus", "0")), name
        if "num-gpus" in params:
            tolerations = group["template"]["spec"].get("tolerations", [])
            assert any(t["key"] == "nvidia.com/gpu" for t in tolerations), name


def test_worker_groups_start_empty_within_their_bounds():
    cluster = only(built("base"), "RayCluster", "raygang")
    bounds = {g["groupName"]: (g["minReplicas"], g["replicas"], g["maxReplicas"])
              for g in cluster["spec"]["workerGroupSpecs"]}
    assert bounds == {"cpu": (0, 0, 10), "gpu": (0, 0, 8)}


def test_the_api_service_selects_the_head_pod_only():
    docs = built("base")
    cluster, service = only(docs, "RayCluster", "raygang"), only(docs, "Service", "raygang-api")
    name = cluster["metadata"]["name"]
    head = {**cluster["spec"]["headGroupSpec"]["template"].get("metadata", {}).get("labels", {}),
            **HEAD_LABELS, "ray.io/cluster": name, "ray.io/identifier": f"{name}-head"}
    selector = service["spec"]["selector"]
    assert selector.items() <= head.items()
    assert selector.get("ray.io/node-type") == "head"  # worker pods carry "worker"
    (port,) = service["spec"]["ports"]
    container = ray_container(cluster["spec"]["headGroupSpec"])
    assert port["targetPort"] in [p["containerPort"] for p in container["ports"]]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["targetPort"]}
    assert service["spec"]["type"] == "ClusterIP"


def test_the_role_grants_exactly_what_scaling_the_raycluster_needs():
    docs = built("base")
    role, binding = only(docs, "Role", "raygang"), only(docs, "RoleBinding", "raygang")
    assert role["rules"] == [{"apiGroups": ["ray.io"], "resources": ["rayclusters"],
                              "verbs": ["get", "list", "watch", "patch"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "raygang"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "raygang"}]
    only(docs, "ServiceAccount", "raygang")
    head = only(docs, "RayCluster", "raygang")["spec"]["headGroupSpec"]["template"]["spec"]
    assert head["serviceAccountName"] == "raygang"


def test_the_head_starts_raygang_with_the_mounted_config_and_tokens():
    from raygang.cli.main import cli  # click only: parsing the options runs nothing

    docs = built("base")
    head = only(docs, "RayCluster", "raygang")["spec"]["headGroupSpec"]["template"]["spec"]
    container = ray_container({"template": {"spec": head}})
    script = container["lifecycle"]["postStart"]["exec"]["command"][-1].replace("\\\n", " ")
    (line,) = [s for s in script.splitlines() if s.strip().startswith("raygang start")]
    words = shlex.split(re.split(r"\s(?:\d?>|\|)", line)[0])[2:]  # up to a redirection
    params = cli.commands["start"].make_context("start", list(words)).params
    assert params["api"] and params["host"] == "0.0.0.0" and params["port"] == 8000
    assert not params["no_auth"] and params["tokens_file"] is None  # from the env
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in head["volumes"]}
    assert [p.name for p in params["config_paths"]] == ["config.yaml", "scaling.yaml"]
    for path in params["config_paths"]:
        config_mount = mounts[str(path)]
        configmap = only(docs, "ConfigMap", volumes[config_mount["name"]]["configMap"]["name"])
        assert config_mount["subPath"] in configmap["data"]
    env = {e["name"]: e["value"] for e in container["env"]}
    tokens = Path(env["RAYGANG_AUTH_TOKENS_FILE"])
    secret_volume = volumes[mounts[str(tokens.parent)]["name"]]["secret"]
    (example,) = load_documents(EXAMPLE_SECRET)
    assert secret_volume["secretName"] == example["metadata"]["name"]
    assert tokens.name in example["stringData"]


def test_the_example_tokens_load():
    # auth.py by its path: the raygang.server package imports Ray and FastAPI (seconds).
    spec = importlib.util.spec_from_file_location("raygang_auth", ROOT / "raygang/server/auth.py")
    auth_module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = auth_module  # pydantic resolves its annotations there
    spec.loader.exec_module(auth_module)
    AuthConfig = auth_module.AuthConfig  # noqa: N806

    (secret,) = load_documents(EXAMPLE_SECRET)
    auth = AuthConfig.from_document(yaml.safe_load(secret["stringData"]["tokens.yaml"]),
                                    "secret.example.yaml")
    assert auth.enabled
    # a digest YAML would read as a number (all digits) must be quoted
    for entry in yaml.safe_load(secret["stringData"]["tokens.yaml"])["tokens"]:
        assert isinstance(entry.get("sha256", ""), str)


@pytest.mark.parametrize("where, mode", [("base", "off"), ("overlays/kuberay", "kuberay"),
                                         ("overlays/autoscaler", "autoscaler")])
def test_the_scheduler_config_loads(where, mode, tmp_path):
    configmap = only(built(where), "ConfigMap", "raygang-config")
    paths = []
    for name in ("config.yaml", "scaling.yaml"):  # in the order the head passes them
        paths.append(tmp_path / name)
        paths[-1].write_text(configmap["data"][name])
    config = SchedulerConfig.from_files(paths)
    assert config.queue_tree.leaves == ["default", "team-a", "team-b"]
    assert config.scaling.mode == mode
    if mode != "off":  # the RayCluster it scales is the one these manifests create
        assert config.scaling.raycluster == only(built(where), "RayCluster", "raygang")[
            "metadata"]["name"]


def test_the_overlays_differ_only_in_autoscaling():
    base = {key(d): d for d in built("base")}
    kuberay = {key(d): d for d in built("overlays/kuberay")}
    autoscaler = {key(d): d for d in built("overlays/autoscaler")}
    cluster_key = ("RayCluster", "raygang")
    scaling = {"enableInTreeAutoscaling", "autoscalerOptions"}
    assert scaling.isdisjoint(base[cluster_key]["spec"])

    def without_scaling(doc):
        return {**doc, "spec": {k: v for k, v in doc["spec"].items() if k not in scaling}}

    assert without_scaling(kuberay[cluster_key]) == base[cluster_key]
    assert without_scaling(autoscaler[cluster_key]) == base[cluster_key]
    assert kuberay[cluster_key]["spec"]["enableInTreeAutoscaling"] is False
    assert "autoscalerOptions" not in kuberay[cluster_key]["spec"]
    assert autoscaler[cluster_key]["spec"]["enableInTreeAutoscaling"] is True
    assert autoscaler[cluster_key]["spec"]["autoscalerOptions"]["upscalingMode"] == "Default"
    # Everything else is the base (but the scheduler's scaling section), plus the
    # autoscaler's pod permissions.
    config_key = ("ConfigMap", "raygang-config")
    for overlay in (kuberay, autoscaler):
        assert overlay[config_key]["data"]["config.yaml"] == base[config_key]["data"]["config.yaml"]
        assert set(overlay[config_key]["data"]) == set(base[config_key]["data"])
    assert {k: v for k, v in kuberay.items() if k not in (cluster_key, config_key)} == \
        {k: v for k, v in base.items() if k not in (cluster_key, config_key)}
    extra = set(autoscaler) - set(base)
    assert extra == {("Role", "raygang-autoscaler"), ("RoleBinding", "raygang-autoscaler")}
    assert autoscaler["Role", "raygang-autoscaler"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]}]


def test_the_image_is_one_build_of_the_pinned_ray():
    cluster = only(built("base"), "RayCluster", "raygang")
    images = {ray_container(g)["image"] for _, g in groups(cluster)}
    assert len(images) == 1
    dockerfile = (MANIFESTS / "image" / "Dockerfile").read_text()
    (base_image,) = re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    pin = re.search(r'"ray\[[^\]]*\]==([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    assert base_image.startswith(f"rayproject/ray:{pin.group(1)}-py")
    assert cluster["spec"]["rayVersion"] == pin.group(1)


def test_every_yaml_file_is_used_and_the_example_secret_is_not_applied():
    used = set()
    for directory in ([MANIFESTS / "base", MANIFESTS / "monitoring"]
                      + [MANIFESTS / "overlays" / o for o in OVERLAYS]):
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        used.add(directory / "kustomization.yaml")
        used |= {directory / e for e in kustomization.get("resources", [])}
        used |= {directory / e["path"] for e in kustomization.get("patches", [])}
    files = set(MANIFESTS.rglob("*.yaml"))
    # The plain rules file is for a Prometheus without its Operator (tests/unit/test_ops.py).
    assert files - used == {EXAMPLE_SECRET, MANIFESTS / "monitoring" / "raygang.rules.yaml"}
    assert not [d for d in built("base") if d["kind"] == "Secret"]
