"""The batch job's readers on adversarial files: each is read in a moment, or refused with an
InputError that names the file and the line (a bad file fails alone, the job goes on).

Wall-clock bounds, so the module runs alone in make test's second step (marked timed).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from batch.formats import InputError, Kind, TableColumns, read_units

pytestmark = pytest.mark.timed
BUDGET_S = 3.0  # each file below is 2-4 MB; the slowest took 0.7 s on a 2-vCPU AMD EPYC host

READABLE: dict[str, tuple[Kind, str, int]] = {
    "one line of 2,000,000 carriage returns": ("text", "汤" + "\r" * 2_000_000 + "\n", 1),
    "2,000,000 empty lines": ("text", "\n" * 2_000_000, 2_000_000),
    "every kind of line break but \\n inside lines": (
        "text",
        "一\r二\u2028三\x85四\x0b五\x0c六\n" * 100_000,
        100_000,
    ),
    "100,000 rows with U+2028 in their text": ("jsonl", '{"text": "a\\u2028b"}\n' * 100_000, 100_000),
    "a row of 1,000,000 keys": (
        "jsonl",
        "{" + ",".join(f'"k{n}": 0' for n in range(1_000_000)) + ', "text": "x"}\n',
        1,
    ),
}
REFUSED: dict[str, tuple[str, str]] = {
    "nesting 100,000 deep": (
        '{"text": "a"}\n{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
        "line 2: JSON nested too deeply",
    ),
    "an integer of 100,000 digits": (
        '{"text": "a", "n": ' + "9" * 100_000 + "}\n",
        "line 1: JSON that cannot be read",
    ),
    "a truncated row": ('{"text": "a"}\n{"text": "b\n', "line 2: not JSON"),
}


@pytest.mark.parametrize("name", READABLE)
def test_an_adversarial_file_is_read_in_a_moment(name: str, tmp_path: Path) -> None:
    kind, text, units = READABLE[name]
    path = tmp_path / f"input.{'txt' if kind == 'text' else kind}"
    path.write_text(text)
    started = time.perf_counter()
    read = read_units(path, kind, TableColumns())
    assert time.perf_counter() - started < BUDGET_S
    assert len(read) == units


@pytest.mark.parametrize("name", REFUSED)
def test_an_unreadable_row_is_an_input_error_naming_file_and_line(name: str, tmp_path: Path) -> None:
    text, message = REFUSED[name]
    path = tmp_path / "rows.jsonl"
    path.write_text(text)
    started = time.perf_counter()
    with pytest.raises(InputError) as refused:
        read_units(path, "jsonl", TableColumns())
    assert time.perf_counter() - started < BUDGET_S
    assert str(refused.value).startswith(f"{path}: {message}"), str(refused.value)
