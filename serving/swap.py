"""Zero-downtime switch of zh_en's default version through the management API.

    python -m serving.swap --to 1.0-fp32        # or --to zh_en_fp32.mar   (make swap TO=1.0-fp32)

1. register the target archive from the model store if it is not registered yet,
2. wait until its workers (as many as its model-config yaml starts) are READY and one
   translation through it succeeds,
3. make it the default: new requests to /predictions/zh_en go to it,
4. drain the old version (its queue empty, then a grace period for the batch on its workers),
5. unregister the old version (or keep it with `--keep-old N` workers, for a quick swap back).

Keys come from key_file.json, re-read on every call. A fleet replica runs with token auth off
(auth lives at its front door, deploy/FLEET.md): `--no-auth` sends no key, whatever key_file.json
may lie around; `python -m serving.fleet roll` swaps every replica in turn.
"""

from __future__ import annotations

import argparse
import json
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from serving.client import MODEL_NAME, Endpoints, ServerError, TorchServeClient

PROBE_TEXT = "你好。"


# Workers for an archive whose model config names none: TorchServe then starts the registration's
# initial_workers, and one is what every layout can run (a step worker must be alone).
FALLBACK_WORKERS = 1


@dataclass(frozen=True)
class Target:
    version: str
    archive: str  # file name inside the model store, the only kind of URL the production config allows
    workers: int  # what its model config starts, so what "all its workers READY" means


def archive_version(mar: Path) -> str:
    with zipfile.ZipFile(mar) as archive:
        return str(json.loads(archive.read("MAR-INF/MANIFEST.json"))["model"]["modelVersion"])


def archive_model_config(mar: Path) -> dict[str, Any]:
    """The model-config yaml packed in `mar` (the manifest's configFile); {} when it has none."""
    with zipfile.ZipFile(mar) as archive:
        config_file = json.loads(archive.read("MAR-INF/MANIFEST.json"))["model"].get("configFile")
        if not config_file:
            return {}
        loaded = yaml.safe_load(archive.read(config_file))
    return loaded if isinstance(loaded, dict) else {}


def archive_workers(mar: Path) -> int:
    """The workers TorchServe starts for `mar`: its model config's minWorkers, which wins over a
    registration's initial_workers and over default_workers_per_model (TorchServe 0.12)."""
    return int(archive_model_config(mar).get("minWorkers") or FALLBACK_WORKERS)


def resolve_target(to: str, model_store: Path) -> Target:
    """`to` is a version (1.0-fp32) or an archive in the model store (zh_en_fp32.mar)."""
    if to.endswith(".mar"):
        mar = model_store / Path(to).name
        if not mar.is_file():
            raise SystemExit(f"{mar} not found: build it with `make archives` or copy it into {model_store}")
        return Target(archive_version(mar), mar.name, archive_workers(mar))
    for mar in sorted(model_store.glob("*.mar")):
        if archive_version(mar) == to:
            return Target(to, mar.name, archive_workers(mar))
    raise SystemExit(f"no archive in {model_store} has version {to!r}; pass a .mar file name instead")


def swap(
    client: TorchServeClient,
    target: Target,
    workers: int | None = None,
    keep_old: int | None = None,
    grace_seconds: float = 3.0,
    say: Callable[[str], None] = print,
) -> str:
    """Make `target` the default version without failing a request; return the previous default.

    `workers` defaults to what the target's model config starts. Under `torchserve_batching:
    continuous` that is one worker, and more would stall each other (docs/SCHEDULING.md, "One
    worker per model").
    """
    workers = target.workers if workers is None else workers
    old = client.default_version()
    if old == target.version:
        say(f"{MODEL_NAME} {target.version} is already the default; nothing to do")
        return old
    if target.version not in client.versions():
        say(f"registering {target.archive} ({target.version}) with {workers} workers ...")
        client.register(target.archive, initial_workers=workers)  # its model config's minWorkers win
    if client.workers(target.version) < workers:
        say(f"scaling {target.version} to {workers} workers ...")
        client.scale(target.version, workers)
    client.wait_ready(target.version, workers)
    probe = client.translate(PROBE_TEXT, version=target.version)
    if probe.status_code != 200:
        raise ServerError(f"{target.version} is READY but a probe translation failed: {probe.text[:300]}")
    client.set_default(target.version)
    say(f"default is now {target.version} (was {old}); draining {old} ...")
    _drain(client, old, grace_seconds)
    if keep_old is None:
        client.unregister(old)
        say(f"unregistered {old}")
    else:
        client.scale(old, keep_old)
        say(f"kept {old} with {keep_old} workers")
    return old


def _drain(client: TorchServeClient, version: str, grace_seconds: float, timeout: float = 120.0) -> None:
    """Wait for the old version's queue to empty; the grace period covers the batch on its workers."""
    deadline = time.monotonic() + timeout
    while _pending(client, version) > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(grace_seconds)


def _pending(client: TorchServeClient, version: str) -> int:
    status = client.describe(MODEL_NAME, version)[0].get("jobQueueStatus", {})
    return int(status.get("pendingRequests", 0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--to", required=True, help="target version (1.0-fp32) or archive (zh_en_fp32.mar)")
    parser.add_argument("--model-store", type=Path, default=Path("model_store"))
    parser.add_argument(
        "--workers", type=int, help="workers for the target version (default: its model config's minWorkers)"
    )
    parser.add_argument("--keep-old", type=int, metavar="N", help="scale the old version to N workers")
    parser.add_argument("--grace", type=float, default=3.0, help="seconds for in-flight batches to end")
    parser.add_argument("--key-file", type=Path, default=Path("key_file.json"))
    parser.add_argument("--no-auth", action="store_true", help="token auth is off (a fleet replica): no key")
    parser.add_argument("--inference", default=Endpoints.inference)
    parser.add_argument("--management", default=Endpoints.management)
    args = parser.parse_args(argv)
    client = TorchServeClient(
        Endpoints(args.inference, args.management), None if args.no_auth else args.key_file
    )
    started = time.monotonic()
    swap(client, resolve_target(args.to, args.model_store), args.workers, args.keep_old, args.grace)
    print(f"swap done in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
