"""The chaos soak: mixed load through the front door of a replica set while faults strike at random
moments, and every request counted: answered, failed with an explicit error, or lost.

    python -m tests.soak.chaos [--model-store model_store] [--seed 0] [--replicas 2]

Clients, one thread each, sending without pause through the front door (every text new, so the
sentence cache never answers for the model):
- interactive (two threads): one sentence on the native route;
- document: four sentences in one request;
- streamed: a document with "stream": true, read line by line;
- libretranslate: POST /translate with a `q` list of two texts.

Events, in an order and after pauses drawn from --seed, each as an operator or a crash would do it:
- partition: SIGKILL one step partition of a replica's worker;
- worker: SIGKILL a replica's worker (TorchServe starts another);
- replica: SIGKILL a replica's frontend and workers, then restart it;
- nginx: SIGKILL every nginx worker process (the master starts new ones);
- swap: roll the default version to the other variant on every replica (serving.fleet roll);
- drain: add a replica (three now), then remove one of the others (nginx reloads, in-flight requests
  finish, it stops).

A request's outcome, as its client sees it:
- answered: a 200 with its translation (a stream: its last line is the whole response);
- error: a 4xx/5xx with a JSON error, or a stream whose last line is the front door's StreamCut;
- reset: the connection broke after the answer had begun (its head at least), with nothing to say
  why. Only the death of the process that holds the client's socket (an nginx worker) can do that;
- lost: anything else (no answer in time, a cut answer, a 200 whose body is an error or no
  translation, an error that is not JSON).
A client resends a request once when its connection closed before any byte of an answer came
back, or a stream's before its first line (an nginx reload closes idle keep-alive connections; a
killed nginx worker takes its connections): a translation is idempotent, and nothing of the answer
was used. The outcome is the resend's, marked as resent.
Afterwards up to SPOT_CHECKS answers per kind, from after the last version change, are asked for
again: a different answer is counted as lost too (an answer given to the wrong request).
Localhost only; bounded by the events (each waits for recovery) and SETTLE_S either side.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import requests

from bench.cli import BenchCli, Progress
from bench.common import seconds_until
from serving.client import read_key
from serving.nginx_conf import FrontDoorConfig
from serving.ports import free_port
from serving.processes import live_children, process_alive
from serving.replica_set import Fleet
from tests.soak.chaos_client import OUTCOMES, Client, Record
from tests.soak.faults import kill_worker_under_load
from tests.soak.fleet_faults import (
    add_replica_under_load,
    kill_replica_under_load,
    load_key,
    remove_replica_under_load,
    roll_under_load,
)

KINDS = ("interactive", "interactive", "document", "streamed", "libretranslate")
EVENTS = ("partition", "worker", "replica", "nginx", "swap", "drain")
SETTLE_S = 3.0
PAUSE_S = (1.0, 4.0)  # between events, drawn per event
SPOT_CHECKS = 10
say = Progress("chaos")


@dataclass(frozen=True)
class Event:
    name: str
    began: float
    ended: float
    facts: dict[str, Any]


# Events: each returns facts to record, and waits until the fleet has recovered.
def kill_partition(fleet: Fleet, rng: random.Random) -> dict[str, Any]:
    name = rng.choice(fleet.names())
    (worker,) = fleet.server(name).worker_pids()
    before = live_children(worker)
    victim = rng.choice(before)
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)

    def back() -> bool:
        children = live_children(worker)
        return victim not in children and len(children) == len(before)

    return {"replica": name, "killed_pid": victim, "back_after_s": seconds_until(back, killed, 120)}


def kill_worker(fleet: Fleet, rng: random.Random) -> dict[str, Any]:
    name = rng.choice(fleet.names())
    return {"replica": name, **kill_worker_under_load(fleet.server(name), timeout=300)}


def kill_replica(fleet: Fleet, rng: random.Random) -> dict[str, Any]:
    name = rng.choice(fleet.names())
    return {"replica": name, **kill_replica_under_load(fleet, name, down_seconds=2.0)}


def kill_nginx_workers(fleet: Fleet, rng: random.Random) -> dict[str, Any]:
    victims = {pid for pid in fleet.door.worker_pids(serving_only=True) if _nginx_worker(pid)}
    killed = time.monotonic()
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):  # gone since: a reload retired it
            os.kill(pid, signal.SIGKILL)

    def back() -> bool:
        # New workers serve and none of the victims does. Not "as many as before": a reload beside the
        # kill (the supervisor's, after an earlier kill) can list old and new workers at once.
        workers = {pid for pid in fleet.door.worker_pids(serving_only=True) if _nginx_worker(pid)}
        return bool(workers) and not workers & victims

    return {"killed_pids": sorted(victims), "back_after_s": seconds_until(back, killed, 60)}


def _nginx_worker(pid: int) -> bool:
    try:
        return b"worker process" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def swap_variant(fleet: Fleet, rng: random.Random) -> dict[str, Any]:
    current = fleet.server(fleet.names()[0]).client.default_version()
    target = "1.0-fp32" if current.endswith("int8") else "1.0-int8"
    return {"from": current, "to": target, **roll_under_load(fleet, targets=(target,), workers=1, say=say)}


def drain_replica(fleet: Fleet, rng: random.Random) -> dict[str, Any]:
    """Grow to one more replica, then drain one of the others: the front door spans three a while."""
    others = fleet.names()
    added = add_replica_under_load(fleet)
    removed = remove_replica_under_load(fleet, rng.choice(others))
    return {"added": added, "removed": removed}


ACTIONS: dict[str, Callable[[Fleet, random.Random], dict[str, Any]]] = {
    "partition": kill_partition,
    "worker": kill_worker,
    "replica": kill_replica,
    "nginx": kill_nginx_workers,
    "swap": swap_variant,
    "drain": drain_replica,
}


def run_chaos(fleet: Fleet, key_file: Path, options: dict[str, int], seed: int) -> dict[str, Any]:
    """The mixed load, every event once in a seeded order with seeded pauses, then the spot check."""
    rng = random.Random(seed)
    order = list(EVENTS)
    rng.shuffle(order)
    key = read_key(key_file, "inference") or ""
    label = f"{time.time_ns():x}"
    clients = [Client(kind, fleet.door.url, key, options, f"{label}{n}") for n, kind in enumerate(KINDS)]
    events: list[Event] = []
    for client in clients:
        client.start()
    try:
        time.sleep(SETTLE_S)
        for name in order:
            time.sleep(rng.uniform(*PAUSE_S))
            say(f"{name} ...")
            began = time.monotonic()
            facts = ACTIONS[name](fleet, rng)
            events.append(Event(name, began, time.monotonic(), facts))
        time.sleep(SETTLE_S)
    finally:
        for client in clients:
            client.stop()
    records = [record for client in clients for record in client.records]
    last_swap = max((event.ended for event in events if event.name == "swap"), default=0.0)
    checked, mismatches = spot_check(fleet.door.url, key, [r for r in records if r.started > last_swap])
    return {
        "seed": seed,
        "order": order,
        "options": options,
        "events": [{"name": e.name, "seconds": round(e.ended - e.began, 1), **e.facts} for e in events],
        "totals": counts(records),
        "by_kind": {kind: counts([r for r in records if r.kind == kind]) for kind in dict.fromkeys(KINDS)},
        "by_event": {e.name: counts(attributed(records, events, e)) for e in events},
        "not_answered": [_sample(r) for r in records if r.outcome != "answered"][:40],
        "spot_checked": checked,
        "spot_check_mismatches": mismatches,
    }


def attributed(records: list[Record], events: list[Event], event: Event) -> list[Record]:
    """The requests `event` answers for: those that ended after it began and before the next one
    began. Each request counts under one event at most (none: those that ended before the first)."""
    following = [e.began for e in events if e.began > event.began]
    until = min(following, default=float("inf"))
    return [r for r in records if event.began <= r.ended < until]


def counts(records: list[Record]) -> dict[str, int]:
    tally = {outcome: sum(1 for r in records if r.outcome == outcome) for outcome in OUTCOMES}
    return {"requests": len(records), **tally, "resent": sum(1 for r in records if r.resent)}


def _sample(record: Record) -> dict[str, Any]:
    fields = asdict(record)
    fields.pop("body")
    return {**fields, "started": round(record.started, 2), "ended": round(record.ended, 2)}


def spot_check(url: str, key: str, records: list[Record]) -> tuple[int, list[dict[str, Any]]]:
    """Ask again for up to SPOT_CHECKS answers of each kind, without faults: any difference is an
    answer that was not this request's. Returns how many were asked again, and the differences."""
    session = requests.Session()
    checked, mismatches = 0, []
    for kind in dict.fromkeys(KINDS):
        answered = [r for r in records if r.kind == kind and r.outcome == "answered"][:SPOT_CHECKS]
        client = Client(kind, url, key, {}, "")
        for record in answered:
            checked += 1
            again = client.send(session, record.body)
            if again.translation != record.translation:
                mismatches.append({"kind": kind, "first": record.translation, "again": again.translation})
    return checked, mismatches


COLUMNS = ("requests", "answered", "error", "reset", "lost", "resent")


def table(result: dict[str, Any]) -> str:
    """docs/OPERATIONS.md's form: one row per event (the requests that ended from its start to the
    next event's), then the whole run."""
    rows = [
        "| event | seconds | " + " | ".join(COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    seconds = {event["name"]: event["seconds"] for event in result["events"]}
    for name, tally in result["by_event"].items():
        rows.append(f"| {name} | {seconds[name]} s | " + " | ".join(str(tally[k]) for k in COLUMNS) + " |")
    total = result["totals"]
    rows.append("| whole run | | " + " | ".join(str(total[k]) for k in COLUMNS) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("tests.soak.chaos", __doc__, results_dir=True)
    cli.parser.add_argument("--model-store", type=Path, default=Path("model_store"))
    cli.parser.add_argument("--replicas", type=int, default=2)
    cli.parser.add_argument("--seed", type=int, default=0)
    cli.parser.add_argument("--num-beams", type=int, default=1)
    cli.parser.add_argument("--max-new-tokens", type=int, default=16)
    args = cli.parse(argv)
    options = {"num_beams": args.num_beams, "max_new_tokens": args.max_new_tokens}
    with tempfile.TemporaryDirectory(prefix="zh_en_chaos_") as workdir:
        # The key rate is lifted: this measures what faults cost, not the rate limit.
        door = FrontDoorConfig(listen=f"127.0.0.1:{free_port()}", rate_per_second=100_000, burst=100_000)
        fleet = Fleet.create(Path(workdir), args.model_store, door=door)
        try:
            say(f"starting {args.replicas} replicas behind nginx ...")
            fleet.start(args.replicas)
            result = run_chaos(fleet, load_key(fleet), options, args.seed)
        finally:
            fleet.stop()
            pids = [fleet.server(name).java_pid() for name in fleet.names()]
            assert not any(pid and process_alive(pid) for pid in pids)
    result["replicas"] = args.replicas
    result["table_markdown"] = table(result)
    path = cli.write("chaos", result)
    print(f"{result['table_markdown']}\nwritten to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
