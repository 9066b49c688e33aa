"""The batch job in process (no Ray) on the tiny stand-in's real int8 archive: formats, identity,
failures that stay in their file, shards a rerun skips, and a job killed midway that resumes.

The batch output equals the server's is shown against a real TorchServe in tests/e2e/test_batch_ray.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from archive.tatoeba import REPO_ROOT, read_blocks
from batch.cli import main
from batch.engine import UnitTranslator
from batch.engines import LocalEngine, ShardDone
from batch.formats import IDENTITY_COLUMNS
from batch.job import JobSpec, run_job
from batch.shards import Shard, ShardBudget, cut_shards
from batch.units import JobOptions, Unit
from handlers.handler_config import HandlerConfig
from handlers.model.standin_marker import STANDIN_NOTICE

SOURCES = [block.source for block in read_blocks()]


pytestmark = pytest.mark.long(seconds=15)  # seconds: make test starts the longest first


@pytest.fixture(scope="module")
def int8_archive(tiny_store: Path) -> Path:
    return tiny_store / "zh_en_int8.mar"


def translate(args: Sequence[object]) -> int:
    return main(["translate", *(str(arg) for arg in args), "--engine", "local"])


def test_each_format_keeps_its_structure_and_carries_the_model_identity(
    int8_archive: Path, tmp_path: Path
) -> None:
    corpus, out = tmp_path / "in", tmp_path / "out"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "lines.txt").write_text(f"{SOURCES[0]}\r\n\n  \n{SOURCES[1]}\nno Chinese here\n{SOURCES[2]}")
    rows = [{"id": n, "text": text} for n, text in enumerate(SOURCES[3:8])] + [{"id": 5, "text": ""}]
    (corpus / "sub" / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    pq.write_table(pa.table({"id": [1, 2, 3], "body": [SOURCES[8], None, SOURCES[9]]}), corpus / "t.parquet")
    (corpus / "notes.md").write_text(f"# {SOURCES[10]}\n\n- {SOURCES[11]}\n\n```\n代码\n```\n")
    (corpus / "skipped.csv").write_text("not a kind the job reads\n")

    assert (
        translate([corpus, out, "--archive", int8_archive, "--column", "body"]) == 1
    )  # rows.jsonl has no body
    assert translate([corpus, out, "--archive", int8_archive]) == 1  # t.parquet has no text column
    (corpus / "t.parquet").rename(tmp_path / "t.parquet")
    assert translate([corpus, out, "--archive", int8_archive]) == 0
    assert translate([tmp_path / "t.parquet", out, "--archive", int8_archive, "--column", "body"]) == 0

    lines = (out / "lines.txt").read_bytes().decode().split("\n")
    assert len(lines) == 6 and lines[0].endswith("\r") and lines[1:3] == ["", "  "]
    assert lines[4] == "no Chinese here" and "standin" in lines[3] and not lines[5].endswith("\r")
    written = [json.loads(line) for line in (out / "sub" / "rows.jsonl").read_text().splitlines()]
    assert [row["id"] for row in written] == list(range(6)) and written[5]["translation"] is None
    assert all(row["translation_standin"] is True and row["translation_variant"] == "int8" for row in written)
    assert {row["translation_version"] for row in written} == {"1.0-int8"}
    table = pq.read_table(out / "t.parquet").to_pydict()
    assert table["id"] == [1, 2, 3] and table["translation"][1] is None and table["translation"][0]
    assert set(IDENTITY_COLUMNS.values()) <= set(table) and table["translation_standin"] == [True] * 3
    markdown = (out / "notes.md").read_text().split("\n")
    assert (
        markdown[0].startswith("# ")
        and markdown[2].startswith("- ")
        and markdown[4:7] == ["```", "代码", "```"]
    )
    assert not (out / "skipped.csv").exists()
    for name in ("lines.txt", "sub/rows.jsonl", "t.parquet", "notes.md"):
        manifest = json.loads((out / f"{name}.batch.json").read_text())
        assert (
            manifest["model"] == "zh_en"
            and manifest["version"] == "1.0-int8"
            and manifest["variant"] == "int8"
        )
        assert manifest["standin"] is True and manifest["notice"] == STANDIN_NOTICE


def test_a_bad_file_fails_alone_and_the_summary_names_file_and_line(
    int8_archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, out = tmp_path / "in", tmp_path / "out"
    corpus.mkdir()
    (corpus / "good.txt").write_text(f"{SOURCES[0]}\n")
    (corpus / "gbk.txt").write_bytes(f"{SOURCES[0]}\n".encode() + "第二行。\n".encode("gb18030"))
    # The second cue's arrow is "->": it is no cue.
    (corpus / "broken.srt").write_text(
        "1\n00:00:01,000 --> 00:00:02,000\n你好。\n\n2\n00:00:03,000 -> 00:00:04,000\n"
    )
    (corpus / "rows.jsonl").write_text('{"text": "你好。"}\n\n{"text": "你好。"\n')
    (corpus / "report.docx").write_bytes(b"PK not a zip")

    assert translate([corpus, out, "--archive", int8_archive]) == 1

    errors = capsys.readouterr().err
    assert "batch: 1/1 shards, 1 sentences," in errors and "sentences/s" in errors and "ETA" in errors
    assert "4 files failed" in errors
    assert f"{corpus / 'gbk.txt'}: line 2, byte 1: not UTF-8" in errors
    assert f"{corpus / 'broken.srt'}: not SRT: line 5: expected a cue" in errors
    assert f"{corpus / 'rows.jsonl'}: line 3: not JSON" in errors
    assert f"{corpus / 'report.docx'}: " in errors and "not a .docx file" in errors
    assert (out / "good.txt").is_file() and sorted(p.name for p in out.iterdir()) == [
        ".batch",
        "good.txt",
        "good.txt.batch.json",
    ]


def test_ray_is_an_extra_the_serving_install_leaves_out() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert not [dependency for dependency in project["dependencies"] if dependency.startswith("ray")]
    assert project["optional-dependencies"]["batch"] == ["ray[data]==2.60.0"]
    assert "zh-en-torchserve[batch]" in project["optional-dependencies"]["dev"]
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "$(call install,-e .)\n" in makefile  # the runtime (make archives, the image)
    assert "RUN make archives" in (REPO_ROOT / "Dockerfile").read_text()


def test_shards_hold_similar_lengths_within_their_budget() -> None:
    units = [Unit(n % 3, n, "字" * length) for n, length in enumerate([5, 1, 30, 2, 2, 9, 40, 3])]
    shards = cut_shards(units, ShardBudget(max_chars=12, max_units=3))
    lengths = [[len(unit.text) for unit in shard.units] for shard in shards]
    assert lengths == [[1, 2, 2], [3, 5], [9], [30], [40]]
    assert [shard.number for shard in shards] == list(range(5))
    assert sorted(unit.index for shard in shards for unit in shard.units) == list(range(8))


class CountingEngine:
    """The local engine, counting the shards it is given."""

    def __init__(self, archive: Path) -> None:
        self.engine = LocalEngine(archive, JobOptions())
        self.shards = 0

    def run(self, shards: Sequence[Shard], done: ShardDone) -> None:
        self.shards += len(shards)
        self.engine.run(shards, done)


def test_a_rerun_skips_finished_shards_and_writes_the_same_output(int8_archive: Path, tmp_path: Path) -> None:
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(SOURCES[:40]) + "\n")
    spec = JobSpec(str(source), tmp_path / "out", int8_archive, budget=ShardBudget(max_units=8))
    first = CountingEngine(int8_archive)
    summary = run_job(spec, first)
    output = (tmp_path / "out" / "lines.txt").read_bytes()
    assert first.shards == summary.shards == 5 and summary.shards_skipped == 0

    (tmp_path / "out" / "lines.txt").unlink()
    second = CountingEngine(int8_archive)
    rerun = run_job(spec, second)
    assert second.shards == 0 and rerun.shards_skipped == 5
    assert (tmp_path / "out" / "lines.txt").read_bytes() == output

    with_beams = run_job(JobSpec(str(source), tmp_path / "out", int8_archive, JobOptions(beams=2)), second)
    assert with_beams.shards_skipped == 0, "other options are another job"


def test_repeated_lines_decode_once_within_a_job(int8_archive: Path) -> None:
    unique = UnitTranslator(int8_archive, JobOptions())
    unique.translate([Unit(0, n, SOURCES[n]) for n in range(3)])
    tokens_of_three = unique.decoding.take_counts().generated_tokens

    translator = UnitTranslator(int8_archive, JobOptions())
    units = [Unit(0, n, SOURCES[n % 3]) for n in range(12)]
    results = translator.translate(units)
    assert [result.translation for result in results[3:]] == [result.translation for result in results[:9]]
    assert translator.decoding.take_counts().generated_tokens == tokens_of_three
    again = translator.translate(units)  # a later shard: the sentence cache answers
    assert again == results
    counts = translator.decoding.take_counts()
    assert counts.cache_hits == 12 and counts.generated_tokens == 0


def test_a_group_of_one_sentence_does_not_hold_the_job_to_the_interactive_share(
    int8_archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Units decode as one request per (format, options); a request of one sentence is what the server
    # protects as interactive. A job has no such client: its other rows stay free to fill.
    translator = UnitTranslator(int8_archive, JobOptions(beams=4))
    scheduler = translator.decoding.driver.scheduler  # type: ignore[attr-defined]
    rows: list[int] = []
    step = scheduler.step

    def counted_step() -> object:
        rows.append(scheduler.state().running_rows)
        return step()

    monkeypatch.setattr(scheduler, "step", counted_step)
    alone = Unit(0, 0, SOURCES[0], forced_tokens=6)
    many = [Unit(0, n, SOURCES[n], forced_tokens=5) for n in range(1, 25)]
    results = translator.translate([alone, *many])
    assert all(result.translation for result in results)
    served_cap = HandlerConfig().document_rows_beside_interactive  # the server's share for documents
    assert max(rows) > served_cap + 4, f"rows per step {rows}; the server's share would be {served_cap} + 4"


@pytest.mark.soak  # a fault drill: `make soak` (and CI), not `make test`
def test_a_job_killed_midway_resumes_complete_in_order_and_not_duplicated(
    int8_archive: Path, tmp_path: Path
) -> None:
    source = tmp_path / "in" / "lines.txt"
    source.parent.mkdir()
    source.write_text("\n".join(f"{n}: {SOURCES[n]}" for n in range(60)) + "\n")
    reference, out = tmp_path / "reference", tmp_path / "out"
    # The reference in this process; the job in two worker processes, killed and rerun.
    assert translate([source, reference, "--archive", int8_archive, "--beams", "1", "--workers", "1"]) == 0
    command = [
        sys.executable,
        "-m",
        "batch",
        "translate",
        str(source),
        str(out),
        "--archive",
        str(int8_archive),
    ]
    command += ["--engine", "local", "--workers", "2", "--shard-units", "3", "--beams", "1"]
    job = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    workers = _workers_once_running(job)
    shards_at_kill = _kill_after_shards(job, out, 3)
    assert 3 <= shards_at_kill < 20, "the job was not killed midway"
    assert not (out / "lines.txt").exists()
    # The worker processes die with the job (no model left holding memory).
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, f"worker processes outlived the killed job: {alive}"

    rerun = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert f"20 shards ({shards_at_kill} done by an earlier run)" in rerun.stdout
    assert (out / "lines.txt").read_bytes() == (reference / "lines.txt").read_bytes()


def _workers_once_running(job: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The job's two worker processes, once they have started."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and job.poll() is None:
        children = psutil.Process(job.pid).children(recursive=True)
        workers = [child for child in children if "spawn_main" in " ".join(child.cmdline())]
        if len(workers) == 2:
            return workers
        time.sleep(0.05)
    raise AssertionError(f"the job started no worker processes: {job.communicate()[1]!r}")


def _kill_after_shards(job: subprocess.Popen[bytes], out: Path, shards: int) -> int:
    """SIGKILL the job once `shards` shard files are on disk; how many were there."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and job.poll() is None:
        done = list(out.glob(".batch/*/shard-*.jsonl"))
        if len(done) >= shards:
            os.kill(job.pid, signal.SIGKILL)
            job.wait()
            return len(list(out.glob(".batch/*/shard-*.jsonl")))
        time.sleep(0.005)
    raise AssertionError(f"the job ended (or stalled) before {shards} shards: {job.communicate()[1]!r}")
