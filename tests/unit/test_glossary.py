"""Glossaries: terms matched longest first, never inside a protected span, each coming back once
as its target term, with fake models that echo or drop the placeholder tokens."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from handlers.handler_config import HandlerConfig
from handlers.text.documents import plan_document
from handlers.text.glossary import MAX_FILE_ENTRIES, Glossary, GlossaryFileError, load_tsv
from handlers.wire.envelopes import read_body
from handlers.wire.errors import InvalidRequest

GLOSSARY = Glossary({"北京": "Beijing", "北京大学": "Peking University", "大学": "university"})


def render(text: str, model: str = "echo", glossary: Glossary = GLOSSARY, text_format: str = "text") -> str:
    document = plan_document(text, text_format, glossary)  # type: ignore[arg-type]
    if model == "echo":
        outputs = list(document.model_inputs)
    else:  # a model that loses every placeholder token
        outputs = [re.sub(r"ZX\d+", "", text) for text in document.model_inputs]
    return document.render(outputs).text


def test_the_longest_term_wins_and_each_occurrence_is_one_token() -> None:
    document = plan_document("我在北京大学学习，北京很大。", glossary=GLOSSARY)
    assert document.model_inputs == ["我在ZX1学习，ZX2很大。"]
    assert document.glossary_hits == 2
    assert render("我在北京大学学习，北京很大。") == "我在Peking University学习，Beijing很大。"


def test_a_term_at_either_end_stays_in_the_sentence_for_the_model_to_place() -> None:
    # Unlike a URL at the start, which never reaches the model, a term is a word of the sentence.
    assert plan_document("北京很大。", glossary=GLOSSARY).model_inputs == ["ZX1很大。"]
    assert plan_document("https://a.b/c 很大。").model_inputs == ["很大。"]


def test_a_term_is_never_matched_inside_a_protected_span() -> None:
    text = '见 {{北京}} 和 <a title="北京"> 以及北京。'
    document = plan_document(text, glossary=GLOSSARY)
    assert document.glossary_hits == 1
    assert render(text) == '见 {{北京}} 和 <a title="北京"> 以及Beijing。'


def test_a_dropped_term_is_appended_once_with_a_warning() -> None:
    document = plan_document("我爱北京。", glossary=GLOSSARY)
    rendered = document.render(["I love ."])
    assert rendered.text == "I love . Beijing" and rendered.dropped == ["Beijing"]
    assert render("我爱北京。", model="drop").count("Beijing") == 1


def test_the_source_side_shows_what_was_sent() -> None:
    document = plan_document("我爱北京。", glossary=GLOSSARY)
    (pair,) = document.render(["I love ZX1."]).pairs
    assert pair.source == "我爱北京。" and pair.translation == "I love Beijing."


def test_a_sentence_that_is_only_a_term_still_gets_the_term() -> None:
    document = plan_document("北京！", glossary=GLOSSARY)
    assert document.model_inputs == []  # nothing Chinese left for the model
    assert document.render([]).text == "Beijing！"


def test_terms_in_html_runs_and_not_in_markup() -> None:
    text = '<p title="北京">我爱<b>北京</b>。</p>'
    assert render(text, text_format="html") == '<p title="北京">我爱<b>Beijing</b>。</p>'


def test_without_a_glossary_nothing_changes() -> None:
    text = "我在北京大学学习。"
    assert plan_document(text).model_inputs == [text] and plan_document(text).glossary_hits == 0


def test_request_entries_win_over_the_deployment() -> None:
    merged = GLOSSARY.with_request({"北京": "Peking"})
    assert merged.terms["北京"] == "Peking" and merged.terms["大学"] == "university"
    assert GLOSSARY.with_request({}) is GLOSSARY


def test_the_deployment_file(tmp_path: Path) -> None:
    tsv = tmp_path / "glossary.tsv"
    tsv.write_text("# comment\n\n北京\tBeijing\n大学\tuniversity\n", encoding="utf-8")
    assert load_tsv(tsv, 100).terms == {"北京": "Beijing", "大学": "university"}
    tsv.write_text("北京 Beijing\n", encoding="utf-8")
    with pytest.raises(GlossaryFileError, match="line 1"):
        load_tsv(tsv, 100)
    tsv.write_text("北京\t" + "B" * 101 + "\n", encoding="utf-8")
    with pytest.raises(GlossaryFileError, match="over 100 characters"):
        load_tsv(tsv, 100)
    tsv.write_text("".join(f"词{i}\tterm{i}\n" for i in range(MAX_FILE_ENTRIES + 1)), encoding="utf-8")
    with pytest.raises(GlossaryFileError, match="entries"):
        load_tsv(tsv, 100)


CONFIG = HandlerConfig(max_glossary_entries=2, max_glossary_chars=10)


def parse(glossary: object) -> object:
    envelope, payload = read_body({"body": {"text": "你好", "glossary": glossary}})
    return envelope.parse(payload, CONFIG)


@pytest.mark.parametrize(
    ("glossary", "status", "fragment"),
    [
        (["北京"], 400, "must be an object"),
        ({"北京": 1}, 400, "non-empty string"),
        ({" ": "x"}, 400, "non-empty"),
        ({"一": "a", "二": "b", "三": "c"}, 413, "max_glossary_entries (2)"),
        ({"北京": "B" * 11}, 413, "at most 10 characters"),
    ],
)
def test_request_glossaries_are_bounded(glossary: object, status: int, fragment: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(glossary)
    assert caught.value.status == status and fragment in caught.value.message


def test_a_request_glossary_is_kept_as_sent() -> None:
    assert parse({"北京": "Beijing"}).glossary == (("北京", "Beijing"),)  # type: ignore[attr-defined]


def test_the_yaml_names_a_file_in_the_archive_and_the_builder_needs_it(tmp_path: Path) -> None:
    from archive.build import ArchiveSpec, _glossary
    from handlers.handler_config import ConfigError

    with pytest.raises(ConfigError, match="file name in the archive"):
        HandlerConfig(glossary_file="../etc/terms.tsv")
    (tmp_path / "zh_en_int8.yaml").write_text("handler:\n  glossary_file: terms.tsv\n")
    spec = ArchiveSpec("int8", tmp_path, tmp_path / "store", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"terms\.tsv"):
        _glossary(spec)
    (tmp_path / "terms.tsv").write_text("北京\tBeijing\n", encoding="utf-8")
    assert _glossary(spec) == [tmp_path / "terms.tsv"]
