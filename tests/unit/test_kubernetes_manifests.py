"""Offline validation of deploy/kubernetes (kustomize): every kustomization rendered with `kubectl
kustomize`, the core kinds checked against Kubernetes' own schemas in strict mode
(kubernetes-validate, bundled, offline), every YAML file under deploy/ linted, and the pod held to
the facts in tests/unit/manifests.py. No cluster runs here; KServe's manifest is in
test_kserve_manifests.py.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
from kubernetes_validate import utils as kubernetes_validate
from yamllint import linter
from yamllint.config import YamlLintConfig

from tests.unit.manifests import (
    CORE_KINDS,
    DEPLOY,
    IMAGE,
    ISTIO_KINDS,
    KUBERNETES,
    KUBERNETES_VERSIONS,
    LAYOUTS,
    POD_CHANGES,
    POD_CONFIG,
    POD_DROPS,
    PRODUCTION_CONFIG,
    check_istio_policies,
    check_probe,
    check_torchserve_container,
    container_of,
    dockerfile,
    ingress_rules_by_port,
    kustomize,
    model_config,
    namespaces,
    one,
    read_properties,
    startup_budget_s,
)


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {layout: kustomize(KUBERNETES / layout) for layout in LAYOUTS}


# ---------------------------------------------------------------- kustomize, schemas, lint


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kustomization_renders_the_core_kinds(rendered: dict[str, list[dict[str, Any]]], layout: str) -> None:
    assert sorted(doc["kind"] for doc in rendered[layout]) == sorted(CORE_KINDS + ISTIO_KINDS)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_core_kinds_pass_strict_schema_validation(
    rendered: dict[str, list[dict[str, Any]]], layout: str, version: str
) -> None:
    for doc in (doc for doc in rendered[layout] if doc["kind"] in CORE_KINDS):
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{layout}: {doc['kind']} {doc['metadata']['name']} (Kubernetes {version}): {error}")


def test_strict_validation_rejects_a_misspelt_field(rendered: dict[str, list[dict[str, Any]]]) -> None:
    deployment = copy.deepcopy(one(rendered["overlays/int8"], "Deployment"))
    container_of(deployment)["readinessProbes"] = container_of(deployment).pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinessProbes"):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


def yaml_lint(text: str, path: Path) -> list[str]:
    config = YamlLintConfig(file=str(DEPLOY / ".yamllint"))
    return [f"{path}:{p.line}:{p.column} {p.message} ({p.rule})" for p in linter.run(text, config, str(path))]


def test_every_yaml_file_under_deploy_passes_yamllint() -> None:
    files = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])
    assert len(files) >= 10, files  # the manifests really were found
    problems = [problem for path in files for problem in yaml_lint(path.read_text(), path)]
    assert not problems, "\n".join(problems)  # warnings count too, as `yamllint --strict`


def test_yamllint_config_rejects_ambiguous_booleans_and_long_lines() -> None:
    text = "enabled: yes\nnote: " + "x" * 120 + "\n"
    rules = {problem.rsplit("(", 1)[1] for problem in yaml_lint(text, Path("sample.yaml"))}
    assert rules == {"truthy)", "line-length)"}


# ---------------------------------------------------------------- the pod config


def test_pod_config_keeps_management_on_loopback_and_urls_locked() -> None:
    pod = read_properties(POD_CONFIG)
    assert pod["management_address"] == "http://127.0.0.1:8081"
    assert pod["grpc_inference_address"] == pod["grpc_management_address"] == "127.0.0.1"
    assert pod["inference_address"] == "http://0.0.0.0:8080"
    assert pod["allowed_urls"] == read_properties(PRODUCTION_CONFIG)["allowed_urls"]
    for url in (
        "https://example.com/zh_en_int8.mar",
        "http://127.0.0.1/zh_en_int8.mar",
        "file:///srv/zh_en/model_store/zh_en_int8.mar",
        "file:///etc/passwd",
    ):
        assert not any(re.fullmatch(pattern, url) for pattern in pod["allowed_urls"].split(",")), url
    assert pod["enable_envvars_config"] == "false"
    assert pod["disable_token_authorization"] == "true"  # auth is at the edge
    assert pod["metrics_mode"] == "prometheus"  # else /metrics is not Prometheus text


def test_pod_config_differs_from_production_only_where_kubernetes_needs_it() -> None:
    production, pod = read_properties(PRODUCTION_CONFIG), read_properties(POD_CONFIG)
    assert set(pod) == set(production) - POD_DROPS
    drift = {
        key: (production[key], pod[key])
        for key in pod
        if key not in POD_CHANGES and pod[key] != production[key]
    }
    assert not drift, f"pod config drifted from config/config.properties: {drift}"
    assert {key: pod[key] for key in POD_CHANGES} == POD_CHANGES


@pytest.mark.parametrize("layout", LAYOUTS)
def test_deployment_pod(rendered: dict[str, list[dict[str, Any]]], layout: str) -> None:
    variant = LAYOUTS[layout]
    deployment = one(rendered[layout], "Deployment")
    spec, pod = deployment["spec"], deployment["spec"]["template"]["spec"]
    container = container_of(deployment)
    check_torchserve_container(container, pod["volumes"], variant)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == int(dockerfile("USER"))
    assert pod["automountServiceAccountToken"] is False
    assert container["image"] == IMAGE

    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": 8080, "metrics": 8082}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        check_probe(container[probe], ports["http"])
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= startup_budget_s(variant)
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(ports["metrics"])

    # Rollouts: a new pod is Ready before an old one goes; in-flight requests may finish.
    assert "replicas" not in spec  # the HPA owns it
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert pod["terminationGracePeriodSeconds"] >= int(model_config(variant)["responseTimeout"])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_scaling_and_disruption(rendered: dict[str, list[dict[str, Any]]], layout: str) -> None:
    docs = rendered[layout]
    deployment, hpa, pdb = (
        one(docs, kind) for kind in ("Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget")
    )
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    assert [metric["resource"]["name"] for metric in hpa["spec"]["metrics"]] == ["cpu"]
    assert pdb["spec"]["maxUnavailable"] < hpa["spec"]["minReplicas"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    for selector in (deployment["spec"]["selector"]["matchLabels"], pdb["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= pod_labels.items()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_only_the_inference_port_is_reachable(rendered: dict[str, list[dict[str, Any]]], layout: str) -> None:
    docs = rendered[layout]
    deployment, service, policy = (one(docs, kind) for kind in ("Deployment", "Service", "NetworkPolicy"))
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert [(port["port"], port["targetPort"]) for port in service["spec"]["ports"]] == [(8080, "http")]

    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    assert policy["spec"]["egress"] == []  # the model is in the image: the pod calls nothing
    admitted = {
        rule["ports"][0]["port"]: rule["from"]
        for rule in policy["spec"]["ingress"]
        if len(rule["ports"]) == 1
    }
    assert len(admitted) == len(policy["spec"]["ingress"]), "one port per rule"
    # A rule without `from` would admit every pod in the cluster; only the gateway and Prometheus.
    assert admitted == {
        8080: [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}],
        8082: [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
    }


def test_the_two_variants_can_run_side_by_side(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The canary without KServe: both stacks in one namespace, neither selecting the other's pods."""
    int8, fp32 = rendered["overlays/int8"], rendered["overlays/fp32"]
    assert not {doc["metadata"]["name"] for doc in int8} & {doc["metadata"]["name"] for doc in fp32}
    for mine, other in ((int8, fp32), (fp32, int8)):
        selector = one(mine, "Service")["spec"]["selector"]
        other_pods = one(other, "Deployment")["spec"]["template"]["metadata"]["labels"]
        assert not selector.items() <= other_pods.items()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_only_the_gateway_may_call_the_pod_by_identity(
    rendered: dict[str, list[dict[str, Any]]], layout: str
) -> None:
    docs = rendered[layout]
    deployment, network = one(docs, "Deployment"), one(docs, "NetworkPolicy")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["sidecar.istio.io/inject"] == "true"
    gateway = namespaces(ingress_rules_by_port(network)[8080])
    check_istio_policies(docs, pod_labels, gateway)  # the same namespace as the NetworkPolicy's
    policy = one(docs, "AuthorizationPolicy")
    inference = [rule for rule in policy["spec"]["rules"] if "from" in rule]
    assert [to["operation"]["ports"] for rule in inference for to in rule["to"]] == [["8080"]]
