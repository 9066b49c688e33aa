"""The front door's nginx config as rendered from deploy/nginx/ (serving/nginx_conf.py): every
placeholder filled from FrontDoorConfig, accepted by `nginx -t`, and the workers' directory where
they can reach it. The config's behaviour is tested against real nginx in tests/e2e/test_fleet.py,
test_libretranslate.py, test_front_door_parsers.py and test_front_door_limits.py."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from serving.front_door import FrontDoor
from serving.nginx_conf import SITE_SOURCE_DIR, FrontDoorConfig, FrontDoorPaths, render, write_status_targets

# Every number distinct, so each must come from its own field to appear.
CONFIG = FrontDoorConfig(
    listen="127.0.0.1:18090",
    rate_per_second=21,
    burst=41,
    health_cache_s=2,
    connections_per_address=33,
    address_rate_per_second=43,
    address_burst=87,
    header_timeout_s=7,
    body_timeout_s=8,
    send_timeout_s=9,
    keepalive_timeout_s=31,
    url_limit_kib=48,
)


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A run dir every user can reach: pytest's own temp dirs are 0700."""
    made = Path(tempfile.mkdtemp(prefix="zh_en-nginx-conf-test-"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


def rendered(paths: FrontDoorPaths) -> str:
    return "\n".join(path.read_text() for path in sorted(paths.conf_dir.iterdir()))


def test_every_placeholder_is_filled_and_nginx_accepts_the_config(reachable_dir: Path) -> None:
    door = FrontDoor(FrontDoorPaths(reachable_dir), CONFIG)
    door.configure([18091, 18092])  # renders, writes keys and upstreams, then runs `nginx -t`
    text = rendered(door.paths)
    assert "@@" not in text
    for line in (
        "client_header_timeout 7s;",
        "client_body_timeout 8s;",
        "send_timeout 9s;",
        "keepalive_timeout 31s;",
        "large_client_header_buffers 2 48k;",
        "limit_conn per_address_conn_0 33;",
        "zone=per_address:10m rate=43r/s;",
        "limit_req zone=per_address burst=87 nodelay;",
        "zone=per_client:1m rate=21r/s;",
        "limit_req zone=per_client burst=41 nodelay;",
        "proxy_cache_valid 200 2s;",
        "worker_processes auto;",
        f"server unix:{door.paths.stage_socket} max_fails=0;",
    ):
        assert line in text, line
    assert (
        "set_real_ip_from" not in text.split("server {")[1].split("server {")[0]
    )  # no balancer: none trusted


def test_the_pages_and_the_status_targets_are_where_the_workers_read_them(reachable_dir: Path) -> None:
    door = FrontDoor(FrontDoorPaths(reachable_dir), CONFIG)
    door.configure([18091, 18092], {"r1": 18093, "r2": 18094})
    text = rendered(door.paths)
    assert 'set $status_targets "r1:18093 r2:18094";' in text
    assert f"root {door.paths.site_dir};" in text
    assert "script-src 'self'" in text and "unsafe-inline" not in text
    pages = sorted(page.name for page in SITE_SOURCE_DIR.iterdir())
    assert {"index.html", "status.html", "playground.js", "status.js", "key.js", "site.css"} <= set(pages)
    for name in pages:
        copy = door.paths.site_dir / name
        assert copy.read_bytes() == (SITE_SOURCE_DIR / name).read_bytes()
        assert copy.stat().st_mode & 0o777 == 0o644
    door.configure([18091])  # no metrics ports: the status page lists no replica
    assert 'set $status_targets "";' in rendered(door.paths)


def test_a_replica_name_that_could_break_out_of_the_status_targets_is_refused(reachable_dir: Path) -> None:
    with pytest.raises(ValueError, match="replica name"):
        write_status_targets(FrontDoorPaths(reachable_dir), {'r1"; return 200 "x': 18093})


def test_a_load_balancers_addresses_are_trusted_for_the_client_address(reachable_dir: Path) -> None:
    door = FrontDoor(FrontDoorPaths(reachable_dir), FrontDoorConfig(real_ip_from="10.0.0.0/16, 10.1.0.5"))
    door.configure([18091])
    text = rendered(door.paths)
    for line in ("set_real_ip_from 10.0.0.0/16;", "set_real_ip_from 10.1.0.5;", "real_ip_recursive on;"):
        assert line in text, line


def test_the_workers_directory_is_where_they_can_reach_it(reachable_dir: Path, tmp_path: Path) -> None:
    assert FrontDoorPaths(reachable_dir).worker_dir == reachable_dir / "worker"
    hidden = FrontDoorPaths(tmp_path)  # below /tmp/pytest-of-<user>, mode 0700
    if os.geteuid() != 0:  # workers run as this user: they reach anything it does
        assert hidden.worker_dir == tmp_path / "worker"
        return
    # Root's workers run as www-data: a directory of their own in the temp dir, the same every time.
    assert hidden.worker_dir.parent == Path(tempfile.gettempdir())
    assert hidden.worker_dir == FrontDoorPaths(tmp_path).worker_dir
    assert hidden.worker_dir != FrontDoorPaths(tmp_path / "other").worker_dir
    render(CONFIG, hidden)
    try:
        assert (hidden.worker_dir.stat().st_mode & 0o777) == 0o700
        assert hidden.worker_dir.stat().st_uid != 0  # the workers' user owns it
    finally:
        shutil.rmtree(hidden.worker_dir)


@pytest.mark.parametrize(
    "bad",
    [
        {"listen": "8090"},
        {"connections_per_address": 0},
        {"header_timeout_s": -1},
        {"health_cache_s": 0},
        {"real_ip_from": "10.0.0.0/8; deny all"},
    ],
)
def test_a_config_without_a_sensible_number_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        FrontDoorConfig(**bad)  # type: ignore[arg-type]


@pytest.mark.timed  # a wall-clock budget on near-misses: run alone
def test_killed_workers_are_counted_from_the_log_and_a_renewed_zone_is_new(reachable_dir: Path) -> None:
    """FrontDoor.renew_connection_slots' two halves without a running nginx: the master's alert lines for
    killed workers, counted once each from an offset, and the zone's name from its generation."""
    door = FrontDoor(FrontDoorPaths(reachable_dir), CONFIG)
    door.configure([18091])
    assert door.killed_workers() == (0, 0)  # no log yet
    log = door.paths.logs / "error.log"
    log.write_text(
        "2026/11/29 07:20:44 [alert] 3612#3612: worker process 3626 exited on signal 9\n"
        "2026/11/29 07:20:44 [notice] 3612#3612: worker process 3627 exited with code 0\n"
        "2026/11/29 07:20:45 [alert] 3612#3612: worker process 3737 exited on signal 11 (core dumped)\n"
    )
    count, seen = door.killed_workers()
    assert (count, seen) == (2, log.stat().st_size)
    assert door.killed_workers(seen) == (0, seen)
    with log.open("a") as handle:
        handle.write("2026/11/29 07:20:46 [alert] 3612#3612: worker process 3801 exited on signal 9\n")
    assert door.killed_workers(seen)[0] == 1
    # A client's request text in another line is no kill, however it is shaped or how long it runs.
    forged = "worker process 1 exited on signal 9" * 20_000
    with log.open("a") as handle:
        handle.write(
            f'2026/11/29 07:20:47 [error] 3612#3612: *7 open() failed, request: "GET /{forged}", host: "x"\n'
            "2026/11/29 07:20:47 [error] 3612#3612: *8 worker process 2 exited on signal 9\\x0A\n"
        )
    started = time.monotonic()
    assert door.killed_workers(seen) == (1, log.stat().st_size)  # only the real one above
    assert time.monotonic() - started < 1.0  # 700 KB of near-misses: linear
    log.write_text("")  # rotated: counted from its start again
    assert door.killed_workers(seen) == (0, 0)
    assert "limit_conn per_address_conn_0 33;" in rendered(door.paths)
    door.paths.connection_zone_generation.write_text("1\n")
    door.configure([18091])  # as renew_connection_slots renders, and nginx -t accepts it
    assert "limit_conn per_address_conn_1 33;" in rendered(door.paths)
    assert "zone=per_address_conn_1:10m" in rendered(door.paths)
