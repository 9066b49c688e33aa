"""`python -m batch translate INPUT OUTPUT --archive model_store/zh_en_int8.mar`: translate a corpus.

INPUT is a file, a directory or a glob of .txt, .html, .srt, .vtt, .md, .jsonl and .parquet files;
OUTPUT a directory, where each input gets its output file at the same relative path, with the same
structure, and a sidecar `.batch.json` (model, version, variant, stand-in). Shards of finished
results are kept under OUTPUT/.batch/: rerun the same command to finish a job that was stopped.
docs/BATCH.md says when to use this rather than the server, and how to run it on a Ray cluster.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batch.archive_model import open_archive
from batch.engines import LocalEngine, RayEngine, ray_session, workers_for
from batch.formats import InputError, TableColumns
from batch.job import JobSpec, Summary, run_job
from batch.shards import ShardBudget
from batch.units import JobOptions
from handlers.text.glossary import GlossaryFileError, load_tsv

DEFAULT_ARCHIVE = Path("model_store/zh_en_int8.mar")


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(
        prog="python -m batch", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = main.add_subparsers(dest="command", required=True)
    translate = commands.add_parser("translate", help="translate files into OUTPUT")
    translate.add_argument("input", help="a file, a directory or a glob (quote it)")
    translate.add_argument("output", type=Path, help="the output directory")
    translate.add_argument("--archive", type=Path, default=DEFAULT_ARCHIVE, help="a .mar or unpacked archive")
    translate.add_argument("--beams", type=int, help="num_beams, as the API's (default: the archive's)")
    translate.add_argument(
        "--alternatives", type=int, default=0, help="next-best translations per row (JSONL and Parquet only)"
    )
    translate.add_argument(
        "--glossary", type=Path, help="a TSV (source<TAB>target); wins over the archive's own glossary"
    )
    translate.add_argument("--column", default="text", help="the text column of JSONL and Parquet rows")
    translate.add_argument(
        "--output-column", default="translation", help="the column the translation goes to"
    )
    translate.add_argument(
        "--engine",
        choices=("local", "ray"),
        help="processes on this host (the default without --address) or Ray Data (the default with it)",
    )
    translate.add_argument(
        "--address",
        help="an existing Ray cluster: HEAD:6379, or auto on one of its nodes (default: local Ray)",
    )
    translate.add_argument(
        "--workers",
        "--actors",
        type=int,
        help="worker processes or Ray actors, each with the model (default: CPUs / archive threads)",
    )
    translate.add_argument(
        "--shard-chars", type=int, default=ShardBudget.max_chars, help="characters per shard"
    )
    translate.add_argument("--shard-units", type=int, default=ShardBudget.max_units, help="units per shard")
    return main


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        glossary = () if args.glossary is None else tuple(load_tsv(args.glossary, 10**6).terms.items())
        spec = JobSpec(
            args.input,
            args.output,
            args.archive,
            JobOptions(args.beams, args.alternatives, glossary),
            TableColumns(args.column, args.output_column),
            ShardBudget(args.shard_chars, args.shard_units),
        )
        threads = open_archive(spec.archive).served_config.threads
        if (args.engine or ("ray" if args.address else "local")) == "local":
            if args.address:
                raise ValueError("--address names a Ray cluster: use it with --engine ray")
            workers = args.workers or workers_for(threads)
            summary = run_job(spec, LocalEngine(spec.archive, spec.options, workers))
        else:
            with ray_session(args.address):
                summary = run_job(spec, RayEngine(spec.archive, spec.options, threads, args.workers))
    except (InputError, GlossaryFileError, FileNotFoundError, ValueError) as error:
        print(f"batch: {error}", file=sys.stderr)
        return 2
    except ConnectionError as error:  # ray.init(address=...) found no cluster there
        print(f"batch: {error}; on a cluster node, --address auto finds the local one", file=sys.stderr)
        return 2
    return report(summary)


def report(summary: Summary) -> int:
    if summary.identity.get("standin"):
        print(f"batch: {summary.identity['model']} is the {summary.identity['notice']}", file=sys.stderr)
    print(
        f"batch: {len(summary.written)} files written, {summary.sentences} sentences, "
        f"{summary.shards} shards ({summary.shards_skipped} done by an earlier run)"
    )
    if summary.failed:
        print(f"batch: {len(summary.failed)} files failed:", file=sys.stderr)
        for message in summary.failed.values():
            print(f"  {message}", file=sys.stderr)
        return 1
    return 0
