"""Whole greedy decodes, the C argmax (top_k.arg_max, ours) against torch.argmax (before), interleaved rounds."""
import json, statistics, sys, time
from pathlib import Path
import torch
from bench.common import is_standin, sample_sentences
from bench.latency import options_for
from bench.signature import signature
from handlers.handler_config import HandlerConfig
from handlers.model import search, top_k
from handlers.model.translator import Translator
from archive.model_source import resolve_model_dir
from archive.tatoeba import REPO_ROOT

torch.set_num_threads(1)
model_dir = resolve_model_dir("synthetic", REPO_ROOT / "build" / "models", "full", False)
standin = is_standin(model_dir)
translator = Translator.load(model_dir, HandlerConfig(variant="int8", threads=1, warmup=False))
sentences = sample_sentences(translator.tokenizer, 64)
ways = {"torch.argmax": lambda v: v.argmax(-1), "C argmax": top_k.arg_max}
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
result = {"signature": dict(signature("python " + " ".join(sys.argv))), "rounds": rounds, "rows": []}
for shape, groups in (("batch of 16", [sentences[i:i+16] for i in range(0, 64, 16)]), ("one sentence", [[s] for s in sentences[:16]])):
    def run():
        return [translator.generate(translator.encode([s.source for s in g]), options_for(g, 1, standin, True)) for g in groups]
    outs = {}
    for name, f in ways.items():
        search.arg_max = f; outs[name] = run()
    assert outs["torch.argmax"] == outs["C argmax"], "the same translations"
    times = {name: [] for name in ways}
    for _ in range(rounds):
        for name, f in ways.items():
            search.arg_max = f; s = time.process_time(); run(); times[name].append(time.process_time() - s)
    n = sum(len(g) for g in groups)
    row = {"shape": shape, "beams": 1, "sentences": n, "seconds": times,
           "ratio_of_medians": statistics.median(times["torch.argmax"]) / statistics.median(times["C argmax"]),
           "ratio_of_minima": min(times["torch.argmax"]) / min(times["C argmax"])}
    result["rows"].append(row)
    print(f"{shape}, greedy: C argmax / torch.argmax speed: median {row['ratio_of_medians']:.3f}x, min {row['ratio_of_minima']:.3f}x", flush=True)
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
(out / "ab-argmax.json").write_text(json.dumps(result, indent=2) + "\n")
