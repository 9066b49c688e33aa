"""Issue 44: batch admission settings in process (doc cap, cohorts). Scratch script."""
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
base = dict(am.BATCH_LIMITS)
settings = {
    "as shipped (doc cap 16, cohorts 4)": {},
    "doc cap = rows, cohorts 4": {"document_rows_beside_interactive": 128, "interactive_window_ms": 0},
    "doc cap = rows, cohorts 8": {"document_rows_beside_interactive": 128, "interactive_window_ms": 0, "max_cohorts": 8},
}
with tempfile.TemporaryDirectory() as work:
    store, name = archive_with("int8", model_dir, Path(work))
    jobs = {}
    for label, extra in settings.items():
        am.BATCH_LIMITS = {**base, **extra}
        jobs[label] = UnitTranslator(store / name, JobOptions(beams=4))
    shards = cut_shards(units, ShardBudget(max_chars=20_000, max_units=512))
    times = {k: [] for k in jobs}
    outputs = {}
    for r in range(rounds):
        for k, job in jobs.items():
            s = time.process_time()
            res = [job.translate(list(sh.units)) for sh in shards]
            times[k].append(time.process_time() - s)
            outputs[k] = [u.translation for shard in res for u in shard]
            print(r, k, round(count / times[k][-1], 2), flush=True)
    first = next(iter(outputs.values()))
    result["same_output"] = all(o == first for o in outputs.values())
    result["seconds"] = times
    result["sentences_per_s"] = {k: round(count / min(v), 2) for k, v in times.items()}
print(json.dumps(result["sentences_per_s"], indent=1), result["same_output"])
out.mkdir(parents=True, exist_ok=True)
(out / "admission-profile.json").write_text(json.dumps(result, indent=2) + "\n")
