import time, warnings, sys
import torch
torch.set_num_threads(1)
from handlers.model import native, native_rows
from handlers.model.row_int8 import RowInt8Linear
warnings.simplefilter("ignore")
name = sys.argv[1] if len(sys.argv) > 1 else "avx2"
ours_ops = native_rows.load(name)
mapped_ops = native_rows.NativeRowOps(native.load("generic"))  # generic: no int8_linear -> fbgemm
def q(k, n):
    l = torch.nn.Linear(k, n); torch.nn.init.normal_(l.weight, std=0.05)
    m = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(l), {torch.nn.Linear}, dtype=torch.qint8)[0]
    return m._weight_bias()
def t(layer, x, reps):
    with torch.inference_mode():
        layer(x)
        best = 1e9
        for _ in range(5):
            s = time.perf_counter()
            for _ in range(reps): layer(x)
            best = min(best, (time.perf_counter() - s) / reps)
    return best
for k, n in [(512, 512), (512, 1536), (512, 2048), (2048, 512)]:
    w, b = q(k, n)
    a, f = RowInt8Linear(w, b, ours_ops), RowInt8Linear(w, b, mapped_ops)
    assert a.whole is not None and f.whole is None
    for rows in (1, 16, 64):
        x = torch.randn(rows, k)
        reps = max(3, int(2e7 / (rows * k * n) * 20))
        ta, tf = t(a, x, reps), t(f, x, reps)
        gm = rows * k * n / ta / 1e9
        print(f"{k}x{n} rows {rows:3d}: ours {ta*1e6:8.1f} us ({gm:5.1f} GMAC/s)  fbgemm {tf*1e6:8.1f} us  ours/fbgemm speed {tf/ta:.2f}x")
