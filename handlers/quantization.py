"""The one place that calls torch's dynamic quantization (deprecated upstream in favour of torchao)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import warnings

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear


def quantize_linear_int8(model: nn.Module) -> nn.Module:
    """Replace every nn.Linear with a dynamically quantized qint8 Linear (weights int8, activations fp32)."""
    with warnings.catch_warnings():
        # torch 2.13 warns that quantize_dynamic moves to torchao; torch is pinned, so the call is stable.
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.simplefilter("ignore", category=UserWarning)
        quantized: nn.Module = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
            model, {nn.Linear}, dtype=torch.qint8, inplace=True
        )
        return quantized


def return_freed_heap() -> None:
    """After the fp32 model is dropped, glibc keeps its freed heap: give it back to the system.

    Call it once the caller no longer holds the unquantized model (it may still be referenced
    while quantize_linear_int8 runs).
    """
    gc.collect()
    libc_name = ctypes.util.find_library("c")
    if libc_name:
        libc = ctypes.CDLL(libc_name)
        if hasattr(libc, "malloc_trim"):  # glibc only
            libc.malloc_trim(0)


def count_quantized_linear(model: nn.Module) -> int:
    return sum(isinstance(module, DynamicQuantizedLinear) for module in model.modules())
