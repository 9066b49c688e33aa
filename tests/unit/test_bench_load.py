"""bench.load's guard: Locust traffic goes to this machine only, refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.common import distinct_sentences, sample_sentences
from bench.load import LoadSpec, run_load


@pytest.mark.parametrize(
    "host", ["http://10.0.0.1:8080", "http://example.com", "http://127.0.0.1.example.com"]
)
def test_load_refuses_other_hosts(host: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="only targets this machine"):
        run_load(LoadSpec(host), tmp_path)
    assert not any(tmp_path.iterdir())  # refused before Locust ran or wrote anything


def test_a_load_draws_each_source_once(tiny_model_dir: Path) -> None:
    """The image serves with its sentence cache on: a repeated source would be answered without the
    model, so the pool a load walks through in order holds no source twice, past the test set's own."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    pool = distinct_sentences(tokenizer, 12_000)
    sources = [s.source for s in pool]
    assert len(set(sources)) == len(sources) == 12_000
    assert sources == [s.source for s in distinct_sentences(tokenizer, 12_000)]  # seeded: runs compare
    assert sources[:50] != [s.source for s in sample_sentences(tokenizer)[:50]]  # shuffled, not file order
