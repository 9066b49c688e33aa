"""The replica set under load, measured at the front door: a rolling version change, a killed
replica, a replica added and one removed.

    python -m tests.soak.fleet_faults [--model-store model_store] [--replicas 2] [--concurrency 4]

Starts a fleet (`--replicas` TorchServe replicas of zh_en_int8.mar behind nginx, in a temporary
directory, the front door on a free loopback port), keeps `--concurrency` clients sending greedy
requests through the front door without pause (every text new, so the sentence cache never answers
for the model), and, each under its own load:
- rolls the default version int8 -> fp32 -> int8 across every replica (serving.fleet roll);
- SIGKILLs one replica's frontend and workers, restarts it, waits until nginx sends it traffic;
- adds a replica and reloads nginx; then removes it again (reload, drain, stop).
For each: requests, failed requests, requests nginx retried on another replica, requests the client
resent because nginx closed their idle keep-alive connection as it reloaded (never read, so never
answered; translations are idempotent), and timings.
The per-key rate limit is lifted for the load key: these runs measure availability, and
tests/e2e/test_fleet.py checks the rate limit. The chaos soak (tests.soak.chaos, in
tests/soak/test_fleet_operations.py) runs the same functions on the tiny stand-in and asserts zero lost.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cli import BenchCli, Progress
from bench.common import percentiles, seconds_until
from serving.client import Endpoints, TorchServeClient
from serving.fleet_keys import KeyStore, write_client_key
from serving.nginx_conf import FrontDoorConfig
from serving.ports import free_port
from serving.replica_set import Fleet
from serving.torchserve import TorchServe
from tests.soak.faults import summarize
from tests.soak.steady_load import SteadyLoad

TEXTS = ["汤姆不会同意的。", "我要看病。", "那个穿棕色大衣的女人是谁？", "如果今天是星期日，我會去釣魚。"]
say = Progress("fleet_faults")


def load_key(fleet: Fleet, name: str = "load") -> Path:
    """A client key for the load, in key_file.json's shape (what SteadyLoad reads)."""
    path = fleet.run_dir / f"{name}_key.json"
    store = KeyStore(fleet.door.paths.keys)
    if name in {entry.name for entry in store.entries()}:
        store.revoke(name)
    write_client_key(path, store.add(name))
    if fleet.door.master_pid() is not None:
        fleet.door.reload()
    return path


def unique_texts(label: str, count: int = 50_000) -> list[str]:
    """One-sentence texts no earlier load sent: the handler's sentence cache would answer repeats
    without the model, and a killed or swapped replica would then meet idle workers. The mark goes
    inside the sentence (before its final punctuation), so segmentation keeps one sentence."""
    return [f"{text[:-1]}{label}{n}{text[-1]}" for n in range(count) for text in [TEXTS[n % len(TEXTS)]]]


def front_door_load(
    fleet: Fleet, key_file: Path, concurrency: int, options: dict[str, int], label: str
) -> SteadyLoad:
    texts = unique_texts(label)
    return SteadyLoad(
        Endpoints(inference=fleet.door.url),
        key_file,
        texts,
        concurrency,
        options=options,
        # nginx closes idle keep-alive connections when it reloads (adding or removing a replica).
        resend_unanswered=True,
    )


def retried_since(fleet: Fleet, offset: int) -> int:
    """Requests the front door sent to more than one replica (their upstream list has a comma)."""
    with (fleet.door.paths.logs / "access.log").open() as log:
        log.seek(offset)
        return sum(1 for line in log if "," in line.split("upstream_status=", 1)[-1])


def log_offset(fleet: Fleet, name: str = "access.log") -> int:
    """The size of one of the front door's logs now: where this event's lines begin."""
    path = fleet.door.paths.logs / name
    return path.stat().st_size if path.exists() else 0


def read_again_since(fleet: Fleet, offset: int, what: str = "cut off; trying a replica again") -> int:
    """Answers the front door asked a replica for again (front_door.answer logs each as a warning):
    by default those a replica cut off after their head; `what` names another warning."""
    path = fleet.door.paths.logs / "error.log"
    if not path.exists():
        return 0
    with path.open() as log:
        log.seek(offset)
        return sum(1 for line in log if what in line)


def served(server: TorchServe) -> int:
    """Translation requests a replica has answered, from its own access log."""
    log = server.workdir / "logs" / "access_log.log"
    return log.read_text().count("/predictions/") if log.exists() else 0


def roll_under_load(
    fleet: Fleet,
    targets: tuple[str, ...] = ("1.0-fp32", "1.0-int8"),
    workers: int | None = None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Roll every replica to each target in turn; ends on the last target."""
    began = time.monotonic()
    steps = [step for target in targets for step in fleet.roll(target, workers, say=say)]
    return {"steps": steps, "seconds": round(time.monotonic() - began, 1)}


def kill_replica_under_load(fleet: Fleet, name: str, down_seconds: float = 5.0) -> dict[str, Any]:
    """SIGKILL replica `name` (frontend and workers), watch /healthz, restart it, wait for traffic."""
    killed_at = time.monotonic()
    pids = fleet.kill_replica(name)
    health = []
    while time.monotonic() - killed_at < down_seconds:
        health.append(fleet.door.healthz().status_code)
        time.sleep(0.5)
    restart_began = time.monotonic()
    fleet.restart_replica(name)
    restart_s = time.monotonic() - restart_began
    before = served(fleet.server(name))
    back = seconds_until(lambda: served(fleet.server(name)) > before, killed_at)
    return {
        "killed_pids": pids,
        "healthz_while_down": {str(code): health.count(code) for code in sorted(set(health))},
        "restart_s": round(restart_s, 1),
        "back_in_rotation_after_kill_s": back,
    }


def add_replica_under_load(fleet: Fleet) -> dict[str, Any]:
    """Start one more replica, reload nginx, wait until the front door sends it requests."""
    began = time.monotonic()
    name = fleet.add_replica()
    added_s = time.monotonic() - began
    before = served(fleet.server(name))
    serving = seconds_until(lambda: served(fleet.server(name)) > before, began)
    return {"replica": name, "start_and_reload_s": round(added_s, 1), "serving_after_s": serving}


def remove_replica_under_load(fleet: Fleet, name: str) -> dict[str, Any]:
    began = time.monotonic()
    fleet.remove_replica(name)
    return {"replica": name, "reload_drain_stop_s": round(time.monotonic() - began, 1)}


def under_load(
    fleet: Fleet,
    key_file: Path,
    concurrency: int,
    options: dict[str, int],
    settle: float,
    action: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    """Run `action` inside a steady load with `settle` seconds either side; add the load's outcome."""
    offset, error_offset = log_offset(fleet), log_offset(fleet, "error.log")
    label = f"{time.time_ns():x}"
    with front_door_load(fleet, key_file, concurrency, options, label) as load:
        time.sleep(settle)
        result = action()
        time.sleep(settle)
    answered = [outcome.seconds for outcome in load.outcomes if outcome.error is None]
    summary = summarize(load)
    # Round robin over replicas on different versions alternates at every request: keep the ends.
    sequence = summary.pop("variant_sequence")
    return {
        **result,
        **summary,
        "first_variant": sequence[0] if sequence else None,
        "last_variant": sequence[-1] if sequence else None,
        "latency": percentiles(answered) if answered else {},
        "retried_on_another_replica": retried_since(fleet, offset),
        "cut_off_and_read_again": read_again_since(fleet, error_offset),
        "worker_died_and_sent_again": read_again_since(fleet, error_offset, "worker died under a request"),
    }


def table(result: dict[str, Any]) -> str:
    """The fault table form of docs/BENCHMARKS.md: event | requests | failed | recovery."""
    roll, kill, add, remove = (result[key] for key in ("roll", "kill", "add", "remove"))
    per_replica = [step["seconds"] for step in roll["steps"]]
    rows = [
        (
            f"rolling version change int8 -> fp32 -> int8 across {result['replicas']} replicas "
            f"in {roll['seconds']:.0f} s",
            roll,
            f"each replica {min(per_replica)}-{max(per_replica)} s; answered by "
            + ", ".join(f"{variant} {count}" for variant, count in roll["variants"].items()),
        ),
        (
            "one replica killed with SIGKILL (frontend and workers)",
            kill,
            f"/healthz 200 on {kill['healthz_while_down'].get('200', 0)} of "
            f"{sum(kill['healthz_while_down'].values())} checks while it was down; restarted in "
            f"{kill['restart_s']} s, back in rotation {kill['back_in_rotation_after_kill_s']} s "
            "after the kill",
        ),
        (
            "replica added, nginx reload",
            add,
            f"started and reloaded in {add['start_and_reload_s']} s, serving {add['serving_after_s']} s "
            "after the start",
        ),
        (
            "replica removed, nginx reload (drained, then stopped)",
            remove,
            f"{remove['reload_drain_stop_s']} s",
        ),
    ]
    lines = [
        "| event | requests | failed | retried on another replica | of them cut off, read again | recovery |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {event} | {part['requests']} | {_failed(part)} | {part['retried_on_another_replica']} | "
        f"{part.get('cut_off_and_read_again', 0)} | {note} |"
        for event, part, note in rows
    ]
    return "\n".join(lines)


def _failed(part: dict[str, Any]) -> str:
    resent = part.get("resent_unanswered", 0)
    return (
        f"{part['failed']} ({resent} resent after a reload closed their idle connection)"
        if resent
        else str(part["failed"])
    )


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("tests.soak.fleet_faults", __doc__, results_dir=True)
    cli.parser.add_argument("--model-store", type=Path, default=Path("model_store"))
    cli.parser.add_argument("--replicas", type=int, default=2)
    cli.parser.add_argument("--concurrency", type=int, default=4)
    cli.parser.add_argument("--num-beams", type=int, default=1)
    cli.parser.add_argument("--max-new-tokens", type=int, default=16)
    cli.parser.add_argument(
        "--settle", type=float, default=3.0, help="seconds of load before and after each event"
    )
    args = cli.parse(argv)
    options = {"num_beams": args.num_beams, "max_new_tokens": args.max_new_tokens}
    result: dict[str, Any] = {"replicas": args.replicas, "concurrency": args.concurrency, "options": options}
    with tempfile.TemporaryDirectory(prefix="zh_en_fleet_") as workdir:
        # The key rate is lifted: this measures availability under faults, not the rate limit.
        door = FrontDoorConfig(listen=f"127.0.0.1:{free_port()}", rate_per_second=100_000, burst=100_000)
        fleet = Fleet.create(Path(workdir), args.model_store, door=door)
        try:
            say(f"starting {args.replicas} replicas behind nginx ...")
            started = time.monotonic()
            fleet.start(args.replicas)
            result["start_s"] = round(time.monotonic() - started, 1)
            key = load_key(fleet)

            def run(label: str, action: Callable[[], dict[str, Any]]) -> dict[str, Any]:
                say(f"{label} under load ...")
                return under_load(fleet, key, args.concurrency, options, args.settle, action)

            result["roll"] = run("rolling int8 -> fp32 -> int8", lambda: roll_under_load(fleet, say=say))
            victim = fleet.names()[0]
            result["kill"] = run(f"killing {victim}", lambda: kill_replica_under_load(fleet, victim))
            result["add"] = run("adding a replica", lambda: add_replica_under_load(fleet))
            added = result["add"]["replica"]
            result["remove"] = run(f"removing {added}", lambda: remove_replica_under_load(fleet, added))
            client = TorchServeClient(Endpoints(inference=fleet.door.url), key)
            answer = client.translate(TEXTS[0]).json()
            result["model"] = {k: answer.get(k) for k in ("model", "version", "variant", "standin")}
        finally:
            fleet.stop()
    result["table_markdown"] = table(result)
    path = cli.write("fleet_faults", result)
    print(f"{result['table_markdown']}\nwritten to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
