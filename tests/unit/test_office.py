"""Word and OpenDocument files through handlers.text.office: made with python-docx and odfpy as
their users' tools would make them (headings, a table, bold runs), translated with a fake
translation, and read back with the same libraries: the structure and formatting come back, only
the text changes. Then what a hostile file can do: a zip bomb, too many entries, broken XML, and
tags built to make a parser slow, each within a time budget.
"""

from __future__ import annotations

import base64
import contextlib
import io
import re
import time
import zipfile

import docx
import pytest
from odf import teletype
from odf.opendocument import OpenDocumentText, load
from odf.style import Style, TextProperties
from odf.table import Table, TableCell, TableColumn, TableRow
from odf.text import H, P, Span

from handlers.errors import OverLimit, TooCostly, TooManyProtectedSpans, Unparsable
from handlers.text.budget import text_budget
from handlers.text.documents import plan_document
from handlers.text.office import MAX_TAGS, OfficeFormat, read_office
from handlers.text.protection import MAX_PROTECTED_SPANS
from tests.adversarial import (
    MAX_CHARS,
    OFFICE_ENTRIES,
    OFFICE_SHELL,
    hostile_packages,
    office_file,
    office_xml_shapes,
    zip_package,
)

BUDGET_S = 1.0


def fake_translation(fragment: str) -> str:
    """Every model input becomes "EN<its length>", through the same plan and render as any HTML."""
    document = plan_document(fragment, "html")
    return document.render([f"EN{len(source)}" for source in document.model_inputs]).text


def word_file() -> bytes:
    made = docx.Document()
    made.add_heading("第一章", level=1)
    paragraph = made.add_paragraph("汤姆")
    paragraph.add_run("不会").bold = True
    paragraph.add_run("同意的。")
    made.add_paragraph("English only, kept as it is.")
    table = made.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "我要看病。"
    table.cell(0, 1).text = "42"
    out = io.BytesIO()
    made.save(out)
    return out.getvalue()


def odt_file() -> bytes:
    made = OpenDocumentText()
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    made.automaticstyles.addElement(bold)
    made.text.addElement(H(outlinelevel=1, text="第一章"))
    paragraph = P(text="汤姆")
    paragraph.addElement(Span(stylename=bold, text="不会"))
    paragraph.addText("同意的。")
    made.text.addElement(paragraph)
    made.text.addElement(P(text="English only, kept as it is."))
    table = Table(name="T")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    row = TableRow()
    for text in ("我要看病。", "42"):
        cell = TableCell()
        cell.addElement(P(text=text))
        row.addElement(cell)
    table.addElement(row)
    made.text.addElement(table)
    out = io.BytesIO()
    made.save(out)
    return out.getvalue()


def test_a_word_file_keeps_its_headings_table_and_bold_run() -> None:
    office = read_office(word_file(), "docx")
    assert "English only" not in office.html  # nothing to translate: not sent
    assert re.search(r"<span id=\d+>不会</span>", office.html), office.html
    back = docx.Document(io.BytesIO(office.rebuild(fake_translation(office.html))))
    heading, sentence, english = back.paragraphs[:3]
    assert heading.style is not None and heading.style.name == "Heading 1" and heading.text.startswith("EN")
    assert english.text == "English only, kept as it is."
    # The bold run is still bold and still between the others; the run count is the same.
    assert [run.bold for run in sentence.runs] == [None, True, None]
    assert all(run.text for run in sentence.runs) or sentence.text.startswith("EN")
    cell, number = back.tables[0].rows[0].cells
    assert cell.text.startswith("EN") and number.text == "42"


def test_an_odt_keeps_its_heading_table_and_bold_span() -> None:
    office = read_office(odt_file(), "odt")
    assert "English only" not in office.html
    back = load(io.BytesIO(office.rebuild(fake_translation(office.html))))
    headings = back.getElementsByType(H)
    assert [teletype.extractText(h).startswith("EN") for h in headings] == [True]
    paragraphs = [teletype.extractText(p) for p in back.getElementsByType(P)]
    assert "English only, kept as it is." in paragraphs and "42" in paragraphs
    spans = back.getElementsByType(Span)
    assert [span.getAttribute("stylename") for span in spans] == ["Bold"]
    assert not any(re.search("[\u4e00-\u9fff]", text) for text in paragraphs)


def test_an_odt_rebuilt_keeps_its_mimetype_first_and_stored() -> None:
    sent = odt_file()  # made once: its meta.xml and entries carry the time they were made
    office = read_office(sent, "odt")
    rebuilt = zipfile.ZipFile(io.BytesIO(office.rebuild(fake_translation(office.html))))
    first = rebuilt.infolist()[0]
    assert (first.filename, first.compress_type) == ("mimetype", zipfile.ZIP_STORED)
    original = zipfile.ZipFile(io.BytesIO(sent))
    assert [e.filename for e in rebuilt.infolist()] == [e.filename for e in original.infolist()]
    for entry in original.infolist():  # every entry but the main part, byte for byte
        if entry.filename != "content.xml":
            assert rebuilt.read(entry.filename) == original.read(entry.filename), entry.filename


def test_an_identity_translation_gives_the_same_text_back() -> None:
    office = read_office(word_file(), "docx")
    back = docx.Document(io.BytesIO(office.rebuild(office.html)))
    original = docx.Document(io.BytesIO(word_file()))
    assert [p.text for p in back.paragraphs] == [p.text for p in original.paragraphs]
    assert [[r.text for r in p.runs] for p in back.paragraphs] == [
        [r.text for r in p.runs] for p in original.paragraphs
    ]


def test_markup_and_entities_in_the_text_stay_text() -> None:
    made = docx.Document()
    made.add_paragraph("价格 <5 & >3 的“东西”。")
    out = io.BytesIO()
    made.save(out)
    office = read_office(out.getvalue(), "docx")
    back = docx.Document(io.BytesIO(office.rebuild(office.html)))
    assert back.paragraphs[0].text == "价格 <5 & >3 的“东西”。"


HOSTILE = {shape: data for kind in OFFICE_ENTRIES for shape, data in hostile_packages(kind)}
HOSTILE |= {"docx: a zip without the main part": zip_package({"[Content_Types].xml": b""})}
OVER_LIMIT = ("zip bomb", "2,000 entries")  # the rest are not files of their kind: Unparsable


@pytest.mark.timed  # wall-clock bounds: run alone
@pytest.mark.parametrize("shape", list(HOSTILE))
def test_hostile_packages_are_refused_at_once(shape: str) -> None:
    kind: OfficeFormat = "docx" if shape.startswith("docx") else "odt"
    error = OverLimit if any(name in shape for name in OVER_LIMIT) else Unparsable
    began = time.monotonic()
    with pytest.raises(error):
        read_office(HOSTILE[shape], kind)
    assert time.monotonic() - began < BUDGET_S  # the bomb is inflated up to the cap, 4 MiB


# Each main part just under the 4 MiB cap (tests/adversarial.py).
SLOW_XML = {shape: data for kind in OFFICE_ENTRIES for shape, data in office_xml_shapes(kind, MAX_CHARS)}


@pytest.mark.timed
@pytest.mark.parametrize("shape", list(SLOW_XML))
def test_xml_built_to_be_slow_is_done_or_refused_within_the_text_budget(shape: str) -> None:
    """As every text stage: linear, and under the request's budget (handlers/text/budget.py) it
    finishes, or is refused (too many tags or spans, or too costly), never more than a moment past
    the budget."""
    kind: OfficeFormat = "docx" if shape.startswith("docx") else "odt"
    data = office_file(kind, SLOW_XML[shape])
    began = time.monotonic()
    refusals = (TooCostly, OverLimit, TooManyProtectedSpans)
    with contextlib.suppress(*refusals), text_budget(BUDGET_S / 2, "reading the file"):
        office = read_office(data, kind)
        office.rebuild(office.html)
    # The budget, then at most one step past it (inflating or deflating the 4 MiB part, say).
    assert time.monotonic() - began < BUDGET_S * 1.5, shape


def damaged(data: bytes, at: int) -> str:
    """`data` with 16 bytes from `at` on overwritten, as base64."""
    return base64.b64encode(data[:at] + b"\xff" * 16 + data[at + 16 :]).decode()


@pytest.mark.parametrize("text", ["汤姆不会同意的", "not base64!", "UEsDBA=="])
def test_text_that_is_no_file_is_refused_as_unparsable(text: str) -> None:
    """What a client may put in "text" with format docx: a 400 (Unparsable), never a crash (a 500)."""
    with pytest.raises(Unparsable):
        plan_document(text, "docx")


@pytest.mark.parametrize("at", range(0, 36_000, 1_500))
def test_a_damaged_file_is_refused_or_read_never_a_crash(at: int) -> None:
    """16 bytes overwritten somewhere in a .docx: refused as Unparsable, or read if the damage
    missed what is read; any other exception would be the handler's 500."""
    with contextlib.suppress(Unparsable, OverLimit):
        plan_document(damaged(word_file(), at), "docx")


def test_a_file_past_the_tag_cap_is_refused_naming_it() -> None:
    """MAX_TAGS bounds the reading: 550,000 short tags fit in the 4 MiB part and took 4 s to read."""
    head, tail = OFFICE_SHELL["docx"]
    xml = head + "<w:p><w:r><w:t>你好</w:t></w:r></w:p>" * (MAX_TAGS // 6) + tail
    with pytest.raises(OverLimit, match=f"more than {MAX_TAGS} tags"):
        read_office(office_file("docx", xml.encode()), "docx")
    fewer = head + "<w:p><w:r><w:t>你好</w:t></w:r></w:p>" * (MAX_TAGS // 6 - 10) + tail
    assert read_office(office_file("docx", fewer.encode()), "docx").html.count("<p ") == MAX_TAGS // 6 - 10


def test_a_paragraph_of_more_formatting_changes_than_spans_is_refused_before_its_html() -> None:
    head, tail = OFFICE_SHELL["docx"]
    bold, plain = "<w:r><w:rPr><w:b/></w:rPr><w:t>你</w:t></w:r>", "<w:r><w:t>好</w:t></w:r>"
    many = head + "<w:p>" + (plain + bold) * (MAX_PROTECTED_SPANS + 1) + "</w:p>" + tail
    with pytest.raises(TooManyProtectedSpans, match="paragraph 0 changes its formatting"):
        read_office(office_file("docx", many.encode()), "docx")
    enough = head + "<w:p>" + (plain + bold) * (MAX_PROTECTED_SPANS // 2) + "</w:p>" + tail
    html = read_office(office_file("docx", enough.encode()), "docx").html
    assert html.count("<span") == MAX_PROTECTED_SPANS // 2
