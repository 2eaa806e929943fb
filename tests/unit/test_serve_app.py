"""A Serve application of several deployments as one gang, without Ray (`core.serve_app`):
each deployment's options, deploy-time ones first, then its own (as the runtime reads them
from the application's graph: `AppDeployment`), become the roles of one gang; every wrong
option is named by its deployment and field."""

from __future__ import annotations

import pickle

import pytest

from raygang.control.durable import load_gang
from raygang.control.kinds.deployment import Served
from raygang.core.resources import Resources
from raygang.core.serve_app import AppDeployment, DeploymentOptions, merged, role_name
from raygang.core.spec import SpecError, Strategy
from raygang.core.workload_specs import DeploymentSpec, deployment_spec
from tests.unit.test_kinds import _stored

# Serve LLM's prefill/decode shape (ingress -> decode -> prefill), as the runtime reads it:
# children first, the ingress last.
PD = (
    AppDeployment("Prefill", replicas=2, actor={"CPU": 0, "GPU": 1}),
    AppDeployment("Decode", replicas=1, actor={"CPU": 0.5, "GPU": 1},
                  bundles=[{"CPU": 0.5, "GPU": 1}, {"GPU": 1}], strategy="STRICT_PACK"),
    AppDeployment("Router", replicas=1, actor={"CPU": 0.5}, ingress=True),
)


def _roles(spec: DeploymentSpec) -> list[tuple[str, int, dict, int | None]]:
    return [(r.name, r.replicas, r.resources.to_dict(), r.min_replicas)
            for r in spec.gang_spec().roles]


def test_each_deployment_that_asks_for_resources_is_a_role_of_one_gang():
    spec = deployment_spec("d", name="pd").with_app(PD)
    assert _roles(spec) == [("Prefill", 2, {"GPU": 1}, None),
                            ("Decode", 1, {"GPU": 2, "CPU": 0.5}, None),  # its bundles, summed
                            ("Router", 1, {"CPU": 0.5}, None)]
    decode = spec.deployments["Decode"]
    assert decode.bundles == (Resources(CPU=0.5, GPU=1), Resources(GPU=1))
    assert decode.strategy is Strategy.STRICT_PACK
    assert spec.deployments["Prefill"].strategy is Strategy.PACK  # Serve's default
    gang = spec.gang_spec()
    assert gang.world_size == 4 and gang.total == Resources(GPU=4, CPU=1)
    assert gang.name == "pd" and gang.priority == "inference" and gang.preemption_grace_s == 0
    # What the runtime stores reads back the same (the durable record's payload)
    assert DeploymentSpec.model_validate_json(spec.model_dump_json()) == spec


def test_deploy_time_options_win_field_by_field():
    spec = deployment_spec("d", name="pd", deployments={
        "Prefill": {"replicas": 3},
        "Decode": {"bundles": [{"GPU": 1}] * 4, "strategy": "PACK"},
        "Router": {"resources": {"CPU": 1, "memory": 2**30}},
    }).with_app(PD)
    assert _roles(spec) == [("Prefill", 3, {"GPU": 1}, None), ("Decode", 1, {"GPU": 4}, None),
                            ("Router", 1, {"CPU": 1, "memory": 2**30}, None)]
    assert spec.deployments["Decode"].strategy is Strategy.PACK


def test_a_deployment_that_asks_for_nothing_is_left_to_serve():
    free_router = PD[:2] + (AppDeployment("Router", actor={"CPU": 0}, ingress=True),)
    spec = deployment_spec("d", name="pd").with_app(free_router)
    assert [r.name for r in spec.gang_spec().roles] == ["Prefill", "Decode"]
    with pytest.raises(SpecError, match=r"deployments\.Router: asks for no resources"):
        deployment_spec("d", name="pd", deployments={"Router": {"replicas": 2}}
                        ).with_app(free_router)
    nothing = (AppDeployment("A", actor={}), AppDeployment("B", actor={"CPU": 0}))
    with pytest.raises(SpecError, match="no deployment of the application asks for resources"):
        deployment_spec("d", name="x").with_app(nothing)


def test_an_app_of_one_deployment_stays_as_it_was_unless_given_deployments():
    one = (AppDeployment("Echo", replicas=3, actor={"CPU": 1}, ingress=True),)
    spec = deployment_spec("d", name="chat", replicas=2, resources={"GPU": 1})
    assert spec.with_app(one) is spec  # its ingress is the one role, as given here
    assert _roles(spec) == [("replica", 2, {"GPU": 1}, None)]
    assert spec.deployments is None and spec.roles == {}
    given = deployment_spec("d", name="chat", deployments={}).with_app(one)
    assert _roles(given) == [("Echo", 3, {"CPU": 1}, None)]  # its own options, read


def test_serve_autoscaling_bounds_and_elastic_deployments():
    auto = AppDeployment("Prefill", replicas=None, min_replicas=0, max_replicas=4,
                         actor={"GPU": 1})
    options = merged(None, auto)
    assert (options.min_replicas, options.replicas) == (1, 4)  # raygang keeps at least one
    assert options.elastic
    assert merged(DeploymentOptions(replicas=2), auto).replicas == 2
    assert not merged(DeploymentOptions(replicas=2), auto).elastic
    # In an application of several deployments, each elastic one is an elastic role
    gang = deployment_spec("d", name="pd").with_app((auto,) + PD[1:]).gang_spec()
    prefill = next(r for r in gang.roles if r.name == "Prefill")
    assert (prefill.minimum, prefill.replicas) == (1, 4) and gang.elastic


def test_wrong_options_are_named_by_deployment_and_field():
    with pytest.raises(SpecError) as error:
        deployment_spec("deployment 'pd'", name="pd", deployments={
            "Prefill": {"replicas": 0, "bundles": []},
            "Decode": {"resources": {"GPU": 1}, "bundles": [{"GPU": 1}]},
            "Router": {"strategy": "SIDEWAYS", "gpus": 1},
        })
    problems = dict(error.value.problems)
    assert problems["deployments.Prefill.replicas"].startswith("Input should be greater than")
    assert "deployments.Prefill.bundles" in problems
    assert problems["deployments.Decode"] == "resources, bundles: give one (resources is one " \
        "bundle)"
    assert "deployments.Router.strategy" in problems
    assert problems["deployments.Router.gpus"].startswith("Extra inputs are not permitted")
    with pytest.raises(ValueError, match="STRICT_SPREAD cannot place several there"):
        DeploymentOptions.model_validate({"bundles": [{"GPU": 1}] * 2,
                                          "strategy": "STRICT_SPREAD"})

    with pytest.raises(SpecError) as error:  # checked against the application's graph
        deployment_spec("d", name="pd", deployments={"Decoder": {"replicas": 2}}).with_app(PD)
    assert error.value.problems == [("deployments.Decoder", "the application has no "
                                     "deployment 'Decoder' (its deployments: Prefill, Decode, "
                                     "Router)")]
    # Raised in the scheduler actor, where the graph is read: it comes back as itself
    back = pickle.loads(pickle.dumps(error.value))
    assert back.problems == error.value.problems and str(back) == str(error.value)
    with pytest.raises(SpecError, match=r"deployments\.Decode\.bundles\[1\]: needs at least one "
                       "positive amount"):  # its own options, wrong for a reservation
        deployment_spec("d", name="pd").with_app(
            PD[:1] + (AppDeployment("Decode", bundles=[{"GPU": 1}, {"GPU": 0}]),))


def test_application_options_are_per_deployment():
    with pytest.raises(SpecError, match="replicas, resources: the application's replicas and "
                       "resources are given per deployment"):
        deployment_spec("d", name="pd", replicas=2, resources={"GPU": 1}, deployments={})
    with pytest.raises(SpecError, match="replicas, resources: .* per deployment"):
        deployment_spec("d", name="pd", replicas=2, resources={"GPU": 1}).with_app(PD)


def test_role_names_from_serve_names():
    assert role_name("Prefill:llama-3") == "Prefill-llama-3"  # Serve LLM's names
    assert role_name("  decode/v2 ") == "decode-v2"
    clash = (AppDeployment("Prefill:a", actor={"GPU": 1}), AppDeployment("Prefill-a",
                                                                         actor={"GPU": 1}))
    with pytest.raises(SpecError, match="its role name 'Prefill-a' is also 'Prefill:a''s"):
        deployment_spec("d", name="pd").with_app(clash)
    with pytest.raises(SpecError, match=r"deployments\.::::: makes no role name"):
        deployment_spec("d", name="pd", deployments={"::::": {"replicas": 1}})
    spec = deployment_spec("d", name="pd").with_app(
        (AppDeployment("Prefill:llama", actor={"GPU": 1}),) + PD[1:])
    assert spec.roles["Prefill:llama"] == "Prefill-llama"
    assert spec.gang_spec().roles[0].name == "Prefill-llama"


def test_a_stored_application_reads_back_with_its_deployments():
    deployment = deployment_spec("d", name="pd").with_app(PD)
    data = _stored("deployment", {"deployment": deployment.model_dump(mode="json"),
                                  "app": "pkg.module:app"})
    back = load_gang(pickle.dumps(data))
    assert back.workload == Served(deployment, "pkg.module:app")
    assert back.workload.deployment.deployments["Decode"].bundles[1] == Resources(GPU=1)


def test_a_ratio_over_an_application_s_deployments_is_checked_at_the_edge():
    with pytest.raises(SpecError, match=r"ratio: deployment 'Encode' is not one of the gang's "
                                        r"deployments \(they are: Prefill, Decode, Router\)"):
        deployment_spec("d", name="pd", ratio={"Encode": 1}).with_app(PD)
    with pytest.raises(SpecError, match=r"ratio: deployment 'Prefill' is not elastic "
                                        r"\(replicas=2\)"):
        deployment_spec("d", name="pd", ratio={"Prefill": 2, "Decode": 1}).with_app(PD)
    elastic = {"Prefill": {"replicas": (1, 5)}, "Decode": {"replicas": (1, 4)}}
    with pytest.raises(SpecError, match=r"allow different numbers of steps \(Prefill: 2, "
                                        r"Decode: 3\)"):
        deployment_spec("d", name="pd", deployments=elastic, ratio={"Prefill": 2, "Decode": 1})
    # A good ratio: its steps are the gang's
    elastic["Decode"] = {"replicas": (1, 3)}
    spec = deployment_spec("d", name="pd", deployments=elastic, ratio={"Prefill": 2, "Decode": 1})
    assert spec.gang_spec().ratio_steps == (("Prefill-1", "Prefill-2", "Decode-1"),
                                            ("Prefill-3", "Prefill-4", "Decode-2"))


def test_the_gang_of_an_application_with_a_ratio_steps_its_roles():
    spec = DeploymentSpec(
        name="pd", deployments={"Prefill:m": DeploymentOptions(replicas=(1, 5)),
                                "Decode:m": DeploymentOptions(replicas=(1, 3))},
        ratio={"Prefill:m": 2, "Decode:m": 1})
    gang = spec.gang_spec()
    assert gang.ratio == {"Prefill-m": 2, "Decode-m": 1}
    assert gang.ratio_steps[0] == ("Prefill-m-1", "Prefill-m-2", "Decode-m-1")
