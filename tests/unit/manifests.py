"""What the deploy manifests rest on, for tests/unit/test_kubernetes_manifests.py and
test_kserve_manifests.py: the image (Dockerfile), the pod's TorchServe config, the archive names
archive/build.py writes, the worker layout in config/zh_en_*.yaml, the measured memory per worker and
step partition; rendering with `kubectl kustomize`; and the checks both manifests share (the
TorchServe container, its probes, who may call the pod).
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
KSERVE = DEPLOY / "kserve"
POD_CONFIG = REPO / "config" / "config.kubernetes.properties"
PRODUCTION_CONFIG = REPO / "config" / "config.properties"
POD_CONFIG_ARG = "config/config.kubernetes.properties"  # relative to the image's WORKDIR

# Kustomizations and the variant each one serves (the base alone is the int8 layout).
LAYOUTS = {"base": "int8", "overlays/int8": "int8", "overlays/fp32": "fp32"}
CORE_KINDS = ["Deployment", "HorizontalPodAutoscaler", "NetworkPolicy", "PodDisruptionBudget", "Service"]
# Istio's CRDs (no bundled schema: checked for structure below): who may call the pod, by identity.
ISTIO_KINDS = ["AuthorizationPolicy", "PeerAuthentication"]
ISTIO_API = "security.istio.io/v1"
# Where serving.graceful writes its drain marker in a pod (ZH_EN_STATE_DIR): an emptyDir, not /tmp.
STATE_DIR = "/srv/zh_en/state"
# The labels KServe puts on an InferenceService's predictor pods.
KSERVE_POD_LABELS = {"serving.kserve.io/inferenceservice": "zh-en", "component": "predictor"}
# The kubectl on our machines (1.32) and the newest schema kubernetes-validate 1.37.0 bundles.
KUBERNETES_VERSIONS = ("1.32.0", "1.37.0")
IMAGE = "registry.example.com/zh-en-torchserve:1.0.0"

# The only settings in which the pod config may differ from the production config, and why:
# auth moves to the edge, and Prometheus scrapes the pod IP (deploy/KUBERNETES.md).
POD_CHANGES = {"metrics_address": "http://0.0.0.0:8082", "disable_token_authorization": "true"}
POD_DROPS = {"token_expiration_min"}  # meaningless without token authorization


@dataclass(frozen=True)
class WorkerMemory:
    """Megabytes, measured on the full-size stand-in, for one layout of one variant."""

    # The worker process's own (anonymous) memory at its peak: under static it decodes its batches;
    # under step it holds the model and every open request's state while its partitions decode.
    private_peak: int
    # What each step partition adds: forked after the model is loaded, it shares the worker's pages
    # (weights included) until it writes them, so it costs its running batch and its Python heap.
    partition_private_peak: int
    # Weight and library pages mapped from files: shared by every worker and partition.
    file_backed: int
    # The worker's whole resident peak while it loads (int8: fp32 weights and their quantized copy
    # at once), before any partition exists; 0 where it was not measured.
    load_peak: int


MEASURED = {
    # static (2 workers x 1 thread, batches of 16; docs/BENCHMARKS.md steady state, deploy/EC2.md
    # section 4 after make layout's load). fp32 under load was not measured: its 352 MB steady
    # state plus int8's growth (342 -> 470 MB).
    "static": {
        "int8": WorkerMemory(private_peak=470, partition_private_peak=0, file_backed=398, load_peak=0),
        "fp32": WorkerMemory(private_peak=480, partition_private_peak=0, file_backed=340, load_peak=0),
    },
    # step (1 worker, 2 partitions x 1 thread), measured 2026-11-25 on an Intel Xeon with 2 shared
    # vCPUs: a real TorchServe serving the full-size stand-in archive (bench.common.archive_with,
    # sentence cache as shipped), after 30 requests of 1-20 Tatoeba sentences, 6 at a time, beam 4.
    # /proc/<pid>/status and smaps_rollup: the worker's RssAnon (it includes about 360 MB int8 /
    # 510 MB fp32 that its partitions share copy-on-write), the larger partition's private pages
    # (Private_Dirty + Private_Clean; the two: int8 176 and 179 MB, fp32 13 and 72 MB), the worker's
    # RssFile, and the worker's VmHWM (int8 while quantizing: 748 MB anonymous + 392 MB file-backed
    # at its highest, sampled every 20 ms; fp32 never rises above its size after load).
    "step": {
        "int8": WorkerMemory(private_peak=384, partition_private_peak=179, file_backed=105, load_peak=1140),
        "fp32": WorkerMemory(private_peak=352, partition_private_peak=72, file_backed=337, load_peak=689),
    },
}
# Beams of a request that names none: opus-mt-zh-en's generation_config.json (the yaml leaves
# num_beams unset; the stand-in copies it).
MODEL_DEFAULT_BEAMS = 4
# The Java frontend at its heap cap (-Xmx512m) plus 150 MB outside the heap (measured: 214 MB RSS
# with 61 MB of committed heap), and the torchserve launcher (15 MB RSS measured).
FRONTEND_PEAK_MB = 512 + 150
LAUNCHER_MB = 15
HEADROOM = 1.10


# ---------------------------------------------------------------- facts the manifests rest on


def read_properties(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs if not key.lstrip().startswith("#")}


def model_config(variant: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "config" / f"zh_en_{variant}.yaml").read_text())
    return loaded


def dockerfile(instruction: str) -> str:
    """The last value of a Dockerfile instruction (WORKDIR, USER): what the running image has."""
    values = re.findall(rf"^{instruction}\s+(\S+)\s*$", (REPO / "Dockerfile").read_text(), re.MULTILINE)
    assert values, f"Dockerfile has no {instruction}"
    return str(values[-1])


def archive_names() -> set[str]:
    """The archives `make archives` writes, read from archive/build.py (importing it loads torch)."""
    tree = ast.parse((REPO / "archive" / "build.py").read_text())
    constants = {
        target.id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id in ("MODEL_NAME", "VARIANTS")
    }
    mar_path = next(
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "mar_path"
    )
    template = next(node for node in ast.walk(mar_path) if isinstance(node, ast.JoinedStr))
    parts = [
        ast.unparse(part.value) if isinstance(part, ast.FormattedValue) else ast.literal_eval(part)
        for part in template.values
    ]
    assert parts == ["MODEL_NAME", "_", "self.variant", ".mar"], f"archive naming changed: {parts}"
    return {f"{constants['MODEL_NAME']}_{variant}.mar" for variant in constants["VARIANTS"]}


def megabytes(quantity: str) -> float:
    units = {
        "": 1e-6,
        "k": 1e-3,
        "M": 1.0,
        "G": 1e3,
        "Ki": 1024 / 1e6,
        "Mi": 1024**2 / 1e6,
        "Gi": 1024**3 / 1e6,
    }
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(k|M|G|Ki|Mi|Gi|)", quantity)
    assert match, f"unexpected memory quantity {quantity!r}"
    return float(match.group(1)) * units[match.group(2)]


def scheduler_of(layout: dict[str, Any]) -> str:
    """The bench layout name (bench.common.SCHEDULERS' keys) of a model config's handler section."""
    batching = layout["handler"].get("torchserve_batching", "continuous")
    return "step" if batching == "continuous" else "static"


def partitions_per_worker(layout: dict[str, Any]) -> int:
    """Processes that decode beside each worker: its step partitions (0 under static)."""
    return int(layout["handler"].get("step_partitions", 1)) if scheduler_of(layout) == "step" else 0


def cores(layout: dict[str, Any]) -> int:
    """What the layout keeps busy: a static worker decodes on its intra-op threads; a step worker's
    partitions do, each on its own threads, while the worker only talks to TorchServe."""
    decoding_processes = int(layout["minWorkers"]) * max(1, partitions_per_worker(layout))
    return decoding_processes * int(layout["handler"]["threads"])


def peak_memory_mb(variant: str) -> int:
    """The pod's peak: its workers loading (all at once, at start), or loaded with their partitions
    and after load, whichever is higher; plus the frontend at its heap cap and the launcher."""
    layout = model_config(variant)
    workers = int(layout["minWorkers"])
    measured = MEASURED[scheduler_of(layout)][variant]
    worker = measured.private_peak + partitions_per_worker(layout) * measured.partition_private_peak
    loaded = workers * worker + measured.file_backed
    loading = workers * measured.load_peak
    return max(loaded, loading) + FRONTEND_PEAK_MB + LAUNCHER_MB


def requests_decoded_at_once(layout: dict[str, Any]) -> int:
    """Requests of one sentence at the default beams that a pod decodes together; beyond them a
    request waits (in TorchServe's queue, or for rows) and its latency grows.

    static: each worker's batch of batchSize requests. step: the partitions' running batches hold
    max_batch_rows rows (sentences x beams) each; batchSize only bounds the requests a worker holds
    open, most of them waiting for rows once the rows are full.
    """
    if scheduler_of(layout) == "static":
        return int(layout["minWorkers"]) * int(layout["batchSize"])
    beams = int(layout["handler"].get("num_beams") or MODEL_DEFAULT_BEAMS)
    running_batches = int(layout["minWorkers"]) * partitions_per_worker(layout)
    return running_batches * int(layout["handler"]["max_batch_rows"]) // beams


# ---------------------------------------------------------------- rendering


def kubectl() -> str:
    """kubectl from PATH (it bundles kustomize); without it the rendering tests cannot run."""
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl is not on PATH: install it as deploy/KUBERNETES.md says ('Offline validation')")
    return found


def kustomize(directory: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    matches = [doc for doc in docs if doc["kind"] == kind]
    assert len(matches) == 1, f"expected one {kind}, found {len(matches)}"
    return matches[0]


def container_of(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def expanded_args(container: dict[str, Any]) -> list[str]:
    """The container's args with $(VAR) references replaced from its env, as the kubelet does."""
    env = {item["name"]: item["value"] for item in container.get("env", [])}
    return [re.sub(r"\$\((\w+)\)", lambda match: env[match.group(1)], arg) for arg in container["args"]]


def flag(args: list[str], name: str) -> str:
    assert args.count(name) == 1, f"{name} must appear once in {args}"
    return args[args.index(name) + 1]


# ---------------------------------------------------------------- the pod, in both manifests


def check_torchserve_container(
    container: dict[str, Any], volumes: list[dict[str, Any]], variant: str
) -> None:
    """What any pod running our image must get right, in a Deployment or an InferenceService."""
    args = expanded_args(container)
    assert container["workingDir"] == dockerfile("WORKDIR")
    workdir = dockerfile("WORKDIR")
    supervisor = [f"{workdir}/.venv/bin/python", "-m", "serving.graceful", "--"]
    assert container["command"] == [*supervisor, f"{workdir}/.venv/bin/torchserve"]
    env = {item["name"]: item["value"] for item in container.get("env", [])}
    assert 0 < float(env["ZH_EN_DRAIN_SECONDS"]) <= 110  # the grace period (130 s) less time to stop
    assert {"--start", "--foreground", "--ncs"} <= set(args)
    assert flag(args, "--ts-config") == POD_CONFIG_ARG and (REPO / POD_CONFIG_ARG).is_file()
    assert flag(args, "--model-store") == read_properties(POD_CONFIG)["model_store"] == "model_store"
    assert flag(args, "--models") == f"zh_en_{variant}.mar"
    assert flag(args, "--models") in archive_names()
    assert "TS_CONFIG_FILE" not in {item["name"] for item in container.get("env", [])}  # beats --ts-config

    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    # The only places TorchServe and serving.graceful (its drain marker) write.
    assert set(mounts) == {"/tmp", f"{dockerfile('WORKDIR')}/logs", STATE_DIR}
    assert env["ZH_EN_STATE_DIR"] == STATE_DIR
    empty_dirs = {volume["name"] for volume in volumes if "emptyDir" in volume}
    assert set(mounts.values()) <= empty_dirs

    resources = container["resources"]
    assert int(resources["requests"]["cpu"]) == cores(model_config(variant))
    memory = megabytes(resources["requests"]["memory"])
    assert resources["limits"]["memory"] == resources["requests"]["memory"]
    peak = peak_memory_mb(variant)
    assert HEADROOM * peak <= memory <= 1.5 * peak, f"{variant}: {memory:.0f} MB for a {peak} MB peak"


def check_probe(probe: dict[str, Any], port: int) -> None:
    assert probe["httpGet"]["path"] == "/ping"
    assert "httpHeaders" not in probe["httpGet"]  # no token: token authorization is off in the pod
    assert probe["httpGet"]["port"] in (port, "http")


def startup_budget_s(variant: str) -> int:
    return int(model_config(variant)["startupTimeout"])


# ---------------------------------------------------------------- not served unauthenticated in the cluster


def ingress_rules_by_port(policy: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    """Each admitted port and the `from` of every rule that admits it."""
    admitted: dict[int, list[dict[str, Any]]] = {}
    for rule in policy["spec"]["ingress"]:
        assert rule.get("from"), f"{policy['metadata']['name']}: a rule without `from` admits every pod"
        for port in rule["ports"]:
            admitted.setdefault(int(port["port"]), []).extend(rule["from"])
    return admitted


def namespaces(peers: list[dict[str, Any]]) -> set[str]:
    found = set()
    for peer in peers:
        assert set(peer) == {"namespaceSelector"}, peer  # whole namespaces, no pod or IP blocks
        found.add(peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"])
    return found


def check_istio_policies(docs: list[dict[str, Any]], pod_labels: dict[str, str], callers: set[str]) -> None:
    """An ALLOW policy on the pod: `callers` (namespaces, by mTLS identity) may call anything; every
    other rule is a GET on a metrics port, from anyone. STRICT mTLS, metrics ports aside."""
    policy, peer = one(docs, "AuthorizationPolicy"), one(docs, "PeerAuthentication")
    metrics_ports = {"8082", "9090", "9091"}
    for doc in (policy, peer):
        assert doc["apiVersion"] == ISTIO_API
        assert doc["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["action"] == "ALLOW"  # an ALLOW policy refuses whatever no rule allows
    for rule in policy["spec"]["rules"]:
        if "from" in rule:
            assert [source["source"] for source in rule["from"]] == [{"namespaces": sorted(callers)}]
        else:
            (operation,) = [to["operation"] for to in rule["to"]]
            assert set(operation["ports"]) <= metrics_ports and operation["methods"] == ["GET"], rule
    assert any("from" in rule for rule in policy["spec"]["rules"])
    assert peer["spec"]["mtls"]["mode"] == "STRICT"
    assert set(peer["spec"].get("portLevelMtls", {})) <= metrics_ports
