"""The fast decoder against generate() on the full-size model: sentences that differ, batch invariance.

    python -m bench.exactness [--model synthetic] [--sentences 500] [--variants fp32 int8] [--beams 1 4]

For each variant and beam count, every sentence is decoded alone by generate() with the
non-target ids suppressed (the reference) and by the fast decoder; a difference is a sentence
whose token ids differ, reported with the step where they first part (floating-point near-ties
are the only expected cause). Batch invariance: the fast decoder in batches of 16 against the
same sentences alone (0 expected: int8 quantizes each row on its own range, handlers.row_int8).
On the stand-in every output is forced to its reference length. Writes bench/results/exactness.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bench.common import RESULTS_DIR, is_standin, load_model_dir, sample_sentences, write_result
from handlers.batching import pad_batch
from handlers.decoding import FastDecoder, GenerateDecoder, RowLimits
from handlers.handler_config import HandlerConfig, Variant
from handlers.request_parsing import GenerationOptions
from handlers.translator import Translator

BATCH = 16


def compare(model_dir: Path, variant: Variant, beams: int, count: int) -> dict[str, Any]:
    translator = Translator.load(model_dir, HandlerConfig(variant=variant, warmup=False))
    fast = translator.decoder
    assert isinstance(fast, FastDecoder)
    # The reference needs the full output layer, which an int8 fast load releases: load it as generate.
    reference_translator = Translator.load(
        model_dir, HandlerConfig(variant=variant, decoder="generate", warmup=False)
    )
    bias = reference_translator.model.final_logits_bias
    suppressed = torch.ones(bias.shape[-1], dtype=torch.bool)
    suppressed[fast.output.ids] = False
    bias[0, suppressed] = -torch.inf
    reference = GenerateDecoder(reference_translator.model, fast.rules)

    sentences = sample_sentences(translator.tokenizer, count)
    ids = translator.encode([s.source for s in sentences])
    forced = is_standin(model_dir)
    limits = [
        RowLimits(s.reference_tokens, s.reference_tokens)
        if forced
        else RowLimits(translator.new_token_cap(GenerationOptions(), len(row)))
        for s, row in zip(sentences, ids, strict=True)
    ]
    pad = translator.tokenizer.pad_token_id
    alone, expected, parted = [], [], []
    started = time.perf_counter()
    for index, (row, limit) in enumerate(zip(ids, limits, strict=True)):
        input_ids, mask = pad_batch([row], pad)
        ours, theirs = (
            fast.decode(input_ids, mask, [limit], beams)[0],
            reference.decode(input_ids, mask, [limit], beams)[0],
        )
        alone.append(ours)
        expected.append(theirs)
        if ours != theirs:
            parted.append(first_difference(ours, theirs))
        if (index + 1) % 50 == 0:
            print(
                f"[exactness] {variant} beams={beams}: {index + 1}/{count}, {len(parted)} differ, "
                f"{time.perf_counter() - started:.0f}s",
                file=sys.stderr,
                flush=True,
            )
    batched: list[list[int]] = []
    for start in range(0, len(ids), BATCH):
        input_ids, mask = pad_batch(ids[start : start + BATCH], pad)
        batched += fast.decode(input_ids, mask, limits[start : start + BATCH], beams)
    changed = sum(a != b for a, b in zip(alone, batched, strict=True))
    return {
        "variant": variant,
        "beams": beams,
        "sentences": count,
        "differ_from_generate": len(parted),
        "first_difference_at_step": parted,
        "batch_of_16_changes": changed,
        "batch_of_16_changes_share": round(changed / count, 4),
        "seconds": round(time.perf_counter() - started, 1),
    }


def first_difference(ours: list[int], theirs: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), len(ours))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="synthetic", help="hub id, directory or synthetic")
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--variants", nargs="+", default=["int8", "fp32"], choices=["int8", "fp32"])
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    model_dir = Path(args.model) if Path(args.model).is_dir() else load_model_dir(args.model)
    runs = [compare(model_dir, v, b, args.sentences) for v in args.variants for b in args.beams]
    for run in runs:
        print(
            f"{run['variant']} beam {run['beams']}: {run['differ_from_generate']}/{run['sentences']} differ "
            f"from generate(); a batch of 16 changes {run['batch_of_16_changes']} "
            f"({run['batch_of_16_changes_share']:.1%})"
        )
    path = write_result(
        "exactness",
        {
            "model": str(model_dir),
            "standin": is_standin(model_dir),
            "reference_lengths": is_standin(model_dir),
            "runs": runs,
        },
        args.results_dir,
    )
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
