"""Candidate int8 kernels for one Linear of opus-mt-zh-en, timed in one run on this machine.

    python -m bench.int8_kernels [--reps-scale 1.0] [--results-dir DIR]

Per shape (decoder rows M x in K x out N) and kernel, microseconds per call on 1 thread:
  fp32          nn.Linear (MKL)
  per_tensor    torch's dynamic int8 Linear (fbgemm): one activation scale per call, batch-dependent
  per_row       handlers.model.row_int8.RowInt8Linear: fbgemm on rows mapped onto [0, 1], per-row ranges
  int_mm        per-row symmetric int8 activations through torch._int_mm, per-channel weights
  weight_only   torch._weight_int8pack_mm: int8 weights, fp32 activations (per-row by construction)
`per_row_batch_invariant` checks the chosen kernel: every row of a 64-row call equals that row
alone, bit for bit. Writes <results-dir>/int8_kernels.json and prints a markdown table.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from bench.cli import BenchCli, Progress
from handlers.model.row_int8 import RowInt8Linear

# (in, out) of the model's Linears: attention projections, FFN in/out, the target-side output layer.
SHAPES = ((512, 512), (512, 2048), (2048, 512), (512, 32000))
ROWS = (1, 4, 16, 64)
KERNELS = ("fp32", "per_tensor", "per_row", "int_mm", "weight_only")
say = Progress("int8_kernels")


def kernels(linear: nn.Linear) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
            nn.Sequential(linear), {nn.Linear}, dtype=torch.qint8
        )[0]
    per_row = RowInt8Linear.of(quantized)
    weight, bias = linear.weight.detach(), linear.bias.detach()
    channel_scales = weight.abs().amax(dim=1) / 127
    channel_codes = torch.round(weight / channel_scales[:, None]).to(torch.int8)
    codes_t = channel_codes.t().contiguous()

    def int_mm(x: torch.Tensor) -> torch.Tensor:
        scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-30) / 127
        accumulated = torch._int_mm(torch.round(x / scale).to(torch.int8), codes_t)
        return accumulated.float() * scale * channel_scales + bias

    def weight_only(x: torch.Tensor) -> torch.Tensor:
        return torch._weight_int8pack_mm(x, channel_codes, channel_scales) + bias

    return {
        "fp32": linear,
        "per_tensor": quantized,
        "per_row": per_row,
        "int_mm": int_mm,
        "weight_only": weight_only,
    }


def microseconds(call: Callable[[], Any], reps: int) -> float:
    for _ in range(3):
        call()
    started = time.perf_counter()
    for _ in range(reps):
        call()
    return round((time.perf_counter() - started) / reps * 1e6, 1)


def measure(reps_scale: float) -> list[dict[str, Any]]:
    torch.manual_seed(0)
    rows = []
    for in_features, out_features in SHAPES:
        calls = kernels(nn.Linear(in_features, out_features))
        size = in_features * out_features / 512 / 512
        for m in ROWS:
            x = torch.randn(m, in_features)
            reps = max(5, int(reps_scale * 400 / m / size))
            with torch.inference_mode():
                row: dict[str, Any] = {"rows": m, "in": in_features, "out": out_features}
                for name, call in calls.items():
                    row[name] = microseconds(lambda call=call, x=x: call(x), reps)  # type: ignore[misc]
            rows.append(row)
            say(str(row))
    return rows


def per_row_invariant() -> bool:
    """Every row of a 64-row call equals the same row alone, bit for bit (values spread over decades)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
            nn.Sequential(nn.Linear(512, 512)), {nn.Linear}, dtype=torch.qint8
        )[0]
    layer = RowInt8Linear.of(quantized)
    x = torch.randn(64, 512) * torch.logspace(-3, 3, 64)[:, None]
    with torch.inference_mode():
        together = layer(x)
        return all(torch.equal(layer(x[i : i + 1])[0], together[i]) for i in range(64))


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| rows x in x out | " + " | ".join(KERNELS) + " | per_row / per_tensor |",
        "|---|" + "---|" * (len(KERNELS) + 1),
    ]
    for row in rows:
        cells = " | ".join(f"{row[name]:.0f}" for name in KERNELS)
        ratio = row["per_row"] / row["per_tensor"]
        lines.append(f"| {row['rows']} x {row['in']} x {row['out']} | {cells} | {ratio:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("int8_kernels", __doc__, results_dir=True)
    cli.parser.add_argument(
        "--reps-scale", type=float, default=1.0, help="more (or fewer) timed calls per cell"
    )
    args = cli.parse(argv)
    torch.set_num_threads(1)
    rows = measure(args.reps_scale)
    invariant = per_row_invariant()
    table = markdown(rows)
    path = cli.write(
        "int8_kernels",
        {
            "command": cli.command,  # as before signatures, which hold it too
            "unit": "microseconds per call, 1 thread",
            "per_row_batch_invariant": invariant,
            "rows": rows,
            "table": table,
        },
    )
    print(table)
    print(f"per_row batch invariant: {invariant}\nwritten to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
