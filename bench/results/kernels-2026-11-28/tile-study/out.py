import time, warnings, sys
import torch
torch.set_num_threads(1)
from handlers.model import native, native_rows, int8_linear
from handlers.model.row_int8 import RowInt8Linear
warnings.simplefilter("ignore")
int8_linear.MAX_COLUMNS = 10**9
ours_ops = native_rows.load("avx2")
mapped_ops = native_rows.NativeRowOps(native.load("generic"))
l = torch.nn.Linear(512, 32000, bias=False); torch.nn.init.normal_(l.weight, std=0.05)
w, b = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(l), {torch.nn.Linear}, dtype=torch.qint8)[0]._weight_bias()
a, f = RowInt8Linear(w, None, ours_ops), RowInt8Linear(w, None, mapped_ops)
assert a.whole is not None and f.whole is None
def t(layer, x, reps=10):
    with torch.inference_mode():
        layer(x); best = 1e9
        for _ in range(5):
            s = time.perf_counter()
            for _ in range(reps): layer(x)
            best = min(best, (time.perf_counter() - s) / reps)
    return best
for rows in (1, 4, 16, 64):
    x = torch.randn(rows, 512)
    for _ in range(2):
        ta, tf = t(a, x), t(f, x)
        print(f"512x32000 rows {rows:3d}: ours {ta*1e3:7.2f} ms ({rows*512*32000/ta/1e9:5.1f} GMAC/s) fbgemm {tf*1e3:7.2f} ms -> ours/fbgemm speed {tf/ta:.2f}x")
