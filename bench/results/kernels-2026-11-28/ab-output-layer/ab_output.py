"""Whole decodes, output layer on int8_linear (ours) against fbgemm (before), interleaved rounds."""
import json, statistics, sys, time
from pathlib import Path
import torch
from bench.common import is_standin, sample_sentences
from bench.cli import BenchCli
from bench.hot_path import row_layers
from bench.latency import options_for
from bench.signature import signature
from handlers.handler_config import HandlerConfig
from handlers.model import int8_linear, native
from handlers.model.native_rows import NativeRowOps
from handlers.model.translator import Translator
from archive.model_source import resolve_model_dir
from archive.tatoeba import REPO_ROOT

torch.set_num_threads(1)
model_dir = resolve_model_dir("synthetic", REPO_ROOT / "build" / "models", "full", False)
standin = is_standin(model_dir)
translator = Translator.load(model_dir, HandlerConfig(variant="int8", threads=1, warmup=False))
layers = row_layers(translator)
kernels = NativeRowOps(native.load("auto"))
def switch(max_columns):
    int8_linear.MAX_COLUMNS = max_columns
    for layer in layers:
        layer.use(layer.weight(), kernels, True)
sentences = sample_sentences(translator.tokenizer, 32)
ways = {"output on fbgemm": 8192, "output on int8_linear": None}
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
result = {"signature": dict(signature("python bench/results/kernels-2026-11-28/ab-output-layer/ab_output.py " + " ".join(sys.argv[1:]))), "rounds": rounds, "rows": []}
for shape, groups in (("batch of 16", [sentences[i:i+16] for i in range(0, 32, 16)]), ("one sentence", [[s] for s in sentences[:8]])):
    for beams in (1, 4):
        def run():
            return [translator.generate(translator.encode([s.source for s in g]), options_for(g, beams, standin, True)) for g in groups]
        outs = {}
        for name, mc in ways.items():
            switch(mc); outs[name] = run()
        assert outs["output on fbgemm"] == outs["output on int8_linear"], "the same translations"
        times = {name: [] for name in ways}
        for _ in range(rounds):
            for name, mc in ways.items():
                switch(mc); s = time.process_time(); run(); times[name].append(time.process_time() - s)
        n = sum(len(g) for g in groups)
        row = {"shape": shape, "beams": beams, "sentences": n, "seconds": times,
               "ratio_of_medians": statistics.median(times["output on fbgemm"]) / statistics.median(times["output on int8_linear"]),
               "ratio_of_minima": min(times["output on fbgemm"]) / min(times["output on int8_linear"])}
        result["rows"].append(row)
        print(f"{shape}, beam {beams}: int8_linear output / fbgemm output speed: median {row['ratio_of_medians']:.3f}x, min {row['ratio_of_minima']:.3f}x", flush=True)
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
(out / "ab-output-layer.json").write_text(json.dumps(result, indent=2) + "\n")
