"""Input files as units, and output files rebuilt around their units' translations.

Every format the server takes (plain text, HTML, SRT, WebVTT, Markdown, Word and OpenDocument
text) keeps its structure: a plain-text file is one unit per line (line endings kept, blank lines
copied), the others are one unit per file (the server's document formats span lines: cues, blocks,
tags; a .docx or .odt travels as base64, as in an API request, and comes back as the same package
with only its text changed). JSONL and Parquet rows are one unit each, read from a named text
column; their output rows gain the translation and the identity columns. Errors name the file and
the line (InputError).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from handlers.text.documents import DocumentFormat

Kind = Literal["text", "html", "srt", "vtt", "markdown", "docx", "odt", "jsonl", "parquet"]
KIND_OF_SUFFIX: dict[str, Kind] = {
    ".txt": "text",
    ".text": "text",
    ".html": "html",
    ".htm": "html",
    ".srt": "srt",
    ".vtt": "vtt",
    ".md": "markdown",
    ".markdown": "markdown",
    ".docx": "docx",
    ".odt": "odt",
    ".jsonl": "jsonl",
    ".parquet": "parquet",
}
DOCUMENT_KINDS: tuple[Kind, ...] = ("html", "srt", "vtt", "markdown", "docx", "odt")
PACKAGE_KINDS: tuple[Kind, ...] = ("docx", "odt")  # zip packages: base64 in, base64 out
# Columns a JSONL or Parquet row gains (beside the translation column, `--output-column`).
IDENTITY_COLUMNS = {
    "model": "translation_model",
    "version": "translation_version",
    "variant": "translation_variant",
    "standin": "translation_standin",
}
ALTERNATIVES_COLUMN = "translation_alternatives"


class InputError(ValueError):
    """An input file cannot be read; the message names the file and the line."""


@dataclass(frozen=True)
class TableColumns:
    text: str = "text"
    translation: str = "translation"


def kind_of(path: Path) -> Kind | None:
    return KIND_OF_SUFFIX.get(path.suffix.lower())


def text_format(kind: Kind) -> DocumentFormat:
    """The server's "format" for a unit of this kind (table rows and text lines are plain text)."""
    return kind if kind in DOCUMENT_KINDS else "text"  # type: ignore[return-value]


def read_units(path: Path, kind: Kind, columns: TableColumns) -> list[str | None]:
    """Each unit's text, in file order; None where the file holds nothing to translate (a blank line,
    an empty cell), copied as it is."""
    if kind == "parquet":
        return [_cell(value) for value in _parquet_texts(path, columns)]
    if kind in PACKAGE_KINDS:
        return [base64.b64encode(path.read_bytes()).decode("ascii")]
    text = decode(path)
    if kind in DOCUMENT_KINDS:
        return [text if text.strip() else None]
    if kind == "text":
        return [_cell(line.rstrip("\r\n")) for line in lines(text)]
    return [_cell(_row_text(path, number, row, columns)) for number, row in _jsonl_rows(path, text)]


def write_output(
    source: Path,
    kind: Kind,
    columns: TableColumns,
    target: Path,
    translations: Sequence[str | None],
    alternatives: Sequence[Sequence[str]] | None,
    identity: dict[str, Any],
) -> None:
    """Write `target` (atomically) from the source file and its units' translations, in unit order."""
    staging = target.with_name(f".{target.name}.writing")
    target.parent.mkdir(parents=True, exist_ok=True)
    if kind == "parquet":
        _write_parquet(source, columns, staging, translations, alternatives, identity)
    elif kind in PACKAGE_KINDS:
        translated = translations[0]
        staging.write_bytes(source.read_bytes() if translated is None else _package(source, translated))
    else:
        staging.write_bytes(_rebuilt(source, kind, columns, translations, alternatives, identity).encode())
    staging.replace(target)


def decode(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise InputError(
            f"{path}: line {line}, byte {column}: not UTF-8 (0x{data[error.start]:02x}); "
            "convert the file to UTF-8 (e.g. iconv -f GB18030 -t UTF-8)"
        ) from None


def lines(text: str) -> list[str]:
    """The file's lines with their endings, cut at \\n only (JSON strings may hold U+2028)."""
    return _LINE.findall(text)


_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")


def _cell(text: str | None) -> str | None:
    """What the model gets: None for what the server would refuse as empty (copied as it is)."""
    return text if text is not None and text.strip() else None


def _rebuilt(
    source: Path,
    kind: Kind,
    columns: TableColumns,
    translations: Sequence[str | None],
    alternatives: Sequence[Sequence[str]] | None,
    identity: dict[str, Any],
) -> str:
    text = decode(source)
    if kind in DOCUMENT_KINDS:
        return translations[0] if translations[0] is not None else text
    if kind == "text":
        return "".join(
            line if translated is None else translated + line[len(line.rstrip("\r\n")) :]
            for line, translated in zip(lines(text), translations, strict=True)
        )
    rows = []
    for (_, row), index in zip(_jsonl_rows(source, text), range(len(translations)), strict=True):
        row[columns.translation] = translations[index]
        if alternatives is not None:
            row[ALTERNATIVES_COLUMN] = list(alternatives[index])
        row.update({column: identity[key] for key, column in IDENTITY_COLUMNS.items()})
        rows.append(json.dumps(row, ensure_ascii=False) + "\n")
    return "".join(rows)


def _package(source: Path, answer: str) -> bytes:
    try:
        return base64.b64decode(answer, validate=True)
    except binascii.Error:  # the server's answer for a package is always base64
        raise InputError(f"{source}: the translation came back as no base64 package") from None


def _jsonl_rows(path: Path, text: str) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for number, line in enumerate(lines(text), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(
                f"{path}: line {number}: not JSON ({error.msg} at column {error.colno})"
            ) from None
        except RecursionError:  # json's C reader gives up on deep nesting before a stack runs out
            raise InputError(f"{path}: line {number}: JSON nested too deeply to read") from None
        except ValueError as error:  # e.g. an integer of more than 4,300 digits (sys.int_info)
            raise InputError(f"{path}: line {number}: JSON that cannot be read ({error})") from None
        if not isinstance(row, dict):
            raise InputError(f"{path}: line {number}: expected a JSON object, got {type(row).__name__}")
        rows.append((number, row))
    return rows


def _row_text(path: Path, number: int, row: dict[str, Any], columns: TableColumns) -> str | None:
    value = row.get(columns.text)
    if value is not None and not isinstance(value, str):
        raise InputError(
            f"{path}: line {number}: column {columns.text!r} is {type(value).__name__}, not text"
        )
    if value is None and columns.text not in row:
        raise InputError(f"{path}: line {number}: no column {columns.text!r} (use --column to name it)")
    return value


def _parquet_texts(path: Path, columns: TableColumns) -> list[str | None]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as error:
        raise InputError(f"{path}: not a readable Parquet file ({error})") from None
    if columns.text not in table.column_names:
        raise InputError(f"{path}: no column {columns.text!r} (columns: {table.column_names}; use --column)")
    column = table.column(columns.text)
    if not pa.types.is_string(column.type) and not pa.types.is_large_string(column.type):
        raise InputError(f"{path}: column {columns.text!r} is {column.type}, not text")
    texts: list[str | None] = column.to_pylist()
    return texts


def _write_parquet(
    source: Path,
    columns: TableColumns,
    target: Path,
    translations: Sequence[str | None],
    alternatives: Sequence[Sequence[str]] | None,
    identity: dict[str, Any],
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    table = table.append_column(columns.translation, pa.array(list(translations), pa.string()))
    if alternatives is not None:
        table = table.append_column(ALTERNATIVES_COLUMN, pa.array([list(a) for a in alternatives]))
    for key, column in IDENTITY_COLUMNS.items():
        table = table.append_column(column, pa.array([identity[key]] * table.num_rows))
    pq.write_table(table, target)
