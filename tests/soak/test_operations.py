"""Operations under load on a real server (tiny stand-in): swaps, a killed worker, a full queue, a timeout.

Minutes, not seconds: marked `soak`, run by `make soak` (and CI), not by `make test`.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from bench.common import SCHEDULERS, archive_with
from serving.processes import process_alive
from serving.swap import archive_workers
from serving.torchserve import TorchServe
from tests.soak.faults import (
    cold_store,
    kill_partition_under_load,
    kill_worker_under_load,
    partitions_of,
    summarize,
    swap_under_load,
)
from tests.soak.steady_load import SteadyLoad
from tests.waiting import wait_until

pytestmark = [pytest.mark.soak, pytest.mark.long(seconds=250)]  # seconds: the longest start first

TEXTS = ["汤姆不会同意的。", "我要看病。", "那个穿棕色大衣的女人是谁？", "如果今天是星期日，我會去釣魚。"]
QUICK: dict[str, Any] = {"num_beams": 1, "max_new_tokens": 12}
# About a second of work per request on the tiny model: enough to fill queues and outlast timeouts.
# Distinct texts: the sentence cache decodes a repeated sentence once, which would make this light.
DISTINCT = [f"你好{'一二三四五六七八九十'[i % 10]}{'甲乙'[i // 10]}" for i in range(16)]
HEAVY = {"text": DISTINCT[:4], "num_beams": 8, "max_new_tokens": 256, "min_new_tokens": 256}


def steady(server: TorchServe, concurrency: int = 4) -> SteadyLoad:
    return SteadyLoad(server.client.endpoints, server.key_file, TEXTS, concurrency, options=QUICK)


@pytest.fixture(params=["static", "step"])
def scheduler(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fresh_server(scheduler: str, tiny_model_dir: Path, tmp_path: Path) -> Iterator[TorchServe]:
    """Both tiny archives, cache off, as tests.soak.faults packs them for `scheduler`."""
    with TorchServe(cold_store(tiny_model_dir, tmp_path, scheduler), tmp_path / "torchserve") as running:
        yield running


def test_swapping_versions_under_load_fails_no_request(fresh_server: TorchServe, scheduler: str) -> None:
    with steady(fresh_server) as load:
        report = swap_under_load(fresh_server, load, seconds=20)  # workers as each archive starts them
    summary = summarize(load)
    assert report["seconds"] >= 20 and len(report["swaps"]) >= 2
    assert summary["failed"] == 0, summary["failure_samples"]
    sequence = summary["variant_sequence"]
    assert sequence[0] == "int8" and "fp32" in sequence and sequence[-1] == "int8", sequence
    assert fresh_server.client.versions() == ["1.0-int8"]


def killed_under_load(
    server: TorchServe, concurrency: int, kill: Callable[[], dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`kill` while `concurrency` clients are answered before it and after it: its report, the load's."""
    with steady(server, concurrency) as load:
        load.wait_for_answers(2 * concurrency, since=0.0)  # the load is running before the kill
        report = kill()
        load.wait_for_answers(2 * concurrency, since=time.monotonic())  # and answered after it
    return report, summarize(load)


def test_a_killed_worker_is_replaced_and_only_its_requests_fail(
    fresh_server: TorchServe, scheduler: str
) -> None:
    concurrency = 4
    # kill_worker_under_load waits until the archive's minWorkers are READY again.
    report, summary = killed_under_load(
        fresh_server, concurrency, lambda: kill_worker_under_load(fresh_server)
    )
    assert not process_alive(report["killed_pid"])
    assert report["all_ready_after_s"] < 120
    # At most the requests that were on the killed worker: one static batch, or every request open
    # on the one step worker, fed by our 4 clients either way.
    assert summary["failed"] <= concurrency, summary["failure_samples"]
    assert fresh_server.client.translate("你好").status_code == 200


@pytest.mark.parametrize("scheduler", ["step"])  # a static worker has no partitions
def test_a_killed_partition_is_replaced_and_no_request_fails(
    fresh_server: TorchServe, scheduler: str
) -> None:
    concurrency = 4
    kill = lambda: kill_partition_under_load(fresh_server, partitions_of(scheduler))  # noqa: E731
    report, summary = killed_under_load(fresh_server, concurrency, kill)
    assert not process_alive(report["killed_pid"])
    assert report["worker_survived"], "the worker replaces its partition instead of exiting"
    assert report["partition_back_after_s"] < 30
    assert summary["failed"] == 0, summary["failure_samples"]


def test_a_full_queue_answers_503_and_recovers(tiny_store: Path, tmp_path: Path) -> None:
    with TorchServe(tiny_store, tmp_path / "torchserve", overrides={"job_queue_size": "2"}) as server:
        body = json.dumps(HEAVY).encode()

        def post(_: int) -> requests.Response:
            client = type(server.client)(server.client.endpoints, server.key_file)
            return client.post_raw(body, "application/json")

        with ThreadPoolExecutor(max_workers=24) as pool:
            responses = list(pool.map(post, range(24)))
        statuses = [response.status_code for response in responses]
        assert 503 in statuses and 200 in statuses, statuses
        refused = next(response for response in responses if response.status_code == 503)
        assert refused.json()["code"] == 503
        # Load gone: the server answers normally again.
        assert server.client.translate("你好", **QUICK).status_code == 200


def test_a_request_over_the_response_timeout_does_not_wedge_the_worker(
    scheduler: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """static: TorchServe kills the worker that holds a batch past responseTimeout and starts a new
    one. step: responseTimeout bounds each handler call, which returns within a slice, so the same
    request is answered (docs/SCHEDULING.md, "Limits")."""
    handler, top = SCHEDULERS[scheduler]
    # The fast decoder does HEAVY on the tiny model in under 2 s: this request is 4x that (about 7 s).
    store, mar = archive_with("int8", tiny_model_dir, tmp_path, handler, {**top, "responseTimeout": 2})
    workers = archive_workers(store / mar)
    with TorchServe(store, tmp_path / "torchserve", models=[mar]) as server:
        started = time.monotonic()
        slower = {**HEAVY, "text": DISTINCT}
        slow = server.client.post_raw(json.dumps(slower).encode(), "application/json")
        took = time.monotonic() - started
        if scheduler == "static":
            assert slow.status_code >= 500 and took < 30, slow.text
        else:
            assert slow.status_code == 200 and took > 2, (took, slow.text[:300])
        wait_until(lambda: server.client.ready_workers("1.0-int8") >= workers, 120, "the workers back", 0.5)
        answers = [server.client.translate("你好", **QUICK).status_code for _ in range(6)]
        assert answers == [200] * 6
    shutil.rmtree(store)
