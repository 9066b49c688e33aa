"""Where decode time goes: torch.profiler over one decode unit, top operators by self CPU time.

    python -m bench.profile [--model synthetic] [--variant int8] [--decoder fast|generate]
                            [--beams 4] [--batch 16] [--top 25]

Writes profile-<decoder>-<variant>-beam<B>-batch<N>.txt into the run's folder (its signature, then the table).
On the stand-in, outputs are forced to reference lengths as in every other benchmark.
"""

from __future__ import annotations

from pathlib import Path

from torch.profiler import ProfilerActivity, profile

from bench.cli import BenchCli
from bench.common import is_standin, now, sample_sentences, writable
from bench.ladder_rungs import options_for
from handlers.handler_config import DECODER_NAMES, DecoderName, HandlerConfig, Variant
from handlers.model.translator import Translator
from handlers.scheduling.run import translate_ids


def profile_unit(
    model_dir: Path, variant: Variant, decoder: DecoderName, beams: int, batch: int, top: int
) -> str:
    config = HandlerConfig(variant=variant, decoder=decoder, threads=1)
    translator = Translator.load(model_dir, config.model)
    sentences = sample_sentences(translator.tokenizer, batch)
    options = options_for(sentences, beams, is_standin(model_dir))  # stand-in: each its reference length
    ids = translator.encode([s.source for s in sentences])
    translate_ids(translator, ids, options)  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        translate_ids(translator, ids, options)
    table: str = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=top)
    return table


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("profile", __doc__, model="synthetic", results_dir=True)
    cli.parser.add_argument("--variant", default="int8", choices=["fp32", "int8"])
    cli.parser.add_argument("--decoder", default="fast", choices=DECODER_NAMES)
    cli.parser.add_argument("--beams", type=int, default=4)
    cli.parser.add_argument("--batch", type=int, default=16)
    cli.parser.add_argument("--top", type=int, default=25)
    args = cli.parse(argv)
    model_dir = cli.model_dir()
    table = profile_unit(model_dir, args.variant, args.decoder, args.beams, args.batch, args.top)
    # A text file, not a result JSON: its header carries the signature.
    stamp = cli.signature()
    facts = stamp["machine"]
    header = (
        f"# torch.profiler, {args.decoder} decoder, {args.variant}, beam {args.beams}, batch {args.batch}, "
        f"1 thread\n# {now()}, {facts['cpu']}, torch {facts['torch']}, model {model_dir.name}"
        f"{' (stand-in, reference lengths)' if is_standin(model_dir) else ''}\n"
        f"# {stamp['command']}, commit {stamp['commit']}, torchserve {stamp['torchserve']}\n"
    )
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = writable(
        args.results_dir / f"profile-{args.decoder}-{args.variant}-beam{args.beams}-batch{args.batch}.txt"
    )
    path.write_text(header + table + "\n")
    print(header + table)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
