"""Issue 44: where the batch job's in-process time goes. Scratch script, kept as it ran.

One int8 archive (cache off), the job's UnitTranslator loaded once (timed), then the same N Tatoeba
sentences at beam 4 (forced to reference lengths on the stand-in) translated as the job cuts them
(shards of 128, each one translate() call: the running batch drains at every shard's end) and as
one shard, interleaved, fastest of R rounds. Beside them the decoder's own rate on the same
sentences through the served loop (handlers.scheduling.run, all submitted at once).
"""
import json, sys, tempfile, time
from pathlib import Path
import torch
from transformers import AutoTokenizer
from archive.model_source import resolve_model_dir
from archive.tatoeba import REPO_ROOT
from batch.engine import UnitTranslator
from batch.shards import ShardBudget, cut_shards
from batch.units import JobOptions, Unit
from bench.common import archive_with, is_standin, sample_sentences
from bench.signature import signature
from handlers.model.options import GenerationOptions
from handlers.scheduling.run import translate_ids

out, count, rounds = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
model_dir = resolve_model_dir("synthetic", REPO_ROOT / "build" / "models", "full", False)
sentences = sample_sentences(AutoTokenizer.from_pretrained(model_dir), count)
units = [Unit(0, i, s.source, forced_tokens=s.reference_tokens) for i, s in enumerate(sentences)]
result = {"signature": dict(signature("python " + " ".join(sys.argv))), "sentences": count, "rounds": rounds}
with tempfile.TemporaryDirectory() as work:
    store, name = archive_with("int8", model_dir, Path(work))
    started = time.perf_counter()
    job = UnitTranslator(store / name, JobOptions(beams=4))
    result["load_seconds"] = round(time.perf_counter() - started, 2)
    t = job.translator
    ids = t.encode([s.source for s in sentences])
    options = [GenerationOptions(num_beams=4, min_new_tokens=s.reference_tokens, max_new_tokens=s.reference_tokens) for s in sentences]
    ways = {
        "job shards of 128": lambda: [job.translate(list(sh.units)) for sh in cut_shards(units, ShardBudget())],
        "one shard": lambda: job.translate(units),
        "served loop, ids": lambda: translate_ids(t, ids, options),
    }
    times = {k: [] for k in ways}
    for _ in range(rounds):
        for k, f in ways.items():
            s = time.process_time(); f(); times[k].append(time.process_time() - s)
    result["seconds"] = times
    result["sentences_per_s"] = {k: round(count / min(v), 2) for k, v in times.items()}
print(json.dumps(result["sentences_per_s"]), "load", result["load_seconds"])
out.mkdir(parents=True, exist_ok=True)
(out / "job-profile.json").write_text(json.dumps(result, indent=2) + "\n")
