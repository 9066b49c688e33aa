"""A worker SIGKILLed under load through the front door, on a fleet of N replicas (tiny or full store)."""
import json, sys, tempfile, time
from pathlib import Path
from serving.nginx_conf import FrontDoorConfig
from serving.ports import free_port
from serving.replica_set import Fleet
from tests.soak.faults import kill_worker_under_load
from tests.soak.fleet_faults import load_key, under_load

store, replicas = Path(sys.argv[1]), int(sys.argv[2])
d = tempfile.mkdtemp(prefix="worker_kill_"); print("dir", d, flush=True)
if True:
    door = FrontDoorConfig(listen=f"127.0.0.1:{free_port()}", rate_per_second=100_000, burst=100_000)
    fleet = Fleet.create(Path(d), store, door=door)
    try:
        fleet.start(replicas)
        key = load_key(fleet)
        victim = fleet.server(fleet.names()[0])
        result = under_load(fleet, key, 4, {"num_beams": 1, "max_new_tokens": 12}, 3.0,
                            lambda: kill_worker_under_load(victim))
        errors = (fleet.door.paths.logs / "error.log").read_text()
        print(json.dumps({k: v for k, v in result.items() if k != "variant_sequence"}, indent=1, default=str))
        print("cut-off warnings:", errors.count("cut off; trying"))
    finally:
        fleet.stop()
