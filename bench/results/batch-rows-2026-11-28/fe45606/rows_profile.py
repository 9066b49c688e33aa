"""Issue 44: the batch job's translator in process by rows per step and shard size. Scratch script.

One int8 archive (cache off), UnitTranslator per rows setting loaded once, then N Tatoeba sentences
at beam 4 (reference lengths) as the job cuts them, interleaved, fastest of R rounds of CPU time.
"""
import json, sys, tempfile, time
from pathlib import Path
import torch
from transformers import AutoTokenizer
from archive.model_source import resolve_model_dir
from archive.tatoeba import REPO_ROOT
import batch.archive_model as am
from batch.engine import UnitTranslator
from batch.shards import ShardBudget, cut_shards
from batch.units import JobOptions, Unit
from bench.common import archive_with, sample_sentences
from bench.signature import signature

out, count, rounds = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
model_dir = resolve_model_dir("synthetic", REPO_ROOT / "build" / "models", "full", False)
sentences = sample_sentences(AutoTokenizer.from_pretrained(model_dir), count)
units = [Unit(0, i, s.source, forced_tokens=s.reference_tokens) for i, s in enumerate(sentences)]
result = {"signature": dict(signature("python " + " ".join(sys.argv))), "sentences": count, "rounds": rounds}
base_limits = dict(am.BATCH_LIMITS)
with tempfile.TemporaryDirectory() as work:
    store, name = archive_with("int8", model_dir, Path(work))
    jobs = {}
    for rows in (64, 128, 256):
        am.BATCH_LIMITS = {**base_limits, "max_batch_rows": rows}
        started = time.perf_counter()
        jobs[rows] = UnitTranslator(store / name, JobOptions(beams=4))
        result[f"load_seconds_rows{rows}"] = round(time.perf_counter() - started, 2)
    ways = {}
    for rows, job in jobs.items():
        for shard_units in (128, 512):
            shards = cut_shards(units, ShardBudget(max_chars=10**9, max_units=shard_units))
            ways[f"rows {rows}, shards of {shard_units}"] = (lambda job=job, shards=shards: [job.translate(list(sh.units)) for sh in shards])
    times = {k: [] for k in ways}
    for r in range(rounds):
        for k, f in ways.items():
            s = time.process_time(); f(); times[k].append(time.process_time() - s)
            print(r, k, round(count / times[k][-1], 2), flush=True)
    result["seconds"] = times
    result["sentences_per_s"] = {k: round(count / min(v), 2) for k, v in times.items()}
print(json.dumps(result["sentences_per_s"], indent=1))
out.mkdir(parents=True, exist_ok=True)
(out / "rows-profile.json").write_text(json.dumps(result, indent=2) + "\n")
