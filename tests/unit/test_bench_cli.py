"""The bench command-line base: shared flags, the model resolved once, progress under the command's
name, and every result signed with its command, commit, machine, date and versions."""

from __future__ import annotations

import datetime as dt
import importlib
import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from bench import cli as bench_cli
from bench import report
from bench.cli import BenchCli, Progress
from bench.common import DEFAULT_MODEL, RESULTS_DIR, RUNS_DIR, writable, write_result
from bench.signature import (
    INSTRUCTION_SET_VARIABLES,
    Signature,
    UnsignedResult,
    command_of,
    git_commit,
    invoked_command,
    signature,
)

# Every `python -m bench.<name>` and the shared flags it has: --model's default (None: no --model),
# --strict, --results-dir. These are the flags the Makefile, docs and tests call them with.
COMMANDS: dict[str, tuple[str | None, bool, bool]] = {
    "bleu": (None, False, True),  # --model is one of its exclusive sources, without a default
    "exactness": ("synthetic", False, True),
    "hot_path": ("synthetic", False, True),
    "latency": (DEFAULT_MODEL, False, True),
    "libretranslate_peer": ("synthetic", False, True),  # `make libretranslate-peer`
    "load": (None, False, True),
    "mixed": ("synthetic", False, True),
    "profile": ("synthetic", False, True),
    "report": (None, False, True),
    "run_all": (DEFAULT_MODEL, False, True),
    "studies.layout": (DEFAULT_MODEL, True, True),  # `make layout`
}
COMMIT = re.compile(r"^([0-9a-f]{4,40}(-dirty)?|unknown)$")


def test_shared_flags_parse_and_the_command_line_is_kept() -> None:
    cli = BenchCli("demo", "what it does", model="synthetic", strict=True, results_dir=True)
    cli.parser.add_argument("--users", type=int, default=4)
    args = cli.parse(["--model", "some dir", "--strict", "--results-dir", "/tmp/out", "--users", "9"])
    assert (args.model, args.strict, args.results_dir, args.users) == ("some dir", True, Path("/tmp/out"), 9)
    assert cli.command == "python -m bench.demo --model 'some dir' --strict --results-dir /tmp/out --users 9"
    defaults = cli.parse([])
    assert (defaults.model, defaults.strict) == ("synthetic", False)
    # By default a run writes into a folder of its own: runs/<date>-<hour><minute>-<commit>.
    assert defaults.results_dir.parent == RUNS_DIR
    assert re.fullmatch(r"\d{4}-\d\d-\d\d-\d{4}-" + COMMIT.pattern[1:], defaults.results_dir.name)
    assert cli.command == "python -m bench.demo"


def test_only_the_flags_a_command_asks_for(capsys: pytest.CaptureFixture[str]) -> None:
    bare = BenchCli("bare", None)
    for flag in ("--model", "--strict", "--results-dir"):
        with pytest.raises(SystemExit):
            bare.parse([flag, "x"] if flag != "--strict" else [flag])
    assert "unrecognized arguments" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="parse"):
        bare.model_dir()


def test_model_is_resolved_once_with_strict(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[tuple[str, bool]] = []

    def resolve(model: str, strict: bool = False) -> Path:
        calls.append((model, strict))
        return tmp_path

    monkeypatch.setattr(bench_cli, "load_model_dir", resolve)
    cli = BenchCli("demo", None, model="synthetic", strict=True)
    cli.parse(["--model", "Helsinki-NLP/opus-mt-zh-en", "--strict"])
    assert cli.model_dir() == cli.model_dir() == tmp_path
    assert calls == [("Helsinki-NLP/opus-mt-zh-en", True)]
    no_strict = BenchCli("demo", None, model="synthetic")
    no_strict.parse([])
    no_strict.model_dir()
    assert calls[-1] == ("synthetic", False)


def test_progress_goes_to_stderr_under_the_command_name(capsys: pytest.CaptureFixture[str]) -> None:
    Progress("latency")("rung 3: start")
    BenchCli("layout", None).say("point 1")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "[latency] rung 3: start\n[layout] point 1\n"


def test_the_signature_has_every_field_typed() -> None:
    stamp = signature("python -m bench.demo --quick")
    assert set(stamp) == set(get_type_hints(Signature))
    assert stamp["command"] == "python -m bench.demo --quick"
    assert COMMIT.match(stamp["commit"]), stamp["commit"]
    assert isinstance(stamp["machine"]["cpu"], str) and stamp["machine"]["cores"] >= 1
    date = dt.datetime.fromisoformat(stamp["date"])
    assert date.utcoffset() == dt.timedelta(0) and abs(dt.datetime.now(dt.UTC) - date).total_seconds() < 60
    assert stamp["torch"] == importlib.metadata.version("torch")
    assert stamp["torchserve"] == importlib.metadata.version("torchserve")


def test_the_signature_names_the_instruction_sets_a_run_was_held_to(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in INSTRUCTION_SET_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert signature("python -m bench.demo")["machine"]["environment"] == {}
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("CT2_FORCE_CPU_ISA", "AVX2")
    environment = signature("python -m bench.demo")["machine"]["environment"]
    assert environment == {"ATEN_CPU_CAPABILITY": "avx2", "CT2_FORCE_CPU_ISA": "AVX2"}


def test_commit_is_unknown_without_git_or_a_repository(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert git_commit(tmp_path) == "unknown"  # not a repository

    def no_git(*args: Any, **kwargs: Any) -> Any:
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert git_commit() == "unknown"


def test_commit_is_dirty_on_code_changes_but_not_on_results(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "studies" / "results").mkdir(parents=True)
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    clean = git_commit(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{4,40}", clean)
    (tmp_path / "bench" / "results" / "latency.json").write_text("{}")
    (tmp_path / "bench" / "studies" / "results" / "layout.json").write_text("{}")  # `make layout`
    assert git_commit(tmp_path) == clean
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_commit(tmp_path) == f"{clean}-dirty"


def test_write_puts_the_signature_in_the_result(tmp_path: Path) -> None:
    cli = BenchCli("demo", None, results_dir=True)
    cli.parse(["--results-dir", str(tmp_path)])
    path = cli.write("demo", {"figure": 1.5})
    assert path == tmp_path / "demo.json"
    result = json.loads(path.read_text())
    assert result["figure"] == 1.5
    assert result["signature"]["command"] == f"python -m bench.demo --results-dir {tmp_path}"
    assert set(result["signature"]) == set(get_type_hints(Signature))
    # The keys results had before the signature stay: reports and plots read them.
    assert result["machine"] == result["signature"]["machine"] and result["date"].endswith(" UTC")
    assert command_of(result) == result["signature"]["command"]


def test_write_result_signs_with_this_process_when_no_command_is_given(tmp_path: Path) -> None:
    result = json.loads(write_result("plain", {}, tmp_path).read_text())
    assert result["signature"]["command"] == invoked_command()
    assert invoked_command(["/repo/bench/latency.py", "--quick"]) == "python -m bench.latency --quick"
    assert invoked_command(["/venv/bin/pytest", "-q", "a b"]) == "pytest -q 'a b'"


def test_reports_read_the_signature_and_refuse_a_result_without_one() -> None:
    signed = {"signature": {"command": "python -m bench.load --users 4", "machine": {"cpu": "new"}}}
    frozen = {"command": "python -m bench.layout --model synthetic ", "machine": {"cpu": "old"}}
    assert command_of(signed) == "python -m bench.load --users 4"
    assert command_of(frozen) == "python -m bench.layout --model synthetic"  # a study's own record
    with pytest.raises(UnsignedResult, match="re-measure"):
        command_of({"machine": {"cpu": "old"}})
    assert report.commands([signed, signed]) == "`python -m bench.load --users 4`"
    with pytest.raises(UnsignedResult):
        report.commands([signed, {}])


def test_the_batch_job_is_set_beside_the_server_runs_before_and_after_it() -> None:
    signed = {"signature": {"command": "python -m bench.batch_throughput", "machine": {}}}
    run = {"sentences": 100, "seconds": 1.11, "sentences_per_s": 90.0}
    batch = {
        **signed,
        "date": "today",
        "n": 100,
        "output_lengths": "reference lengths",
        "ray_start_seconds": 3.0,
        "runs": {name: run for name in ("local_per_core", "ray_per_core", "in_process", "ray_one_actor")},
    }
    served = {"variant": "int8", "num_beams": 4, "users": 100}
    before = {**signed, **served, "label": "load-int8-beam4-u100", "rps": 60.0}
    after = {**signed, **served, "label": f"load-int8-beam4-u100{report.AFTER_BATCH}", "rps": 75.0}
    text = "\n".join(report.batch_section(batch, [before, after]))
    assert "| the server again, once the job had run (load-int8-beam4-u100-after-batch) | | | 75.0 |" in text
    # 90 against the mean of 60 and 75, then against each.
    assert "server: **1.33x** against the mean of the server's runs before and after the job" in text
    assert "(1.50x and 1.20x against each)" in text
    assert "server: **1.50x**" in "\n".join(report.batch_section(batch, [before]))
    assert not report.decoder_comparison([{**after, "decoder": "fast"}, {**before, "decoder": "generate"}])


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_answers_help_with_its_shared_flags(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    module = importlib.import_module(f"bench.{name}")
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0
    usage, options = capsys.readouterr().out.split("\noptions:\n")
    assert usage.startswith(f"usage: python -m bench.{name}")
    text = options  # the flags themselves, not the description (which quotes some of them)
    model, strict, results_dir = COMMANDS[name]
    has_model = model is not None or name == "bleu"
    assert ("--model " in text or "--model\n" in text) == has_model
    if model is not None:
        assert f"({model})" in text  # its default, unchanged
    assert ("--strict" in text) == strict
    assert ("--results-dir" in text) == results_dir


# `python -m <module> --help`, as runpy runs it for -m, for each module in one fresh interpreter:
# the imports load once (7-11 s each in a process of its own), each module still runs as __main__.
DASH_M = """
import runpy, sys
for name in sys.argv[1:]:
    sys.argv = [name, "--help"]
    try:
        runpy.run_module(name, run_name="__main__", alter_sys=True)
        code = "no exit"
    except SystemExit as done:
        code = done.code
    print(f"== {name} exited {code}")
"""


def test_python_dash_m_help_runs() -> None:
    names = ["bench.latency", "tests.soak.fleet_faults", "bench.studies.layout"]
    done = subprocess.run([sys.executable, "-c", DASH_M, *names], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # [usage, name, exit code] per module, then what follows the last (nothing).
    parts = re.split(r"^== (\S+) exited (\S+)\n", done.stdout, flags=re.MULTILINE)
    assert len(parts) == 3 * len(names) + 1 and parts[-1] == "", done.stdout[-500:]
    for index, name in enumerate(names):
        usage, ran, code = parts[3 * index : 3 * index + 3]
        assert (ran, code) == (name, "0") and usage.startswith(f"usage: python -m {name}"), usage[:200]


def test_a_committed_result_is_never_written_over(tmp_path: Path) -> None:
    """Docs cite committed result files: a run that names their folder fails before writing."""
    cited = RESULTS_DIR / "kernels-2026-11-28" / "fa22b4f" / "hot-path.json"
    before = cited.read_bytes()
    with pytest.raises(FileExistsError, match="committed result"):
        write_result("hot-path", {"x": 1}, cited.parent)
    assert cited.read_bytes() == before
    assert writable(tmp_path / "new.json") == tmp_path / "new.json"  # not committed: fine


def test_two_runs_in_one_minute_get_two_folders(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A second run started in the minute of the first gets its own folder, not the first's (whose
    uncommitted files it would replace); within one process the folder is chosen once."""
    from bench import common

    minute = dt.datetime(2026, 12, 7, 7, 9, 30, tzinfo=dt.UTC)

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> Frozen:
            return cls.fromtimestamp(minute.timestamp(), tz)

    monkeypatch.setattr(dt, "datetime", Frozen)  # the module bench.common reads the clock from
    monkeypatch.setattr(common, "git_commit", lambda: "abc1234")
    monkeypatch.setattr(common, "RUNS_DIR", tmp_path)
    monkeypatch.setattr(common, "_THIS_RUN", None)
    first = common.run_folder()
    assert first == tmp_path / "2026-12-07-0709-abc1234" and common.run_folder() == first
    first.mkdir()
    monkeypatch.setattr(common, "_THIS_RUN", None)  # a second process, same minute
    assert common.run_folder() == tmp_path / "2026-12-07-0709-abc1234-2"
    (tmp_path / "2026-12-07-0709-abc1234-2").mkdir()
    monkeypatch.setattr(common, "_THIS_RUN", None)
    assert common.run_folder() == tmp_path / "2026-12-07-0709-abc1234-3"
