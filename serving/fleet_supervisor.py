"""Keep a started fleet running in the foreground; stop it gracefully on SIGTERM (`serving.fleet run`).

This is what a service manager runs (deploy/zh-en-fleet.service): it starts nothing itself, it
restarts a replica whose TorchServe died and a front door whose nginx died, reloads nginx with an
empty per-address connection zone after any of its workers was killed (a killed worker never gives
its connections' slots back), and on SIGTERM or SIGINT it stops the front door with nginx's
graceful quit (no new connections; requests in flight finish, at most `drain_seconds`) and then the
replicas.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

from serving.front_door import NginxError
from serving.processes import process_alive
from serving.replica_set import Fleet


def stop_on_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set. Installed before the fleet starts: the front door answers
    before its start returns, and a SIGTERM in between must stop the fleet gracefully, not kill
    this process and leave the replicas running."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def supervise(fleet: Fleet, drain_seconds: float, stop: threading.Event, poll: float = 2.0) -> int:
    _, seen = fleet.door.killed_workers()  # kills before this process started are not its to mend
    while not stop.wait(poll):
        _revive(fleet)
        seen = renew_slots_after_kills(fleet, seen)
    say(f"stop requested: front door quits gracefully (at most {drain_seconds:g} s), then the replicas")
    began = time.monotonic()
    fleet.stop(drain_seconds)
    say(f"stopped in {time.monotonic() - began:.1f} s")
    return 0


def _revive(fleet: Fleet) -> None:
    """The front door first: restarting a replica reloads it."""
    if fleet.door.master_pid() is None:
        say("the front door is down: starting it")
        fleet.start_door()
    for name in fleet.names():
        java = fleet.server(name).java_pid()
        if java is None or not process_alive(java):
            say(f"replica {name} is down: restarting it")
            fleet.restart_replica(name)
            say(f"replica {name} is back")


def renew_slots_after_kills(fleet: Fleet, seen: int) -> int:
    """After nginx workers died of a signal, an empty per-address connection zone (FrontDoor.renew_
    connection_slots): their connections' slots are otherwise never given back. Returns the log offset."""
    if fleet.door.master_pid() is None:
        return seen
    killed, seen = fleet.door.killed_workers(seen)
    if killed:
        say(f"{killed} nginx worker(s) killed: reloading with an empty per-address connection zone")
        try:
            fleet.door.renew_connection_slots()
        except NginxError as error:  # the old zone keeps serving; the next kill tries again
            say(f"the reload failed: {error}")
    return seen


def say(message: str) -> None:
    print(f"serving.fleet: {message}", file=sys.stderr, flush=True)
