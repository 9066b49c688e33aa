import sys, time
import torch
from bench.common import load_model_dir, sample_sentences, is_standin
from bench.latency import options_for
from handlers.handler_config import HandlerConfig
from handlers.model.translator import Translator
from handlers.scheduling.run import translate_ids
torch.set_num_threads(1)
d = load_model_dir("synthetic", False)
standin = is_standin(d)
t = Translator.load(d, HandlerConfig(variant="int8", threads=1, warmup=False).model)
s = sample_sentences(t.tokenizer, 64)
size = int(sys.argv[3]) if len(sys.argv) > 3 else 16
groups = [s[i:i+size] for i in range(0, 64 if size > 1 else 16, size)]
beams = int(sys.argv[1]) if len(sys.argv) > 1 else 1
secs = float(sys.argv[2]) if len(sys.argv) > 2 else 30
enc = [(t.encode([x.source for x in g]), options_for(g, beams, standin, True)) for g in groups]
for e, o in enc: translate_ids(t, e, o)
end = time.time() + secs; n = 0; c0 = time.process_time()
while time.time() < end:
    for e, o in enc: translate_ids(t, e, o); n += len(e.input_ids) if hasattr(e, "input_ids") else size
print("sent/s (cpu)", n / (time.process_time() - c0), file=sys.stderr)
