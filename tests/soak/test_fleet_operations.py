"""The replica set under load, through the front door: zero lost requests (tiny stand-in).

`make fleet MODEL=tiny` starts the fleet and `make fleet-stop` stops it, as an operator would; the
chaos soak (tests.soak.chaos) runs on it. `python -m tests.soak.chaos` and tests.soak.fleet_faults
measure the same functions on the full-size archives. Minutes: marked soak.
"""

from __future__ import annotations

import collections
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from serving.client import read_key
from serving.fleet_supervisor import renew_slots_after_kills
from serving.nginx_conf import FrontDoorConfig
from serving.ports import free_port
from serving.processes import process_alive
from serving.replica_set import Fleet
from serving.torchserve import REPO_ROOT
from tests.soak.chaos import EVENTS, KINDS, kill_nginx_workers, run_chaos, table
from tests.soak.chaos_client import Client
from tests.soak.faults import kill_worker_under_load
from tests.soak.fleet_faults import load_key, under_load

pytestmark = [pytest.mark.soak, pytest.mark.long(seconds=205)]  # seconds: the longest start first

QUICK = {"num_beams": 1, "max_new_tokens": 12}
CONCURRENCY = 4
SETTLE = 1.0
# The Makefile's install stamps (its RUNTIME and DEV targets): `make -o` on any other name is a no-op.
VENV_STAMPS = (".venv/.runtime", ".venv/.dev")


def make(*args: str) -> None:
    # -o: the venv running these tests is the one to use; never reinstall it from inside a test.
    keep = [flag for stamp in VENV_STAMPS for flag in ("-o", stamp)]
    subprocess.run(["make", *keep, *args], cwd=REPO_ROOT, check=True, capture_output=True)


def test_make_never_reinstalls_the_venv_under_these_tests() -> None:
    keep = [flag for stamp in VENV_STAMPS for flag in ("-o", stamp)]
    planned = subprocess.run(
        ["make", "-n", "-B", *keep, "fleet", "MODEL=tiny"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert planned.returncode == 0 and "pip install" not in planned.stdout, planned.stdout


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    run_dir = tmp_path_factory.mktemp("fleet")
    # The rate limit is lifted for the load: these tests are about availability (test_fleet.py has 429).
    args = f"--listen 127.0.0.1:{free_port()} --rate 100000 --burst 100000"
    make("fleet", "MODEL=tiny", "REPLICAS=2", f"FLEET_DIR={run_dir}", f"FLEET_ARGS={args}")
    running = Fleet.load(run_dir)
    pids = [running.server(name).java_pid() for name in running.names()]
    try:
        yield running
    finally:
        make("fleet-stop", f"FLEET_DIR={run_dir}")
    assert running.door.master_pid() is None
    assert not any(process_alive(pid) for pid in pids if pid is not None)


@pytest.fixture(scope="module")
def key_file(fleet: Fleet) -> Path:
    return load_key(fleet)


def run(fleet: Fleet, key_file: Path, action: Any, lost_allowed: int = 0) -> dict[str, Any]:
    result: dict[str, Any] = under_load(fleet, key_file, CONCURRENCY, QUICK, SETTLE, action)
    assert result["requests"] > 20, result
    assert result["failed"] <= lost_allowed, result["failure_samples"]
    # A resend answers a request a reload's closed keep-alive connection never delivered: at most
    # one per client connection per reload, never a way to hide a failing replica.
    assert result["resent_unanswered"] <= CONCURRENCY, result
    return result


def test_one_replica_loses_no_request_when_its_worker_is_killed(tiny_store: Path, tmp_path: Path) -> None:
    """The single-host path as shipped (deploy/zh-en-fleet.service: one replica). SIGKILL its worker
    under load: TorchServe cuts the answers it had begun and answers the rest 507 "Worker died.";
    the front door asks again, the queue holds the requests until the new worker is up, and every
    client gets its translation."""
    door = FrontDoorConfig(listen=f"127.0.0.1:{free_port()}", rate_per_second=100_000, burst=100_000)
    single = Fleet.create(tmp_path / "single", tiny_store, door=door)
    single.start(1)
    try:
        victim = single.server(single.names()[0])
        action = lambda: kill_worker_under_load(victim)  # noqa: E731
        result = run(single, load_key(single), action)
    finally:
        single.stop()
    assert result["killed_pid"] and result["all_ready_after_s"] is not None, result
    assert result["retried_on_another_replica"] > 0, result  # the kill met requests, asked for again


def test_nginx_workers_killed_again_and_again_lock_no_address_out(fleet: Fleet, key_file: Path) -> None:
    """SIGKILL nginx's workers 30 times in 45 s under LibreTranslate and document load, with the
    supervisor's mending running (serving.fleet_supervisor, every 2 s as in `serving.fleet run`). A
    killed worker never gives back its connections' per-address slots: without the mending, after
    about 30 kills 127.0.0.1 got only 429s with nothing open (2026-11-29); with it, no 429 at all,
    and the address is served afterwards.

    Whether each request survives is the chaos soak's to assert (one kill, below). Here kills come
    faster than a loaded host answers, so a client's one resend can meet the next kill, and the gate's
    second try on the LibreTranslate stage (nginx.conf) can too: in CI beside another soak module, 2
    LibreTranslate requests of 148 were lost that way and 1 got the gate's 500. Their sum is printed
    and held under 5%."""
    key = read_key(key_file, "inference") or ""
    label = f"{time.time_ns():x}"
    kinds = ("libretranslate", "libretranslate", "document")
    clients = [Client(kind, fleet.door.url, key, QUICK, f"{label}{n}") for n, kind in enumerate(kinds)]
    stop = threading.Event()

    def mend() -> None:
        _, seen = fleet.door.killed_workers()
        while not stop.wait(2.0):
            seen = renew_slots_after_kills(fleet, seen)

    mender = threading.Thread(target=mend, daemon=True)
    mender.start()
    rng = random.Random(1)
    for client in clients:
        client.start()
    try:
        time.sleep(2 * SETTLE)
        for _ in range(30):
            kill_nginx_workers(fleet, rng)
            time.sleep(rng.uniform(0.8, 1.6))
        time.sleep(3.0)  # the last kill mended
    finally:
        for client in clients:
            client.stop()
        stop.set()
        mender.join()
    records = [record for client in clients for record in client.records]
    outcomes = collections.Counter((record.kind, record.outcome, record.detail[:60]) for record in records)
    print(f"\n{outcomes}")  # in the log with -s
    refused = [record for record in records if record.status == 429 or "Slowdown" in record.detail]
    assert not refused, outcomes
    answered = sum(count for (_, outcome, _), count in outcomes.items() if outcome == "answered")
    assert answered >= 0.95 * len(records) and outcomes["libretranslate", "answered", ""] > 50, outcomes
    body = {"q": "你好", "source": "zh", "target": "en", "api_key": key}
    statuses = []
    for _ in range(10):  # 5 a second, one at a time: far below every limit
        statuses.append(requests.post(f"{fleet.door.url}/translate", json=body, timeout=30).status_code)
        time.sleep(0.2)
    assert statuses == [200] * 10, statuses
    assert fleet.door.paths.connection_zone() != "per_address_conn_0"  # it was renewed


def test_a_chaos_soak_loses_no_request(fleet: Fleet, key_file: Path, tmp_path: Path) -> None:
    """Mixed load (interactive, documents, streamed documents, LibreTranslate) through the front door
    while every fault event strikes once at a random moment (tests.soak.chaos): a partition, a worker,
    a replica and nginx's workers SIGKILLed, a version swap, a replica drained. Lost is the only failure."""
    names = fleet.names()
    result = run_chaos(fleet, key_file, QUICK, seed=int(tmp_path.stat().st_ino))
    print(f"\nseed {result['seed']}, order {result['order']}\n{table(result)}")  # in the log with -s
    events = {event["name"]: event for event in result["events"]}
    assert sorted(events) == sorted(EVENTS)
    lost = [sample for sample in result["not_answered"] if sample["outcome"] == "lost"]
    assert result["totals"]["lost"] == 0, str(lost)
    # Every kind of client was answered, and answers asked for again are the same.
    assert all(result["by_kind"][kind]["answered"] > 0 for kind in KINDS), result["by_kind"]
    assert result["spot_checked"] > 0 and not result["spot_check_mismatches"], result["spot_check_mismatches"]
    # An explicit error only where a stream was cut: a non-streamed answer is read whole and retried.
    errors = [s for s in result["not_answered"] if s["outcome"] == "error" and s["kind"] != "streamed"]
    assert not errors, str(errors)  # str: pytest cuts a list's repr short
    # A reset (no error line can be written: the process with the client's socket died) only when
    # nginx's own workers were killed.
    assert result["by_event"]["nginx"]["reset"] == result["totals"]["reset"], result["by_event"]
    # Each event did what it says, and the fleet came back whole.
    assert set(events["replica"]["healthz_while_down"]) == {"200"}, events["replica"]
    swapped = {step["to"] for step in events["swap"]["steps"]}  # every replica, to the other variant
    assert len(events["swap"]["steps"]) == len(names) and swapped == {events["swap"]["to"]}, events["swap"]
    assert events["drain"]["added"]["replica"] in fleet.names() and len(fleet.names()) == len(names)
    assert events["worker"]["all_ready_after_s"] is not None and events["partition"]["back_after_s"] < 60
