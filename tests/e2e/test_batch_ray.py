"""The batch job answers as the server does, byte for byte: a few hundred sentences in every format,
through `python -m batch --engine ray` on a real local Ray, .docx and .odt included, against a real
TorchServe serving the same int8 archive; and the fp32 archive against the same server's fp32
version.

Per-row int8 keeps a sentence's ids independent of what it is decoded beside, so the batch job's
shards, length order and actors cannot change a byte. One Ray start for the module (the job's own).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from archive.tatoeba import REPO_ROOT, read_blocks
from batch.formats import lines
from serving.torchserve import TorchServe
from tests.e2e.test_formats import MARKDOWN, SRT, VTT
from tests.unit.test_office import odt_file, word_file

pytestmark = [pytest.mark.e2e, pytest.mark.long(seconds=55)]

SOURCES = [block.source for block in read_blocks()]
HTML = "<html><body><h1>欢迎</h1><p>今天<b>天气</b>很好。我们去公园吧！</p><p>Price: 5 元</p></body></html>\n"
MAX_TEXTS = 16  # the server's max_texts_per_request


def server_translations(server: TorchServe, texts: list[str], **options: Any) -> Iterator[dict[str, Any]]:
    """The server's answer for each text (sent 16 to a request), as {"translation", "alternatives"}."""
    for start in range(0, len(texts), MAX_TEXTS):
        chunk = texts[start : start + MAX_TEXTS]
        response = server.client.translate(list(chunk), **options)
        assert response.status_code == 200, response.text
        body = response.json()
        alternatives = body.get("alternatives", [[] for _ in chunk])
        for translation, others in zip(body["translations"], alternatives, strict=True):
            yield {"translation": translation, "alternatives": others}


def run_batch(corpus: Path, out: Path, archive: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "batch", "translate", str(corpus), str(out), "--archive", str(archive)]
    command += ["--engine", "ray"]  # on one host the default is local processes
    return subprocess.run(
        [*command, *options], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False
    )


def test_batch_job_on_local_ray_answers_as_the_server_byte_for_byte(
    server: TorchServe, tiny_store: Path, tmp_path: Path
) -> None:
    corpus, out = tmp_path / "in", tmp_path / "out"
    (corpus / "docs").mkdir(parents=True)
    text_lines = [*SOURCES[:150], "", SOURCES[0] + "\r"]  # a blank line, a CRLF one, a repeat
    (corpus / "lines.txt").write_bytes("\n".join(text_lines).encode() + b"\n")
    rows = [{"id": n, "text": text} for n, text in enumerate(SOURCES[150:190])]
    (corpus / "rows.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    pq.write_table(pa.table({"text": SOURCES[190:220]}), corpus / "table.parquet")
    documents = {"docs/a.html": HTML, "docs/b.srt": SRT, "docs/c.vtt": VTT, "docs/d.md": MARKDOWN}
    for name, text in documents.items():
        (corpus / name).write_bytes(text.encode())
    packages = {"docs/e.docx": word_file(), "docs/f.odt": odt_file()}
    for name, data in packages.items():
        (corpus / name).write_bytes(data)

    job = run_batch(corpus, out, tiny_store / "zh_en_int8.mar", "--shard-chars", "1000")
    assert job.returncode == 0, job.stderr
    assert "9 files written" in job.stdout

    served = [answer["translation"] for answer in server_translations(server, [*SOURCES[:150], SOURCES[0]])]
    expected_lines = [*served[:150], "", served[150] + "\r"]
    assert (out / "lines.txt").read_bytes() == "\n".join(expected_lines).encode() + b"\n"
    written = [json.loads(line) for line in lines((out / "rows.jsonl").read_text())]
    served = [answer["translation"] for answer in server_translations(server, SOURCES[150:190])]
    assert [row["translation"] for row in written] == served
    assert [row["id"] for row in written] == list(range(40))
    table = pq.read_table(out / "table.parquet").to_pydict()
    assert table["translation"] == [a["translation"] for a in server_translations(server, SOURCES[190:220])]
    for name, text in documents.items():
        response = server.client.translate(text, format=name.rsplit(".")[-1].replace("md", "markdown"))
        assert response.status_code == 200, response.text
        assert (out / name).read_bytes() == response.json()["translation"].encode(), name
        assert json.loads((out / f"{name}.batch.json").read_text())["version"] == response.json()["version"]
    for name, data in packages.items():  # base64 in and out, as an API client sends them
        response = server.client.translate(base64.b64encode(data).decode(), format=name.rsplit(".")[-1])
        assert response.status_code == 200, response.text
        assert (out / name).read_bytes() == base64.b64decode(response.json()["translation"]), name


def test_beams_glossary_and_alternatives_as_the_api_takes_them(
    server: TorchServe, tiny_store: Path, tmp_path: Path
) -> None:
    """The same options through the job (in process, no Ray) and through the API."""
    corpus, out = tmp_path / "in", tmp_path / "out"
    corpus.mkdir()
    texts = [f"汤姆说{source}" for source in SOURCES[220:250]]
    (corpus / "rows.jsonl").write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    (tmp_path / "terms.tsv").write_text("汤姆\tTom\n")

    options = ("--beams", "3", "--alternatives", "2", "--glossary", str(tmp_path / "terms.tsv"))
    job = run_batch(corpus, out, tiny_store / "zh_en_int8.mar", *options, "--engine", "local")
    assert job.returncode == 0, job.stderr

    served = list(server_translations(server, texts, num_beams=3, alternatives=2, glossary={"汤姆": "Tom"}))
    written = [json.loads(line) for line in lines((out / "rows.jsonl").read_text())]
    assert [row["translation"] for row in written] == [answer["translation"] for answer in served]
    assert [row["translation_alternatives"] for row in written] == [
        answer["alternatives"] for answer in served
    ]
    assert all("Tom" in row["translation"] for row in written)
    assert any(row["translation_alternatives"] for row in written)


def test_the_fp32_archive_answers_as_the_fp32_version_served(
    server: TorchServe, tiny_store: Path, tmp_path: Path
) -> None:
    """fp32 too, byte for byte: the job with the fp32 archive (in process), against the session's
    server with its fp32 version registered for this test and removed after it."""
    corpus, out = tmp_path / "in", tmp_path / "out"
    corpus.mkdir()
    texts = SOURCES[250:330]
    (corpus / "lines.txt").write_text("\n".join(texts) + "\n")
    job = run_batch(corpus, out, tiny_store / "zh_en_fp32.mar", "--engine", "local")
    assert job.returncode == 0, job.stderr

    client = server.client
    client.register("zh_en_fp32.mar")
    try:
        client.wait_ready("1.0-fp32", 1, timeout=120)
        served = [answer["translation"] for answer in server_translations(server, texts, version="1.0-fp32")]
    finally:
        client.unregister("1.0-fp32")
    assert (out / "lines.txt").read_text() == "\n".join(served) + "\n"
    assert json.loads((out / "lines.txt.batch.json").read_text())["version"] == "1.0-fp32"


@pytest.mark.soak  # a fault drill: `make soak` (and CI), not `make test`
def test_a_killed_job_leaves_no_ray_process_behind(tiny_store: Path, tmp_path: Path) -> None:
    """A SIGKILLed job runs no code: batch.ray_reaper's watcher ends its local Ray session for it."""
    corpus, out = tmp_path / "lines.txt", tmp_path / "out"
    corpus.write_text("\n".join(SOURCES[:400]) + "\n")
    command = [sys.executable, "-m", "batch", "translate", str(corpus), str(out), "--engine", "ray"]
    command += ["--archive", str(tiny_store / "zh_en_int8.mar"), "--shard-units", "4"]
    job = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while not list(out.glob(".batch/*/shard-*.jsonl")):  # Ray and its actors at work
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()[1]
        time.sleep(0.05)
    ray_processes = psutil.Process(job.pid).children(recursive=True)
    assert any("raylet" in " ".join(process.cmdline()) for process in ray_processes)
    job.kill()
    job.wait()
    _, alive = psutil.wait_procs(ray_processes, timeout=30)
    assert not alive, [" ".join(process.cmdline())[:120] for process in alive]
