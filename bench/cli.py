"""The command line every bench shares: `python -m bench.<name>`, its --model, --strict and
--results-dir where the command has them, the model resolved once, progress on stderr under the
command's name, and results written with their signature (bench.signature).

    cli = BenchCli("row_budget", __doc__, model="synthetic", results_dir=True)
    cli.parser.add_argument("--sentences", type=int, default=64)
    args = cli.parse(argv)
    path = cli.write("row_budget", measure(cli.model_dir(), args.sentences))
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import load_model_dir, run_folder, write_result
from bench.signature import Signature, command_line, signature

MODEL_HELP = "hub id, directory or synthetic (the full-size stand-in), as for archive.build (%(default)s)"


@dataclass(frozen=True)
class Progress:
    """Progress lines on stderr, each under the command's name; stdout is kept for the results."""

    name: str

    def __call__(self, message: str) -> None:
        print(f"[{self.name}] {message}", file=sys.stderr, flush=True)


class BenchCli:
    """One bench command: its parser with the shared flags, then what the parsed line gives."""

    def __init__(
        self,
        name: str,
        doc: str | None,
        *,
        model: str | None = None,
        strict: bool = False,
        results_dir: bool = False,
    ) -> None:
        """`model`: --model's default (None: no --model); `strict`, `results_dir`: add those flags."""
        self.name = name
        self.say = Progress(name)
        self.parser = argparse.ArgumentParser(
            prog=command_line(name, []),
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if model is not None:
            self.add_model(self.parser, model)
        if strict:
            self.parser.add_argument(
                "--strict", action="store_true", help="fail instead of falling back to the stand-in"
            )
        if results_dir:
            self.parser.add_argument(
                "--results-dir",
                type=Path,
                default=None,  # parse() names this run's folder: no git calls for a --help
                help="where results go (default: this run's own folder, bench/results/runs/<date>-<commit>)",
            )
        self.argv: list[str] = []
        self._args: argparse.Namespace | None = None
        self._model_dir: Path | None = None

    def add_model(
        self, where: argparse._ActionsContainer, default: str | None, help: str = MODEL_HELP
    ) -> None:
        """--model on the parser or one of its groups (bench.bleu: one of several exclusive sources)."""
        where.add_argument("--model", default=default, help=help)

    def parse(self, argv: Sequence[str] | None = None) -> argparse.Namespace:
        """`argv` (None: this process's arguments), parsed and kept for the signature."""
        self.argv = list(sys.argv[1:] if argv is None else argv)
        self._args = self.parser.parse_args(self.argv)
        if getattr(self._args, "results_dir", False) is None:
            self._args.results_dir = run_folder()
        self._model_dir = None
        return self._args

    @property
    def args(self) -> argparse.Namespace:
        if self._args is None:
            raise RuntimeError(f"{self.name}: parse() the command line first")
        return self._args

    @property
    def command(self) -> str:
        """The parsed line as `python -m bench.<name> <args>`: what a result's signature records."""
        return command_line(self.name, self.argv)

    def model_dir(self) -> Path:
        """--model resolved once (a hub id downloaded, `synthetic` built), honouring --strict if given."""
        if self._model_dir is None:
            self._model_dir = load_model_dir(self.args.model, getattr(self.args, "strict", False))
        return self._model_dir

    def signature(self) -> Signature:
        return signature(self.command)

    def write(self, name: str, payload: dict[str, Any], results_dir: Path | None = None) -> Path:
        """<results dir>/<name>.json signed with this command line; the directory defaults to
        --results-dir, or a new run folder for a command without that flag."""
        if results_dir is None:
            results_dir = getattr(self.args, "results_dir", None)
        return write_result(name, payload, results_dir, self.command)
