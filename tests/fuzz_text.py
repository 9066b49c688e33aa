"""A bounded cost campaign over every text entry point: the slowest input each one was given.

    .venv/bin/python -m tests.fuzz_text                  # make fuzz: every adversarial case at the
                                                         # limits, then Hypothesis, report, exit 1
                                                         # when an input ran past the budget
    .venv/bin/python -m tests.fuzz_text --isolate 30     # each case in a worker process killed after
                                                         # 30 s (to measure code that may hang)

An entry point is what one request's text goes through before and after the model (the text
stages): plain text, HTML, SRT, WebVTT and Markdown (the language check, plan_document, render),
.docx and .odt files (as base64: the package read, its paragraphs planned as HTML, the file
rebuilt), and LibreTranslate's routes (the form as the front door passes it on, source "auto", parsing,
plan, render; and /detect). The model is not called: each sentence's "translation" is its masked
input, every placeholder token included, which is what render() finds hardest to put back.
Inputs are the adversarial cases (tests/adversarial.py) and Hypothesis texts made of long runs of
the same pieces. The budget's deadline is off while measuring, so the report shows what an input
costs, not where the deadline stopped it. The report (fuzz.json in the run's own folder,
bench/results/runs/<date>-<commit>/, and a table) names the slowest input per entry point, its time
and its cost per character.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import HypothesisException

from bench.common import run_folder, writable
from bench.signature import signature
from handlers.errors import Refused
from handlers.handler_config import HandlerConfig
from handlers.text.documents import DocumentFormat, plan_document
from handlers.text.glossary import Glossary
from handlers.text.scripts import check_language
from handlers.wire.envelopes import read_body
from handlers.wire.errors import InvalidRequest
from tests.adversarial import (
    ENTRIES,
    LINE_BREAKS,
    MAX_CHARS,
    OFFICE_ENTRIES,
    REPEATS,
    RUNS,
    Case,
    Entry,
    as_request_text,
    cases,
    office_body,
    office_file,
)

CONFIG = HandlerConfig()
BUDGET_SECONDS = getattr(CONFIG, "text_budget_ms", 2000) / 1000
# A request's glossary at its bounds (256 entries of up to 100 characters) whose terms share long
# prefixes with the runs of "a" above: the alternation of terms is tried at every position.
GLOSSARY = Glossary({"a" * (3 + index % 96) + chr(0x4E00 + index): "term" for index in range(256)})


@dataclass(frozen=True)
class Measured:
    entry: str
    shape: str
    chars: int
    seconds: float  # float("inf") when an isolated run was killed
    outcome: str  # "ok", or the refusal it got (a 4xx: Unparsable, a limit, ...)
    head: str  # the input's first characters, repr()

    @property
    def us_per_char(self) -> float:
        return self.seconds * 1e6 / max(self.chars, 1)


def run_entry(entry: str, text: str) -> str:
    """One input through an entry point's text stages; "ok" or the refusal's message."""
    try:
        if entry == "libretranslate":
            _libretranslate(text)
        else:
            fmt: DocumentFormat = entry  # type: ignore[assignment]
            document = plan_document(text, fmt, GLOSSARY)
            # As plan_request: a file's paragraphs (its HTML) are what the language check reads.
            check_language(text if document.office is None else document.office.html, "text")
            document.render(document.model_inputs)
    except (Refused, InvalidRequest) as refusal:
        return f"{type(refusal).__name__}: {str(refusal)[:120]}"
    return "ok"


def _libretranslate(text: str) -> None:
    q = text.encode("utf-8", "surrogatepass")
    for route, fmt in (("translate", b"text"), ("translate", b"html"), ("detect", b"text")):
        form = {"libretranslate": route.encode(), "q": q, "source": b"auto", "target": b"en", "format": fmt}
        envelope, payload = read_body(form)
        if envelope.answer_at_once(payload, CONFIG) is not None:
            continue
        request = envelope.parse(payload, CONFIG)
        for source in request.texts:
            document = plan_document(source, request.text_format)
            document.render(document.model_inputs)


def measure(entry: str, shape: str, text: str) -> Measured:
    start = time.perf_counter()
    outcome = run_entry(entry, text)
    return Measured(entry, shape, len(text), time.perf_counter() - start, outcome, repr(text[:60]))


def remeasured(result: Measured, text: str) -> Measured:
    """The faster of two runs: the machine is shared, and one stall must not fail the campaign."""
    again = measure(result.entry, result.shape, text)
    return again if again.seconds < result.seconds else result


# Hypothesis: texts made of long runs of the adversarial pieces, up to the documented limit.
PIECES = [*RUNS.values(), *REPEATS.values(), *LINE_BREAKS, "你好", "。", "a" * 40, "+++\n", "```\n"]
long_runs = st.lists(st.tuples(st.sampled_from(PIECES), st.integers(1, 600)), min_size=1, max_size=8).map(
    lambda runs: "".join(piece * count for piece, count in runs)[:MAX_CHARS]
)
texts = long_runs | st.text(max_size=200)


def hypothesis_worst(entry: Entry, examples: int, budget: float) -> tuple[Measured | None, str]:
    """The slowest input Hypothesis found for one entry point, and "" or why Hypothesis failed."""
    worst: list[Measured] = []

    @settings(
        max_examples=examples,
        deadline=timedelta(seconds=budget),
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(text=texts)
    def explore(text: str) -> None:
        if entry in OFFICE_ENTRIES:  # the text as a file's paragraphs
            text = as_request_text(office_file(entry, office_body(entry, text)))
        result = measure(entry, "hypothesis", text)
        if not worst or result.seconds > worst[0].seconds:
            worst[:] = [result]

    try:
        explore()
    except HypothesisException as error:  # DeadlineExceeded, FlakyFailure: reported, and the run fails
        return (worst[0] if worst else None), f"{type(error).__name__}: {str(error)[:200]}"
    return (worst[0] if worst else None), ""


def _worker(connection: Connection) -> None:
    while True:
        entry, shape, text = connection.recv()
        connection.send(measure(entry, shape, text))


class Isolated:
    """Runs each case in a worker process, killed (and replaced) when a case passes `timeout`."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.context = multiprocessing.get_context("fork")
        self._start()

    def _start(self) -> None:
        self.connection, child = self.context.Pipe()
        self.process = self.context.Process(target=_worker, args=(child,), daemon=True)
        self.process.start()

    def __call__(self, case: Case) -> Measured:
        self.connection.send((case.entry, case.shape, case.text))
        if self.connection.poll(self.timeout):
            result: Measured = self.connection.recv()
            return result
        self.process.kill()
        self.process.join()
        self._start()
        return Measured(
            case.entry,
            case.shape,
            len(case.text),
            float("inf"),
            f"killed after {self.timeout:g} s",
            repr(case.text[:60]),
        )

    def close(self) -> None:
        self.process.kill()
        self.process.join()


def campaign(
    size: int = MAX_CHARS,
    examples: int = 100,
    budget: float = BUDGET_SECONDS,
    isolate: float | None = None,
    progress: Callable[[Measured], None] | None = None,
) -> dict[str, Any]:
    """Every adversarial case (texts of at most `size` characters), then `examples` Hypothesis texts
    per entry point; the slowest per entry point, and whether every input stayed within `budget`."""
    worst: dict[str, Measured] = {}
    counts = dict.fromkeys(ENTRIES, 0)
    problems: dict[str, str] = {}
    isolated = Isolated(isolate) if isolate else None
    started = time.perf_counter()
    try:
        for case in cases(size):
            result = isolated(case) if isolated else measure(case.entry, case.shape, case.text)
            if isolated is None and result.seconds > budget:
                result = remeasured(result, case.text)
            counts[case.entry] += 1
            if progress is not None:
                progress(result)
            if case.entry not in worst or result.seconds > worst[case.entry].seconds:
                worst[case.entry] = result
    finally:
        if isolated is not None:
            isolated.close()
    if examples and isolated is None:
        for entry in ENTRIES:
            found, problem = hypothesis_worst(entry, examples, budget)
            counts[entry] += examples
            if problem:
                problems[entry] = problem
            if found is not None and found.seconds > worst[entry].seconds:
                worst[entry] = found
    over = sorted(entry for entry, result in worst.items() if result.seconds > budget) + sorted(problems)
    stamp = signature(shlex.join(["python", "-m", "tests.fuzz_text", *sys.argv[1:]]))
    return {
        "date": stamp["date"],
        "machine": stamp["machine"],
        "signature": stamp,
        "budget_seconds": budget,
        "max_chars": size,
        "hypothesis_examples_per_entry": examples if isolated is None else 0,
        "isolated_timeout_seconds": isolate,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "passed": not over,
        "over_budget": sorted(set(over)),
        "hypothesis_problems": problems,
        "entries": {
            entry: {
                **{key: value for key, value in asdict(worst[entry]).items() if key != "seconds"},
                "seconds": _finite(worst[entry].seconds),
                "us_per_char": _finite(round(worst[entry].us_per_char, 2)),
                "inputs": counts[entry],
            }
            for entry in ENTRIES
            if entry in worst
        },
    }


def table(report: dict[str, Any]) -> str:
    rows = [f"{'entry':<15} {'inputs':>6} {'seconds':>9} {'us/char':>9} {'chars':>6}  slowest input"]
    for entry, row in report["entries"].items():
        seconds = row["seconds"] if row["seconds"] is not None else float("inf")
        per_char = row["us_per_char"] if row["us_per_char"] is not None else float("inf")
        cost = f"{seconds:>9.4f} {per_char:>9.2f} {row['chars']:>6}"
        rows.append(f"{entry:<15} {row['inputs']:>6} {cost}  {row['shape']}")
    verdict = "within" if report["passed"] else "OVER"
    budget, wall = report["budget_seconds"], report["wall_seconds"]
    rows.append(f"{verdict} the budget of {budget:g} s per input ({wall} s in all)")
    return "\n".join(rows)


def _finite(value: float) -> float | None:
    return None if value == float("inf") else value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--examples", type=int, default=100, help="Hypothesis examples per entry point")
    parser.add_argument("--size", type=int, default=MAX_CHARS, help="characters per adversarial text")
    parser.add_argument("--budget", type=float, default=BUDGET_SECONDS, help="seconds one input may take")
    parser.add_argument(
        "--isolate",
        type=float,
        default=None,
        help="run each case in a process killed after this many seconds",
    )
    parser.add_argument("--output", type=Path, default=run_folder() / "fuzz.json")
    parser.add_argument("--verbose", action="store_true", help="print every case slower than 0.1 s")
    args = parser.parse_args(argv)

    def progress(result: Measured) -> None:
        if args.verbose and result.seconds > 0.1:
            print(f"  {result.seconds:9.3f} s  {result.entry:<15} {result.shape}", flush=True)

    report = campaign(args.size, args.examples, args.budget, args.isolate, progress)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    writable(args.output).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(table(report))
    print(f"report: {args.output}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
