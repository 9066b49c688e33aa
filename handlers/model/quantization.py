"""The one place that quantizes: torch's dynamic quantization (deprecated upstream in favour of torchao)
makes the int8 weights, then every layer is swapped for its per-row form (handlers.model.row_int8)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import re
import warnings
from pathlib import Path

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

from handlers.model.heap_trim import malloc_trim
from handlers.model.row_int8 import RowInt8Embedding, RowInt8Linear

_MAP_LINE = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")


def int8_kernels(choice: str = "fbgemm") -> str:
    """The quantized engine for int8 matmuls; `auto` is oneDNN where the CPU has AMX int8 tiles.

    On a Xeon with AMX, oneDNN's int8 matmul took 1.5 ms for 64 x 512 x 32,000 where fbgemm took
    6.1, and about half the time at the decoder's sizes (docs/BENCHMARKS.md). Both quantize a row
    mapped onto [0, 1] with the same scale and accumulate in int32 exactly, but they apply the
    weight's scale in a different order: some outputs differ in the last bit, so a sentence may
    translate differently under each (tests/unit/test_int8_kernels.py). fbgemm stays the default.
    """
    if choice == "auto":
        amx = "onednn" in torch.backends.quantized.supported_engines and torch.cpu._is_amx_tile_supported()
        return "onednn" if amx else "fbgemm"
    return choice


def quantize_int8(model: nn.Module, kernels: str = "fbgemm") -> nn.Module:
    """int8 weights for every nn.Linear (quantize_dynamic) and nn.Embedding; activations per row.

    A row's output never depends on the other rows of its call, so a sentence translates the same
    alone or in any batch. Tied weights are quantized once: one int8 embedding serves every place
    the fp32 table stood. `kernels` (int8_kernels) is set for the whole process: weights are
    packed for it here, and every later matmul must run on it.
    """
    torch.backends.quantized.engine = int8_kernels(kernels)
    _copy_out_of_weight_file(model)
    with warnings.catch_warnings():
        # torch 2.13 warns that quantize_dynamic moves to torchao; torch is pinned, so the call is stable.
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.simplefilter("ignore", category=UserWarning)
        quantized: nn.Module = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
            model, {nn.Linear}, dtype=torch.qint8, inplace=True
        )
        # Keyed by weight storage: the encoder's, the decoder's and the shared embedding are one table.
        replacements: dict[int, nn.Module] = {}
        for parent in list(quantized.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, DynamicQuantizedLinear):
                    setattr(parent, name, RowInt8Linear.of(child))
                elif type(child) is nn.Embedding:  # not Marian's sinusoidal positions (a subclass)
                    key = child.weight.untyped_storage().data_ptr()
                    replacements.setdefault(key, RowInt8Embedding(child.weight))
                    setattr(parent, name, replacements[key])
    return quantized


def _copy_out_of_weight_file(model: nn.Module) -> None:
    """Copy every tensor quantizing keeps in fp32 (biases, norms, positions) out of the weights' mmap.

    from_pretrained maps the whole safetensors file and hands out slices of it. While any slice
    lives, the file stays mapped and every page quantizing read stays resident: an fp32 copy of
    the weights in all but name. Copied first, the Linear and embedding weights are the map's
    last users, and they go when quantizing replaces them. (An fp32 worker keeps the map: there
    it is the weights, shared by the workers of a host.)
    """
    replaced = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear) or type(m) is nn.Embedding}
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if id(tensor) not in replaced:
                tensor.data = tensor.data.clone()


MADV_DONTNEED = 4  # Linux


def drop_weight_file_pages(model_dir: Path) -> int:
    """Give back the resident pages of this process's maps of `model_dir`'s files; MB given back.

    After quantize_int8 nothing reads the fp32 weight file, but one slice transformers keeps for
    itself holds the map open, and the pages quantizing read stay resident (about 300 MB for
    opus-mt-zh-en). Only maps with no privately written page (no anonymous copy) are dropped:
    their contents come back from the file if anything reads them again, so nothing can be lost.
    Linux only; elsewhere 0.
    """
    smaps = Path("/proc/self/smaps")
    if not smaps.exists():
        return 0
    directory = model_dir.resolve()
    # Each map's header line (range, perms, offset, dev, inode, path), then its "Key: N kB" lines.
    maps: list[tuple[range, Path, dict[str, int]]] = []
    for line in smaps.read_text().splitlines():
        fields = line.split()
        if _MAP_LINE.match(line):
            start, end = (int(x, 16) for x in fields[0].split("-"))
            maps.append((range(start, end), Path(fields[5] if len(fields) > 5 else ""), {}))
        elif maps and len(fields) >= 2 and fields[0].endswith(":") and fields[1].isdigit():
            maps[-1][2][fields[0][:-1]] = int(fields[1])
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    dropped_kb = 0
    for span, path, sizes in maps:
        # A page written through a private map is an anonymous copy; every other page is the file's.
        unwritten = sizes.get("Anonymous", 1) == 0
        if path.parent == directory and unwritten and libc.madvise(span.start, len(span), MADV_DONTNEED) == 0:
            dropped_kb += sizes.get("Rss", 0)
    return dropped_kb // 1024


def return_freed_heap() -> None:
    """After the fp32 model is dropped, glibc keeps its freed heap: give it back to the system.

    Call it once the caller no longer holds the unquantized model (it may still be referenced
    while quantize_int8 runs).
    """
    gc.collect()
    trim = malloc_trim()  # None where the C library has none (glibc only)
    if trim is not None:
        trim()


def count_quantized_linear(model: nn.Module) -> int:
    return sum(isinstance(module, RowInt8Linear) for module in model.modules())
