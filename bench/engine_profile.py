"""Where a batched decode's time goes, ours beside CTranslate2's, by operator class.

    python -m bench.engine_profile [--model synthetic] [--beams 4] [--batch 16] [--repeats 6]

One batch of Tatoeba sentences (at reference lengths on the stand-in), 1 thread, decoded `repeats`
times after a warm-up by each engine, each in a process of its own:
- ours (int8, the fast decoder), with the default fbgemm kernels and with the opt-in oneDNN ones:
  torch.profiler's self CPU time per operator, summed by class; what the operators leave of the
  wall time is Python and dispatch (the profiler inflates it), and the per-row int8 mapping's C
  kernels where they are built (handlers.model.native_rows: no torch operators, so not profiled);
- CTranslate2 int8 with its vocabulary map (the latency ladder's rung 12): Linux `perf` sampling
  the running process (perf record -p, after its warm-up), self samples per symbol, summed by class.
Writes profile-engine.txt into the run's folder (bench.common.run_folder, or --results-dir): its
signature, the class tables side by side, then each engine's top lines. Without `perf` the
CTranslate2 column is left out, and the file says so.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.cli import BenchCli
from bench.common import is_standin, now, writable

INT8_LINEAR = "zh_en::int8_linear (mapping, GEMM and epilogue in C)"

# (class, substrings of a torch operator name), first match wins.
TORCH_CLASSES = (
    # int8_linear is no torch operator: the profile sees it through the record_function around it.
    ("int8 GEMM", ("quantized::linear_dynamic", "quantized::linear_with_input_q_dq", INT8_LINEAR)),
    ("fp32 GEMM", ("aten::addmm", "aten::mm", "aten::bmm", "aten::linear")),
    ("attention", ("scaled_dot_product", "softmax_backward")),
    ("search: log-softmax, top-k, argmax", ("_log_softmax", "topk", "argmax", "take_along_dim", "gather")),
    ("cache and beam copies", ("index_select", "copy_", "cat", "index")),
    ("layer norm", ("layer_norm",)),
    (
        "element-wise: per-row int8 mapping, bias, residual, activation",
        (
            "aten::mul",
            "aten::add",
            "aten::sub",
            "aten::div",
            "addcmul",
            "amin",
            "amax",
            "silu",
            "gelu",
            "where",
            "masked_fill",
            "clamp",
        ),
    ),
)
# (class, substrings of a native symbol), first match wins; perf's "[k]" kernel symbols apart.
PERF_CLASSES = (
    ("attention", ("sgemm", "sgemv", "dot_product_attention", "MultiHeadAttention")),  # fp32 in CT2
    ("int8 GEMM", ("gemm_s8u8s32", "gemm_s8s8", "dnnl", "jit_", "_amx", "gemm")),
    ("activation quantize and dequantize", ("quantize", "compensation")),
    ("search: log-softmax, top-k, argmax", ("softmax", "TopK", "BeamSearch", "Sampler", "topk")),
    ("cache and beam copies", ("memmove", "memcpy", "gather", "index_select", "concat", "split")),
    ("layer norm", ("layer_norm", "LayerNorm")),
    (
        "element-wise: per-row int8 mapping, bias, residual, activation",
        (
            "add",
            "mul",
            "gelu",
            "relu",
            "swish",
            "silu",
            "transpose",
        ),
    ),
    ("Python: the harness, its garbage collector", ("_Py", "Py", "gc_", "visit_", "unicode", "dict")),
)
PERF_FREQUENCY = 499


def classify(name: str, classes: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    return next((label for label, keys in classes if any(key in name for key in keys)), "other")


def ours(model_dir: Path, kernels: str, beams: int, batch: int, repeats: int) -> dict[str, Any]:
    """torch.profiler over `repeats` decodes of one batch, in this (fresh, spawned) process."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from bench.common import sample_sentences
    from bench.latency import options_for
    from handlers.handler_config import HandlerConfig
    from handlers.model.translator import Translator
    from handlers.scheduling.run import translate_ids

    torch.set_num_threads(1)
    config = HandlerConfig(variant="int8", threads=1, warmup=False, int8_kernels=kernels)  # type: ignore[arg-type]
    translator = Translator.load(model_dir, config)
    sentences = sample_sentences(translator.tokenizer, batch)
    ids = translator.encode([s.source for s in sentences])
    options = options_for(sentences, beams, is_standin(model_dir), shared=True)
    translate_ids(translator, ids, options)
    with profile(activities=[ProfilerActivity.CPU]) as profiler, _int8_linear_recorded():
        started = time.perf_counter()
        for _ in range(repeats):
            translate_ids(translator, ids, options)
        wall = time.perf_counter() - started
    events = profiler.key_averages()
    by_class: dict[str, float] = defaultdict(float)
    for event in events:
        by_class[classify(event.key, TORCH_CLASSES)] += event.self_cpu_time_total / 1e3
    operators = sum(by_class.values())
    rest = "Python, dispatch and the per-row C kernels" if _native_rows() else "Python and dispatch"
    by_class[f"{rest} (wall - operators)"] = max(0.0, wall * 1e3 - operators)
    top = events.table(sort_by="self_cpu_time_total", row_limit=15)
    return {
        "ms_per_batch": {k: v / repeats for k, v in by_class.items()},
        "wall_ms": wall * 1e3 / repeats,
        "top": top,
    }


@contextlib.contextmanager
def _int8_linear_recorded() -> Iterator[None]:
    """Every int8_linear call as a profiler event of its own while profiling (handlers.model.int8_linear)."""
    import torch
    from torch.profiler import record_function

    from handlers.model.int8_linear import Int8Linear

    call = Int8Linear.__call__

    def recorded(
        self: Int8Linear, flat: torch.Tensor, row_sums: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        with record_function(INT8_LINEAR):
            return call(self, flat, row_sums, bias)

    Int8Linear.__call__ = recorded  # type: ignore[method-assign]
    try:
        yield
    finally:
        Int8Linear.__call__ = call  # type: ignore[method-assign]


def _native_rows() -> bool:
    from handlers.model.native_rows import NativeRowOps, default_row_ops

    return isinstance(default_row_ops(), NativeRowOps)


def ctranslate2(model_dir: Path, beams: int, batch: int, repeats: int) -> dict[str, Any] | None:
    """perf over `repeats` CTranslate2 + map decodes, attached after the warm-up; None without perf."""
    perf = shutil.which("perf")
    if perf is None:
        return None
    with tempfile.TemporaryDirectory(prefix="zh_en_perf_") as workdir:
        data = Path(workdir) / "perf.data"
        target = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.engine_profile",
                "--peer-target",
                str(model_dir),
                str(beams),
                str(batch),
                str(repeats),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert target.stdin is not None and target.stdout is not None
        if target.stdout.readline().strip() != "READY":
            target.wait()
            raise RuntimeError("the CTranslate2 target ended before its warm-up")
        recorder = subprocess.Popen(
            [perf, "record", "-F", str(PERF_FREQUENCY), "-p", str(target.pid), "-o", str(data)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)  # perf attaches before the timed decodes start
        target.stdin.close()
        wall_ms = json.loads(target.stdout.read().strip().splitlines()[-1])["wall_ms"]
        target.wait()
        recorder.send_signal(signal.SIGINT)
        recorder.wait()
        report = subprocess.run(
            [perf, "report", "-i", str(data), "--no-children", "--sort", "sym", "--stdio"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    shares: dict[str, float] = defaultdict(float)
    top: list[str] = []
    for line in report.splitlines():
        fields = line.split()
        if len(fields) < 3 or not fields[0].endswith("%") or line.startswith("#"):
            continue
        share, kind, symbol = float(fields[0][:-1]), fields[1], " ".join(fields[2:])
        label = "kernel (page faults, scheduling)" if kind == "[k]" else classify(symbol, PERF_CLASSES)
        shares[label] += share
        if len(top) < 15:
            top.append(f"{fields[0]:>8}  {kind} {symbol[:110]}")
    total = sum(shares.values()) or 1.0
    return {
        "ms_per_batch": {k: wall_ms * v / total for k, v in shares.items()},
        "wall_ms": wall_ms,
        "top": "\n".join(top),
    }


def _peer_target(model_dir: Path, beams: int, batch: int, repeats: int) -> None:
    """The process perf attaches to: warm up, say READY, wait for perf, decode, print the wall time."""
    from transformers import AutoTokenizer

    from bench import ctranslate2_peer
    from bench.common import sample_sentences

    sentences = sample_sentences(AutoTokenizer.from_pretrained(model_dir), batch)
    peer = ctranslate2_peer.PeerTranslator(model_dir, ctranslate2_peer.convert(model_dir), use_vmap=True)
    lengths = ctranslate2_peer.decoding_lengths(
        [s.reference_tokens for s in sentences], is_standin(model_dir)
    )
    # Tokenized once, as ours is given ids: both columns are the decode alone.
    ids = peer.tokenizer([s.source for s in sentences], padding=False, truncation=False)["input_ids"]
    source = [peer.tokenizer.convert_ids_to_tokens(row) for row in ids]

    def decode() -> None:
        peer.translator.translate_batch(source, beam_size=beams, use_vmap=True, **lengths)

    decode()
    print("READY", flush=True)
    sys.stdin.read()  # the bench closes stdin once perf is attached
    started = time.perf_counter()
    for _ in range(repeats):
        decode()
    print(json.dumps({"wall_ms": (time.perf_counter() - started) * 1e3 / repeats}), flush=True)


def _in_child(function: Any, *args: Any) -> Any:
    with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
        return pool.apply(function, args)


def table(columns: dict[str, dict[str, Any]]) -> str:
    classes = sorted(
        {c for column in columns.values() for c in column["ms_per_batch"]},
        key=lambda c: -max(col["ms_per_batch"].get(c, 0.0) for col in columns.values()),
    )
    lines = ["| class (ms per batch) | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for label in classes:
        cells = [f"{column['ms_per_batch'].get(label, 0.0):.1f}" for column in columns.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("| **wall** | " + " | ".join(f"**{c['wall_ms']:.1f}**" for c in columns.values()) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["--peer-target"]:
        model, beams, batch, repeats = arguments[1:5]
        _peer_target(Path(model), int(beams), int(batch), int(repeats))
        return 0
    cli = BenchCli("engine_profile", __doc__, model="synthetic", results_dir=True)
    cli.parser.add_argument("--beams", type=int, default=4)
    cli.parser.add_argument("--batch", type=int, default=16)
    cli.parser.add_argument("--repeats", type=int, default=6)
    args = cli.parse(argv)
    model_dir = cli.model_dir()
    columns: dict[str, dict[str, Any]] = {}
    for kernels in ("fbgemm", "onednn"):
        cli.say(f"ours, int8 ({kernels}): beam {args.beams}, batch {args.batch}, {args.repeats} repeats")
        columns[f"ours, {kernels}"] = _in_child(
            ours, model_dir, kernels, args.beams, args.batch, args.repeats
        )
    cli.say("CTranslate2 + map under perf")
    peer = ctranslate2(model_dir, args.beams, args.batch, args.repeats)
    if peer is not None:
        columns["CTranslate2 + map (perf)"] = peer
    stamp = cli.signature()
    facts = stamp["machine"]
    text = [
        f"# Engine profile: int8, beam {args.beams}, batch {args.batch}, 1 thread, {args.repeats} repeats",
        f"# {now()}, {facts['cpu']}, torch {facts['torch']}, model {model_dir.name}"
        f"{' (stand-in, reference lengths)' if is_standin(model_dir) else ''}",
        f"# {stamp['command']}, commit {stamp['commit']}",
        "# ours: torch.profiler self CPU by operator class; CTranslate2: perf self samples by symbol class,"
        " scaled to its wall time"
        if peer is not None
        else "# perf not found: CTranslate2 left out",
        "",
        table(columns),
    ]
    for name, column in columns.items():
        text += ["", f"## {name}: top lines", "", column["top"]]
    path = writable(args.results_dir / "profile-engine.txt")
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(text) + "\n")
    print("\n".join(text[: len(columns) + 20]))
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
