"""Issue 44: one in-process UnitTranslator pass over N sentences (for py-spy). Scratch script."""
import sys, tempfile, time
from pathlib import Path
import torch
from transformers import AutoTokenizer
from archive.model_source import resolve_model_dir
from archive.tatoeba import REPO_ROOT
from batch.engine import UnitTranslator
from batch.shards import ShardBudget, cut_shards
from batch.units import JobOptions, Unit
from bench.common import archive_with, sample_sentences

count = int(sys.argv[1]); forced = sys.argv[2] == "forced"
torch.set_num_threads(1)
model_dir = resolve_model_dir("synthetic", REPO_ROOT / "build" / "models", "full", False)
sentences = sample_sentences(AutoTokenizer.from_pretrained(model_dir), count)
units = [Unit(0, i, s.source, forced_tokens=s.reference_tokens if forced else None) for i, s in enumerate(sentences)]
with tempfile.TemporaryDirectory() as work:
    store, name = archive_with("int8", model_dir, Path(work))
    job = UnitTranslator(store / name, JobOptions(beams=4))
    shards = cut_shards(units, ShardBudget(max_chars=20_000, max_units=512))
    print("START", flush=True)
    s = time.process_time()
    for sh in shards:
        job.translate(list(sh.units))
    print("rate", count / (time.process_time() - s), flush=True)
