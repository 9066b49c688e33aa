"""Run and operate the replica set behind nginx (deploy/FLEET.md).

    python -m serving.fleet start --replicas 2 --model-store model_store   # make fleet
    python -m serving.fleet run --replicas 1 ...    # start, then stay in the foreground (a service)
    python -m serving.fleet stop                                           # make fleet-stop
    python -m serving.fleet status
    python -m serving.fleet keys add NAME | keys revoke NAME | keys list   # no restart
    python -m serving.fleet roll --to 1.0-fp32      # each replica in turn, with serving.swap
    python -m serving.fleet add-replica | remove-replica NAME | restart-replica NAME
    python -m serving.fleet reload                  # after editing deploy/nginx/ or keys.map

Every command takes `--dir` (default build/fleet), where fleet.json, keys.map, nginx's rendered
config and logs, and each replica's working directory live.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import requests

from serving.client import ServerError
from serving.fleet_keys import KeyStore, write_client_key
from serving.fleet_supervisor import stop_on_signals, supervise
from serving.graceful import add_drain_seconds
from serving.nginx_conf import FrontDoorConfig, FrontDoorPaths
from serving.replica_set import DEFAULT_ARCHIVE, DEFAULT_DIR, Fleet

FIRST_KEY = "default"


def start(args: argparse.Namespace) -> Fleet:
    if (args.dir / "fleet.json").exists() and Fleet.load(args.dir).running():
        raise SystemExit(f"a fleet already runs from {args.dir}: `make fleet-stop` first")
    door = FrontDoorConfig(
        listen=args.listen,
        rate_per_second=args.rate,
        burst=args.burst,
        real_ip_from=args.real_ip_from,
        keyless=args.keyless,
    )
    if args.keyless:
        print("keyless: requests with no key are served, rate-limited per address (SECURITY.md)")
    fleet = Fleet.create(args.dir, args.model_store, args.archive, door)
    keys = KeyStore(fleet.door.paths.keys)
    if not keys.entries():
        key_file = fleet.run_dir / "client_key.json"
        write_client_key(key_file, keys.add(FIRST_KEY))
        print(f"made client key {FIRST_KEY!r}: {key_file} (hand it out, then delete the file)")
    print(
        f"starting {args.replicas} replicas of {args.archive} from {fleet.state.model_store} ...", flush=True
    )
    fleet.start(args.replicas)
    print(f"front door: {fleet.door.url} (replicas {', '.join(fleet.names())}); try:")
    print(
        f"  KEY=$(python3 -c \"import json; print(json.load(open('{fleet.run_dir}/client_key.json'))"
        "['inference']['key'])\")\n"
        f"  curl -H \"Authorization: Bearer $KEY\" -H 'Content-Type: application/json' "
        f'{fleet.door.url}/predictions/zh_en -d \'{{"text": "你好"}}\''
    )
    return fleet


def status(fleet: Fleet) -> None:
    try:
        health = fleet.door.healthz(timeout=10).text.strip()
    except requests.RequestException as error:
        health = f"unreachable ({type(error).__name__})"
    print(f"front door {fleet.door.url} pid {fleet.door.master_pid()}: /healthz {health}")
    for name in fleet.names():
        server = fleet.server(name)
        try:
            version = server.client.default_version()
            ready = f"default {version}, {server.client.ready_workers(version)} READY workers"
        except (requests.RequestException, ServerError) as error:
            ready = f"down ({type(error).__name__})"
        management = server.management_socket or f":{server.ports.management}"
        print(f"  {name}: inference :{server.ports.inference}, management {management}, {ready}")


def keys(args: argparse.Namespace) -> None:
    """Keys work before the fleet's first start too; a running front door reloads at once."""
    store = KeyStore(FrontDoorPaths(args.dir.resolve()).keys)
    if args.action == "list":
        for entry in store.entries():
            print(f"{entry.name}\t{entry.created}\tsha256:{entry.digest[:12]}...")
        return
    if args.action == "add":
        key = store.add(args.name)
        if args.out:
            write_client_key(args.out, key)
            print(f"key {args.name!r} written to {args.out}", file=sys.stderr)
        else:
            print(key)
    else:
        store.revoke(args.name)
    if (args.dir / "fleet.json").exists():
        door = Fleet.load(args.dir).door
        if door.master_pid() is not None:
            door.reload()  # only keys.map changed; the rendered config stays as it is
            print("front door reloaded", file=sys.stderr)  # stdout holds the key alone


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the fleet's working directory")
    commands = main_parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str | None = None) -> argparse.ArgumentParser:
        return commands.add_parser(name, parents=[common], help=help)

    begin = command("start", help="start the replicas and the front door")
    run = command("run", help="start, then keep them running in the foreground until SIGTERM")
    for starting in (begin, run):
        starting.add_argument("--replicas", type=int, default=2)
        starting.add_argument("--model-store", type=Path, default=Path("model_store"))
        starting.add_argument("--archive", default=DEFAULT_ARCHIVE)
        starting.add_argument("--listen", default=FrontDoorConfig.listen)
        rate_help = "requests/s per key"
        starting.add_argument("--rate", type=int, default=FrontDoorConfig.rate_per_second, help=rate_help)
        starting.add_argument("--burst", type=int, default=FrontDoorConfig.burst)
        real_ip_help = "a load balancer's CIDRs, comma-separated: its X-Forwarded-For names the client"
        starting.add_argument("--real-ip-from", default="", help=real_ip_help)
        keyless_help = "serve requests with no key, per address (a private network only: SECURITY.md)"
        starting.add_argument("--keyless", action="store_true", help=keyless_help)
    add_drain_seconds(run)
    for name in ("stop", "status", "reload", "add-replica"):
        command(name)
    for name in ("remove-replica", "restart-replica"):
        command(name).add_argument("name")
    roll = command("roll", help="change the default version on every replica in turn")
    roll.add_argument("--to", required=True, help="a version (1.0-fp32) or an archive (zh_en_fp32.mar)")
    roll.add_argument("--workers", type=int, help="workers per replica (default: the archive's minWorkers)")
    key_parser = command("keys", help="add, revoke or list client keys (no restart)")
    key_parser.add_argument("action", choices=("add", "revoke", "list"))
    key_parser.add_argument("name", nargs="?")
    key_parser.add_argument("--out", type=Path, help="with add: write the key here (0600) instead of stdout")
    return main_parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "start":
        start(args)
        return 0
    if args.command == "run":
        stop = stop_on_signals()
        return supervise(start(args), args.drain_seconds, stop)
    if args.command == "keys":
        if args.action != "list" and not args.name:
            raise SystemExit(f"keys {args.action} needs a NAME")
        keys(args)
        return 0
    fleet = Fleet.load(args.dir)
    if args.command == "stop":
        fleet.stop()
        print(f"stopped the front door and {len(fleet.names())} replicas")
    elif args.command == "status":
        status(fleet)
    elif args.command == "reload":
        fleet.reload()
    elif args.command == "add-replica":
        print(f"added {fleet.add_replica()}")
    elif args.command == "remove-replica":
        fleet.remove_replica(args.name)
    elif args.command == "restart-replica":
        fleet.restart_replica(args.name)
    elif args.command == "roll":
        for step in fleet.roll(args.to, args.workers):
            print(f"{step['replica']}: default {step['to']} after {step['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
