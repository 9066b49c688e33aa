"""A stand-in MiniSBD model for the LibreTranslate peer's Argos package: sentence ends by punctuation.

Argos packages carry their sentence boundary detection as `minisbd/<name>.onnx`, a Stanza character
tokenizer exported to ONNX (inputs `units` [batch, chars] int64 and `features` [batch, chars, n]
float, output scores [batch, chars, 5] whose argmax is per character 0 inside a token, 1 token end,
2 sentence end; the model's vocabulary and config ride in its metadata). The real zh-hans model is
downloaded from GitHub at first use, which this machine cannot do, so the package carries this one:
a character ends a sentence when it is one of TERMINALS not followed by another or by a closing
mark, or when it is a closing mark right after one and right before another quotation (“好。”“不。”),
as our own splitter cuts one line (handlers/text/splitting.py), except that it knows no pairs:
our splitter keeps a 。 inside quotation marks, this one ends a sentence there. The 2,000 texts a
load run draws split into the same 2,038 sentences with both; of all 10,000 test texts 15 split
differently (10,201 sentences against our 10,197: 0.18% more reference tokens to decode for
LibreTranslate). Every other character ends a token.
It does far less work than the real BiLSTM model (a few table lookups per character), which can
only flatter LibreTranslate.

No onnx package is needed: the file is written here with protobuf's wire format (onnx.proto's field
numbers), and onnxruntime in LibreTranslate's venv reads it (tests/unit/test_libretranslate_peer.py).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path

TERMINALS = "。！？；…｡!?"  # our splitter's CJK sentence ends (handlers/text/splitting.py), and ! ?
CLOSERS = "”’」』）)\"'"
OPENERS = "“‘「『\"'"
SPECIALS = ("<PAD>", "<UNK>")
IR_VERSION, OPSET = 8, 13
FLOAT, INT64 = 1, 7  # onnx TensorProto data types


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1  # negative int64: two's complement, as protobuf encodes it
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _bytes(field: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _tensor(name: str, values: Sequence[float] | Sequence[int], data_type: int) -> bytes:
    """A 1-D initializer (TensorProto: dims 1, data_type 2, name 8, raw_data 9)."""
    fmt = f"<{len(values)}{'f' if data_type == FLOAT else 'q'}"
    return _int(1, len(values)) + _int(2, data_type) + _bytes(8, name) + _bytes(9, struct.pack(fmt, *values))


def _node(op: str, inputs: Sequence[str], output: str, axis: int | None = None) -> bytes:
    """NodeProto: input 1, output 2, name 3, op_type 4, attribute 5 (AttributeProto: name 1, i 3,
    type 20, INT = 2)."""
    node = (
        b"".join(_bytes(1, name) for name in inputs) + _bytes(2, output) + _bytes(3, output) + _bytes(4, op)
    )
    if axis is not None:
        node += _bytes(5, _bytes(1, "axis") + _int(3, axis) + _int(20, 2))
    return node


def _value_info(name: str, data_type: int, dims: Sequence[str | int]) -> bytes:
    """ValueInfoProto with a tensor type; string dims are symbolic (dim_param), ints fixed."""
    shape = b"".join(_bytes(1, _bytes(2, dim) if isinstance(dim, str) else _int(1, dim)) for dim in dims)
    tensor_type = _int(1, data_type) + _bytes(2, shape)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor_type))


def vocabulary() -> list[str]:
    return [*SPECIALS, *dict.fromkeys(TERMINALS + CLOSERS + OPENERS)]


def _graph(units: list[str]) -> bytes:
    """Per character: T terminal, C closer, O quote opener, F = T or C;
    end = T * (1 - F next) + C * T before * O next."""
    table = {
        name: [float(unit in chars) for unit in units]
        for name, chars in (("T_table", TERMINALS), ("C_table", CLOSERS), ("O_table", OPENERS))
    }
    table["F_table"] = [max(t, c) for t, c in zip(table["T_table"], table["C_table"], strict=True)]
    initializers = [_tensor(name, values, FLOAT) for name, values in table.items()]
    initializers += [
        _tensor(name, values, INT64)
        for name, values in (
            ("zero", [0]),
            ("one", [1]),
            ("big", [1 << 62]),
            ("last", [-1]),
            ("axis1", [1]),
            ("axis2", [2]),
        )
    ]
    initializers.append(_tensor("ones", [1.0], FLOAT))
    nodes = [
        _node("Gather", ["T_table", "units"], "T"),
        _node("Gather", ["C_table", "units"], "C"),
        _node("Gather", ["F_table", "units"], "F"),
        _node("Gather", ["O_table", "units"], "O"),
        _node("Slice", ["F", "zero", "one", "axis1"], "first"),  # [batch, 1]
        _node("Sub", ["first", "first"], "pad"),  # zeros [batch, 1]
        _node("Slice", ["F", "one", "big", "axis1"], "F_after"),
        _node("Concat", ["F_after", "pad"], "F_next", axis=1),
        _node("Slice", ["O", "one", "big", "axis1"], "O_after"),
        _node("Concat", ["O_after", "pad"], "O_next", axis=1),
        _node("Slice", ["T", "zero", "last", "axis1"], "T_before"),
        _node("Concat", ["pad", "T_before"], "T_prev", axis=1),
        _node("Sub", ["ones", "F_next"], "not_F_next"),
        _node("Mul", ["T", "not_F_next"], "ends_here"),
        _node("Mul", ["C", "T_prev"], "closes_quote"),
        _node("Mul", ["closes_quote", "O_next"], "closes_end"),
        _node("Add", ["ends_here", "closes_end"], "end"),
        _node("Sub", ["ones", "end"], "token"),
        _node("Sub", ["end", "end"], "zeros"),
        _node("Unsqueeze", ["zeros", "axis2"], "zeros3"),
        _node("Unsqueeze", ["token", "axis2"], "token3"),
        _node("Unsqueeze", ["end", "axis2"], "end3"),
        _node("Concat", ["zeros3", "token3", "end3", "zeros3", "zeros3"], "logits", axis=2),
    ]
    inputs = [
        _value_info("units", INT64, ["batch", "chars"]),
        _value_info("features", FLOAT, ["batch", "chars", "n"]),
    ]
    return (
        b"".join(_bytes(1, node) for node in nodes)
        + _bytes(2, "sbd_standin")
        + b"".join(_bytes(5, tensor) for tensor in initializers)
        + b"".join(_bytes(11, value) for value in inputs)
        + _bytes(12, _value_info("logits", FLOAT, ["batch", "chars", 5]))
    )


def model_bytes() -> bytes:
    """The stand-in .onnx with MiniSBD's metadata (lang_code, config, vocab, lexicon)."""
    units = vocabulary()
    vocab = {"lang": "zh-hans", "idx": 0, "cutoff": 0, "lower": False, "_id2unit": units}
    vocab["_unit2id"] = {unit: index for index, unit in enumerate(units)}
    config = {"feat_funcs": ["space_before"], "max_seqlen": 1000, "batch_size": 32, "use_dictionary": False}
    metadata = {
        "lang_code": "zh-hans",
        "config": json.dumps(config),
        "vocab": json.dumps(vocab),
        "lexicon": "null",
        "standin": "sentence ends by punctuation (bench.sbd_standin), not the real zh-hans MiniSBD model",
    }
    return (
        _int(1, IR_VERSION)
        + _bytes(2, "zh_en bench.sbd_standin")
        + _bytes(7, _graph(units))
        + _bytes(8, _bytes(1, "") + _int(2, OPSET))
        + b"".join(_bytes(14, _bytes(1, key) + _bytes(2, value)) for key, value in metadata.items())
    )


def write_model(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model_bytes())
    return path
