"""Offline validation of deploy/kserve (the InferenceService, its NetworkPolicy and Istio policies),
rendered with `kubectl kustomize` and held to the facts in tests/unit/manifests.py. No cluster runs here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes_validate import utils as kubernetes_validate

from tests.unit.manifests import (
    IMAGE,
    ISTIO_KINDS,
    KSERVE,
    KSERVE_POD_LABELS,
    KUBERNETES_VERSIONS,
    check_istio_policies,
    check_probe,
    check_torchserve_container,
    dockerfile,
    ingress_rules_by_port,
    kustomize,
    model_config,
    namespaces,
    one,
    requests_decoded_at_once,
    startup_budget_s,
)


@pytest.fixture(scope="module")
def kserve() -> list[dict[str, Any]]:
    return kustomize(KSERVE)


@pytest.fixture(scope="module")
def inference_service(kserve: list[dict[str, Any]]) -> dict[str, Any]:
    assert sorted(doc["kind"] for doc in kserve) == sorted(
        ["InferenceService", "NetworkPolicy", *ISTIO_KINDS]
    )
    return one(kserve, "InferenceService")


# ---------------------------------------------------------------- KServe


def test_inference_service(inference_service: dict[str, Any]) -> None:
    assert inference_service["apiVersion"] == "serving.kserve.io/v1beta1"
    annotations: Mapping[str, str] = inference_service["metadata"]["annotations"]
    assert annotations["serving.kserve.io/deploymentMode"] == "Serverless"  # canary needs revisions
    predictor = inference_service["spec"]["predictor"]
    containers = predictor["containers"]
    assert [container["name"] for container in containers] == ["kserve-container"]
    container = containers[0]
    assert container["image"] == IMAGE
    check_torchserve_container(container, predictor["volumes"], "int8")
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["runAsUser"] == int(dockerfile("USER"))

    # protocolVersion of a custom container is its PROTOCOL variable; a protocolVersion key on
    # the predictor is not part of PredictorSpec and would never reach KServe.
    assert {item["name"]: item["value"] for item in container["env"]}["PROTOCOL"] == "v2"
    assert "protocolVersion" not in predictor

    ports = [port["containerPort"] for port in container["ports"]]
    assert ports == [8080]  # Knative allows one port
    check_probe(container["readinessProbe"], 8080)
    liveness = container["livenessProbe"]
    check_probe(liveness, 8080)
    assert liveness["initialDelaySeconds"] >= startup_budget_s("int8")
    resources = container["resources"]
    assert resources["limits"] == resources["requests"]  # else KServe fills in its defaults

    layout = model_config("int8")
    assert 2 <= predictor["minReplicas"] < predictor["maxReplicas"]
    assert predictor["scaleMetric"] == "concurrency"
    assert predictor["scaleTarget"] == requests_decoded_at_once(layout)
    assert 0 < predictor["canaryTrafficPercent"] < 100
    assert predictor["timeout"] >= int(layout["responseTimeout"])
    assert predictor["annotations"]["prometheus.kserve.io/port"] == "8082"


def test_kserve_predictor_pods_have_a_network_policy(kserve: list[dict[str, Any]]) -> None:
    """deploy/kubernetes's NetworkPolicy does not select KServe's pods; this one does, and admits
    nothing to TorchServe's own port: requests come through the queue-proxy in the pod."""
    policy = one(kserve, "NetworkPolicy")
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(policy, version, strict=True)
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= KSERVE_POD_LABELS.items()
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    admitted = ingress_rules_by_port(policy)
    assert not {8080, 8081, 7070, 7071} & set(admitted)  # TorchServe itself, management, gRPC
    assert namespaces(admitted[8012]) == {"istio-system", "knative-serving"}
    assert namespaces(admitted[9090]) == {"knative-serving"}
    assert namespaces(admitted[8082]) == namespaces(admitted[9091]) == {"monitoring"}
    for rule in policy["spec"]["egress"]:
        assert rule.get("to"), "an egress rule without `to` lets the pod call anything"
    egress = {
        (int(port["port"]), frozenset(namespaces(rule["to"])))
        for rule in policy["spec"]["egress"]
        for port in rule["ports"]
    }
    assert egress == {(15012, frozenset({"istio-system"})), (53, frozenset({"kube-system"}))}


def test_kserve_predictor_answers_only_knative_by_identity(
    kserve: list[dict[str, Any]], inference_service: dict[str, Any]
) -> None:
    predictor = inference_service["spec"]["predictor"]
    assert predictor["annotations"]["sidecar.istio.io/inject"] == "true"
    check_istio_policies(kserve, KSERVE_POD_LABELS, {"istio-system", "knative-serving"})
    assert namespaces(ingress_rules_by_port(one(kserve, "NetworkPolicy"))[8012]) == {
        "istio-system",
        "knative-serving",
    }
