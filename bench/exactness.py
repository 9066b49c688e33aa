"""The fast decoder against generate(), batch invariance (ours and CTranslate2's), int8 against fp32.

    python -m bench.exactness [--model synthetic] [--sentences 500] [--variants fp32 int8] [--beams 1 4]
                              [--peer-length 40 | --no-peer]

For each variant and beam count, every sentence is decoded alone by generate() with the
non-target ids suppressed (the reference) and by the fast decoder; a difference is a sentence
whose token ids differ, reported with the step where they first part (floating-point near-ties
are the only expected cause). The fast decoder runs in the served loop (handlers.scheduling.run:
admission and steps as a partition runs them). Batch invariance: 16 and 64 sentences submitted to
that loop at a time against the same sentences alone (0 expected: int8 quantizes each row on its own range,
handlers.model.row_int8). On the stand-in every output is forced to its reference length.

Agreement (both variants run): int8's ids alone against fp32's alone, sentence by sentence. On the
stand-in's random weights this measures how often int8 rounding flips a near-tie, not quality.

Peer invariance: CTranslate2 int8 with its target-side vocabulary map, as its users run it
(bench.ctranslate2_peer), and our int8, each sentence alone against batches of 16, every row
decoding exactly --peer-length tokens (CTranslate2 takes one length per batch, so per-row reference
lengths cannot be forced on it). Writes exactness.json into the run's folder.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from bench.cli import BenchCli, Progress
from bench.common import is_standin, sample_sentences
from handlers.handler_config import HandlerConfig, Variant
from handlers.model.batching import pad_batch
from handlers.model.decoding import FastDecoder, GenerateDecoder, RowLimits, make_decoder
from handlers.model.options import GenerationOptions
from handlers.model.translator import Translator
from handlers.scheduling.policy import DecodePolicy
from handlers.scheduling.run import decode_ids

BATCHES = (16, 64)
STANDIN_NOTE = (
    "stand-in with random weights: agreement counts near-ties that int8 rounding flips, not quality"
)

Rows = list[list[int]]
say = Progress("exactness")


def compare(model_dir: Path, variant: Variant, beams: int, count: int) -> tuple[dict[str, Any], Rows]:
    """The run's figures, and the fast decoder's ids for each sentence alone."""
    # One load: generate() is the reference, and a fast decoder is built over the same model
    # (make_decoder leaves it whole; only a server's load releases the layers the decoder copied).
    translator = Translator.load(
        model_dir, HandlerConfig(variant=variant, decoder="generate", warmup=False).model
    )
    fast = make_decoder("fast", translator.model, translator.tokenizer)
    assert isinstance(fast, FastDecoder)
    bias = translator.model.final_logits_bias
    suppressed = torch.ones(bias.shape[-1], dtype=torch.bool)
    suppressed[fast.output.ids] = False
    bias[0, suppressed] = -torch.inf
    reference = GenerateDecoder(translator.model, fast.rules)

    sentences = sample_sentences(translator.tokenizer, count)
    ids = translator.encode([s.source for s in sentences])
    forced = is_standin(model_dir)
    limits = [
        RowLimits(s.reference_tokens, s.reference_tokens)
        if forced
        else RowLimits(
            DecodePolicy.of(HandlerConfig(), translator).new_token_cap(GenerationOptions(), len(row))
        )
        for s, row in zip(sentences, ids, strict=True)
    ]
    pad = translator.tokenizer.pad_token_id
    served = Translator(translator.model, translator.tokenizer, translator.config, translator.info, fast)
    alone: Rows = []
    parted: list[int] = []
    started = time.perf_counter()
    for index, (row, limit) in enumerate(zip(ids, limits, strict=True)):
        input_ids, mask = pad_batch([row], pad)
        ours = decode_ids(served, [row], [limit], beams)[0][0]
        theirs = reference.generate(input_ids, mask, [limit], beams, 1)[0][0]
        alone.append(ours)
        if ours != theirs:
            parted.append(first_difference(ours, theirs))
        _say_every_50(f"{variant} beams={beams}", index, count, f"{len(parted)} differ", started)

    def batched(size: int) -> Rows:
        """`size` sentences submitted to the served loop at a time (its 64-row budget admits them)."""
        rows: Rows = []
        for start in range(0, len(ids), size):
            rows += [
                r[0]
                for r in decode_ids(served, ids[start : start + size], limits[start : start + size], beams)
            ]
        return rows

    run: dict[str, Any] = {
        "variant": variant,
        "beams": beams,
        "sentences": count,
        "differ_from_generate": len(parted),
        "first_difference_at_step": parted,
    }
    for size in BATCHES:
        changed = changes(alone, batched(size))
        run[f"batch_of_{size}_changes"] = changed
        run[f"batch_of_{size}_changes_share"] = round(changed / count, 4)
    run["seconds"] = round(time.perf_counter() - started, 1)
    return run, alone


def agreement(int8: Rows, fp32: Rows, beams: int) -> dict[str, Any]:
    """int8 against fp32, both decoded alone: identical sentences and the share of equal tokens."""
    equal = sum(a == b for x, y in zip(int8, fp32, strict=True) for a, b in zip(x, y, strict=False))
    positions = sum(max(len(x), len(y)) for x, y in zip(int8, fp32, strict=True))
    parted = [first_difference(x, y) for x, y in zip(int8, fp32, strict=True) if x != y]
    return {
        "beams": beams,
        "sentences": len(int8),
        "identical_sentences": len(int8) - len(parted),
        "identical_share": round((len(int8) - len(parted)) / len(int8), 4),
        "token_agreement": round(equal / positions, 4),
        "median_first_difference_step": sorted(parted)[len(parted) // 2] if parted else None,
    }


def peer_invariance(model_dir: Path, beams: int, count: int, length: int) -> list[dict[str, Any]]:
    """CTranslate2 int8 + map and our int8: alone against batches of 16, every row `length` tokens."""
    from bench import ctranslate2_peer

    peer = ctranslate2_peer.PeerTranslator(model_dir, ctranslate2_peer.convert(model_dir), use_vmap=True)
    lengths = {"min_decoding_length": length, "max_decoding_length": length}
    texts = [s.source for s in sample_sentences(peer.tokenizer, count)]

    def theirs(batch: Sequence[str]) -> list[list[str]]:
        return peer.translate_tokens(batch, beams, lengths)

    translator = Translator.load(model_dir, HandlerConfig(variant="int8", warmup=False).model)

    def ours(batch: Sequence[str]) -> Rows:
        ranked = decode_ids(
            translator, translator.encode(list(batch)), [RowLimits(length, length)] * len(batch), beams
        )
        return [r[0] for r in ranked]

    engines: list[tuple[str, Callable[[Sequence[str]], Sequence[list[Any]]]]] = [
        (f"CTranslate2 {ctranslate2_peer.version()} int8 + map", theirs),
        ("ours int8", ours),
    ]
    reports = []
    for engine, decode in engines:
        started = time.perf_counter()
        alone: list[list[Any]] = []
        for index, text in enumerate(texts):
            alone += decode([text])
            _say_every_50(f"{engine} beams={beams}", index, count, "alone", started)
        grouped = [row for start in range(0, count, 16) for row in decode(texts[start : start + 16])]
        changed = changes(alone, grouped)
        reports.append(
            {
                "engine": engine,
                "beams": beams,
                "sentences": count,
                "tokens_per_sentence": length,
                "batch_of_16_changes": changed,
                "batch_of_16_changes_share": round(changed / count, 4),
            }
        )
    return reports


def changes(alone: Sequence[list[Any]], batched: Sequence[list[Any]]) -> int:
    return sum(a != b for a, b in zip(alone, batched, strict=True))


def first_difference(ours: list[int], theirs: list[int]) -> int:
    """The first step where the rows differ; where one is a prefix of the other, where it ends."""
    shorter = min(len(ours), len(theirs))
    return next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), shorter)


def _say_every_50(label: str, index: int, count: int, status: str, started: float) -> None:
    if (index + 1) % 50 == 0:
        say(f"{label}: {index + 1}/{count}, {status}, {time.perf_counter() - started:.0f}s")


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("exactness", __doc__, model="synthetic", results_dir=True)
    cli.parser.add_argument("--sentences", type=int, default=500)
    cli.parser.add_argument("--variants", nargs="+", default=["int8", "fp32"], choices=["int8", "fp32"])
    cli.parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    cli.parser.add_argument("--peer-length", type=int, default=40, help="tokens per row in the peer runs")
    cli.parser.add_argument("--no-peer", action="store_true", help="leave CTranslate2's invariance out")
    args = cli.parse(argv)
    model_dir = cli.model_dir()
    runs, alone = [], {}
    for variant in args.variants:
        for beams in args.beams:
            run, alone[variant, beams] = compare(model_dir, variant, beams, args.sentences)
            runs.append(run)
    agreements = [
        agreement(alone["int8", beams], alone["fp32", beams], beams)
        for beams in args.beams
        if ("int8", beams) in alone and ("fp32", beams) in alone
    ]
    peer = (
        []
        if args.no_peer
        else [r for b in args.beams for r in peer_invariance(model_dir, b, args.sentences, args.peer_length)]
    )
    result = {
        "model": str(model_dir),
        "standin": is_standin(model_dir),
        "reference_lengths": is_standin(model_dir),
        "runs": runs,
        "int8_against_fp32": {"note": STANDIN_NOTE if is_standin(model_dir) else "", "runs": agreements},
        "peer_invariance": peer,
    }
    print(markdown(result))
    print(f"written to {cli.write('exactness', result)}")
    return 0


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"- {run['variant']} {run['beams']} beam(s): {run['differ_from_generate']} of {run['sentences']} "
        f"differ from generate(); batches of 16 change {run['batch_of_16_changes']}, "
        f"of 64 change {run['batch_of_64_changes']}"
        for run in result["runs"]
    ]
    lines += [
        f"- int8 against fp32, {a['beams']} beam(s): {a['identical_sentences']} of {a['sentences']} "
        f"identical, token agreement {a['token_agreement']:.1%} ({result['int8_against_fp32']['note']})"
        for a in result["int8_against_fp32"]["runs"]
    ]
    lines += [
        f"- {p['engine']}, {p['beams']} beam(s), {p['tokens_per_sentence']} tokens: batches of 16 change "
        f"{p['batch_of_16_changes']} of {p['sentences']}"
        for p in result["peer_invariance"]
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
