"""The decoder's hot path as it is against the paths it replaced, in our engine.

    python -m bench.hot_path [--model synthetic] [--sentences 64] [--repeats 3]

One process, 1 thread, the int8 fast decoder: the same Tatoeba sentences (at reference lengths on
the stand-in) decoded in batches of 16 and one at a time, greedy and beam 4, three ways:
- torch: the per-row int8 mapping in torch's operators around fbgemm's dynamic matmul (which finds
  the mapped rows' range itself), torch.topk for a beam's candidates, torch.argmax for greedy's
  token, and a beam reorder that
  copies every row of every layer's cache;
- mapped: the path before int8_linear: the C kernels for the mapping around fbgemm's matmul told
  the unit scale (handlers.model.row_int8.unit_scale_product), the C top-k (and, since
  2026-11-28, the C argmax) and the in-place reorder that copies only the rows whose beam came
  from another row;
- ours: as mapped, with every int8 layer one int8_linear call (handlers.model.int8_linear), the
  output layer included;
- ours, output on fbgemm: as ours with the output layer on fbgemm's matmul, as it ran until
  2026-11-28 (int8_linear.MAX_COLUMNS 8,192);
and CTranslate2 int8 with its vocabulary map after them as the yardstick. All run interleaved
`repeats` times, the fastest round of each kept (CPU time). Every way must translate every sentence
the same, or the command fails. Writes hot-path.json into the run's folder, prints its table.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from bench import ctranslate2_peer
from bench.cli import BenchCli
from bench.common import Sentence, is_standin, sample_sentences
from bench.latency import options_for
from handlers.handler_config import HandlerConfig
from handlers.model import int8_linear, native, search, top_k
from handlers.model.native_rows import NativeRowOps, RowOps, TorchRowOps
from handlers.model.row_int8 import RowInt8Linear, dynamic_product, unit_scale_product
from handlers.model.self_attention_cache import LayerCache, reorder
from handlers.model.translator import Translator
from handlers.scheduling.run import translate_ids

BATCH = 16
TopK = Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]
Reorder = Callable[[Sequence[LayerCache], torch.Tensor], None]
Product = Callable[[torch.Tensor, Any], torch.Tensor]
ArgMax = Callable[[torch.Tensor], torch.Tensor]
# bool: each layer one int8_linear call where it fits; int | None: the widest layer it may take
Way = tuple[RowOps, Product, TopK, ArgMax, Reorder, bool, int | None]


def _torch_top_k(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    found = torch.topk(values, k, dim=-1)
    return found.values, found.indices


def _torch_arg_max(values: torch.Tensor) -> torch.Tensor:
    return values.argmax(-1)


def _copy_reorder(caches: Sequence[LayerCache], rows: torch.Tensor) -> None:
    for cache in caches:
        cache.select(rows)


def row_layers(translator: Translator) -> list[RowInt8Linear]:
    """Every int8 layer the decode runs: the model's, and the fused copies the fast decoder holds."""
    decoder: Any = translator.decoder
    roots = [translator.model, decoder.output, decoder.cross_kv.joined, *(p.joined for p in decoder.self_qkv)]
    found = {id(m): m for root in roots for m in root.modules() if isinstance(m, RowInt8Linear)}
    return list(found.values())


def measure(model_dir: Path, count: int, repeats: int, say: Callable[[str], None]) -> dict[str, Any]:
    torch.set_num_threads(1)
    standin = is_standin(model_dir)
    translator = Translator.load(model_dir, HandlerConfig(variant="int8", threads=1, warmup=False))
    peer = ctranslate2_peer.PeerTranslator(model_dir, ctranslate2_peer.convert(model_dir), use_vmap=True)
    layers = row_layers(translator)
    # The widest path this CPU runs, named, so that "ours" is its int8_linear on every layer it fits.
    widest = native.supported(native.open_library())[-1].name
    kernels = NativeRowOps(native.load(widest))  # type: ignore[arg-type]
    search_c = (top_k.top_k, top_k.arg_max)
    paths: dict[str, Way] = {
        "torch": (TorchRowOps(), dynamic_product, _torch_top_k, _torch_arg_max, _copy_reorder, False, None),
        "mapped": (kernels, unit_scale_product, *search_c, reorder, False, None),
        "ours, output on fbgemm": (kernels, unit_scale_product, *search_c, reorder, True, 8192),
        "ours": (kernels, unit_scale_product, *search_c, reorder, True, None),
    }
    sentences = sample_sentences(translator.tokenizer, count)

    def switch(path: Way) -> None:
        """Every layer repacked for the way (the same int8 values), outside the timed decode."""
        ops, product, chosen_top_k, chosen_arg_max, chosen_reorder, one_call, max_columns = path
        int8_linear.MAX_COLUMNS = max_columns
        for layer in layers:
            layer.use(layer.weight(), ops, one_call)
            layer.product = product
        setattr(search, "top_k", chosen_top_k)  # noqa: B010  # the names the search looks them up by
        setattr(search, "arg_max", chosen_arg_max)  # noqa: B010
        setattr(search, "reorder", chosen_reorder)  # noqa: B010

    def ours(groups: Sequence[list[Sentence]], beams: int) -> list[list[list[str]]]:
        return [
            translate_ids(
                translator, translator.encode([s.source for s in g]), options_for(g, beams, standin, True)
            )
            for g in groups
        ]

    def theirs(groups: Sequence[list[Sentence]], beams: int) -> None:
        for g in groups:
            lengths = ctranslate2_peer.decoding_lengths([s.reference_tokens for s in g], standin)
            peer.translate([s.source for s in g], beams, lengths)

    rows = []
    for shape, groups in (
        (f"batch of {BATCH}", [sentences[i : i + BATCH] for i in range(0, len(sentences), BATCH)]),
        ("one sentence", [[s] for s in sentences[:BATCH]]),
    ):
        for beams in (1, 4):
            say(f"{shape}, beam {beams}: {repeats} interleaved rounds")
            outputs = {}
            for name, path in paths.items():
                switch(path)
                outputs[name] = ours(groups, beams)  # also the warm-up
            for name in paths:
                if outputs[name] != outputs["torch"]:
                    raise SystemExit(f"{shape}, beam {beams}: the {name} way translates unlike torch's")
            theirs(groups, beams)
            seconds: dict[str, list[float]] = {name: [] for name in [*paths, "ct2+map"]}
            for _ in range(repeats):
                for name, path in paths.items():
                    switch(path)
                    start = time.process_time()
                    ours(groups, beams)
                    seconds[name].append(time.process_time() - start)
                start = time.process_time()
                theirs(groups, beams)
                seconds["ct2+map"].append(time.process_time() - start)
            done = sum(len(g) for g in groups)
            rate = {name: done / min(times) for name, times in seconds.items()}
            rows.append({"shape": shape, "beams": beams, "sentences": done, "sentences_per_s": rate})
    return {"model": model_dir.name, "standin": standin, "repeats": repeats, "kernels": widest, "rows": rows}


def table(result: dict[str, Any]) -> str:
    lines = [
        "| shape | beams | torch, sent/s | mapped, sent/s | ours, output on fbgemm, sent/s | ours, sent/s "
        "| ours / mapped | ours / output on fbgemm | ours / torch | mapped / CT2 + map | ours / CT2 + map |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        rate = row["sentences_per_s"]
        before = rate.get("ours, output on fbgemm", float("nan"))  # results before 2026-11-28 have none
        lines.append(
            f"| {row['shape']} | {row['beams']} | {rate['torch']:.1f} | {rate['mapped']:.1f} | "
            f"{before:.1f} | {rate['ours']:.1f} | {rate['ours'] / rate['mapped']:.3f}x | "
            f"{rate['ours'] / before:.3f}x | "
            f"{rate['ours'] / rate['torch']:.3f}x | "
            f"{rate['mapped'] / rate['ct2+map']:.2f}x | {rate['ours'] / rate['ct2+map']:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("hot_path", __doc__, model="synthetic", results_dir=True)
    cli.parser.add_argument("--sentences", type=int, default=64)
    cli.parser.add_argument("--repeats", type=int, default=3)
    args = cli.parse(argv)
    result = measure(cli.model_dir(), args.sentences, args.repeats, cli.say)
    path = cli.write("hot-path", result)
    print(table(result))
    cli.say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
