"""Latency through the front door, proxied (old templates) against read whole (new), one replica.

    python door_cost.py OLD_CHECKOUT RESULTS_DIR [--users 8] [--seconds 60] [--pace 0.5]

One real replica (model_store/zh_en_int8.mar, the shipped config) with two front doors over it: the
old templates rendered from OLD_CHECKOUT (their own process), the new from this checkout. Paced users
each send one Tatoeba sentence to both doors in turn (the order alternates), so both see the same
load; latency per door, p50 and p95. A scratch study kept as it ran (issue 43's "measure the cost").
"""
import json, os, random, statistics, subprocess, sys, tempfile, threading, time
from pathlib import Path
import requests

old, out = Path(sys.argv[1]), Path(sys.argv[2])
users, seconds, pace = 8, 60.0, 0.5
repo = Path.cwd()
sys.path.insert(0, str(repo))
from serving.fleet_keys import KeyStore
from serving.nginx_conf import FrontDoorConfig
from serving.ports import free_port
from serving.replica_set import Fleet

HIGH = dict(rate_per_second=100000, burst=100000)
run = Path(tempfile.mkdtemp(prefix="door-cost-"))
fleet = Fleet.create(run / "new", repo / "model_store", door=FrontDoorConfig(listen=f"127.0.0.1:{free_port()}", **HIGH))
fleet.start(1)
new_key = KeyStore(fleet.door.paths.keys).add("cost"); fleet.door.reload()
port = fleet.replica_ports()[0] if hasattr(fleet, "replica_ports") else fleet.state.replicas[0].ports.inference
old_listen = f"127.0.0.1:{free_port()}"
starter = f"""
import sys, time
from serving.fleet_keys import KeyStore
from serving.front_door import FrontDoor
from serving.nginx_conf import FrontDoorConfig, FrontDoorPaths
door = FrontDoor(FrontDoorPaths(__import__('pathlib').Path('{run}/old')), FrontDoorConfig(listen='{old_listen}', rate_per_second=100000, burst=100000))
door.configure([{port}])
print(KeyStore(door.paths.keys).add('cost'), flush=True)
door.start()
try:
    sys.stdin.read()
finally:
    door.stop()
"""
proc = subprocess.Popen([sys.executable, "-c", starter], cwd=old, env={**os.environ, "PYTHONPATH": str(old)},
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
old_key = proc.stdout.readline().strip()
time.sleep(2)
doors = {"proxied (0470531)": (f"http://{old_listen}", old_key), "read whole": (fleet.door.url, new_key)}
texts = []
for f in sorted(Path(repo.parent / "shared" / "data").rglob("*")):
    if f.is_file() and f.suffix in (".tsv", ".txt") and not texts:
        for line in f.read_text().splitlines():
            field = line.split("\t")[0] if "\t" in line else line
            if any("\u4e00" <= c <= "\u9fff" for c in field):
                texts.append(field)
texts = texts[:2000] or ["你好，世界。"]
latency = {name: [] for name in doors}
failed = {name: 0 for name in doors}
stop = time.monotonic() + seconds
def user(seed):
    rng = random.Random(seed); s = requests.Session(); n = 0
    while time.monotonic() < stop:
        order = list(doors) if n % 2 == 0 else list(reversed(doors)); n += 1
        text = rng.choice(texts)
        for name in order:
            url, key = doors[name]
            t0 = time.perf_counter()
            r = s.post(f"{url}/predictions/zh_en", json={"text": text}, headers={"Authorization": f"Bearer {key}"}, timeout=60)
            dt = time.perf_counter() - t0
            if r.status_code == 200: latency[name].append(dt)
            else: failed[name] += 1
        time.sleep(rng.uniform(0, 2 * pace))
# warm-up
for name, (url, key) in doors.items():
    for _ in range(5): requests.post(f"{url}/predictions/zh_en", json={"text": texts[0]}, headers={"Authorization": f"Bearer {key}"}, timeout=60)
threads = [threading.Thread(target=user, args=(i,)) for i in range(users)]
[t.start() for t in threads]; [t.join() for t in threads]
def q(v, p): v = sorted(v); return v[min(len(v) - 1, int(p * len(v)))]
result = {"users": users, "seconds": seconds, "pace_s": pace, "texts": len(texts),
          "doors": {name: {"requests": len(v), "failed": failed[name], "p50_ms": round(1000 * q(v, 0.5), 1),
                           "p95_ms": round(1000 * q(v, 0.95), 1), "mean_ms": round(1000 * statistics.mean(v), 1)}
                    for name, v in latency.items()}}
a, b = (result["doors"][n] for n in doors)
result["read_whole_over_proxied"] = {k: round(b[k] / a[k], 3) for k in ("p50_ms", "p95_ms", "mean_ms")}
out.mkdir(parents=True, exist_ok=True)
(out / "door-cost.json").write_text(json.dumps(result, indent=1) + "\n")
print(json.dumps(result, indent=1))
proc.stdin.close(); proc.wait(timeout=30)
fleet.stop()
