import ctypes, time, warnings, sys
import torch
torch.set_num_threads(1)
from handlers.model import native, int8_linear
from handlers.model.native_rows import NativeRowOps
from handlers.model.row_int8 import RowInt8Linear
warnings.simplefilter("ignore")
int8_linear.MAX_COLUMNS = 10**9
def kernels(path):
    lib = ctypes.CDLL(path)
    f = {}
    for name, (args, res) in native.SIGNATURES.items():
        if name == "prepare": continue
        fn = getattr(lib, f"{name}_avx2"); fn.argtypes, fn.restype = args, res; f[name] = fn
    return NativeRowOps(native.Kernels(native.BY_NAME["avx2"], f["map_rows"], f["restore_rows"], f["top_k_rows"], f["int8_linear"]))
variants = {n: kernels(f"/tmp/mb/{n}.so") for n in sys.argv[1:]}
def q(k, n):
    l = torch.nn.Linear(k, n); torch.nn.init.normal_(l.weight, std=0.05)
    return torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(l), {torch.nn.Linear}, dtype=torch.qint8)[0]._weight_bias()
def t(layer, x, reps):
    with torch.inference_mode():
        layer(x); best = 1e9
        for _ in range(7):
            s = time.perf_counter()
            for _ in range(reps): layer(x)
            best = min(best, (time.perf_counter() - s) / reps)
    return best
for k, n in [(512, 512), (512, 1536), (512, 2048), (2048, 512), (512, 32000)]:
    w, b = q(k, n)
    layers = {name: RowInt8Linear(w, b, ops) for name, ops in variants.items()}
    for rows in (1, 4, 16, 64):
        x = torch.randn(rows, k)
        outs = [layer(x) for layer in layers.values()]
        assert all(torch.equal(o.view(torch.int32), outs[0].view(torch.int32)) for o in outs)
        reps = max(3, int(4e7 / (rows * k * n) * 20)) if n < 32000 else 5
        times = {name: t(layer, x, reps) for name, layer in layers.items()}
        base = times[next(iter(times))]
        print(f"{k}x{n} rows {rows:3d}: " + "  ".join(f"{name} {v*1e6:8.1f}us ({base/v:.2f}x)" for name, v in times.items()), flush=True)
