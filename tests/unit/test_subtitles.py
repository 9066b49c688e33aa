"""SRT and WebVTT: each cue's text is translated and every other byte comes back as sent.

The round trip runs on generated files: CRLF or LF, a BOM, extra blank lines, "," or "." timings,
SRT coordinates, WebVTT identifiers, settings, NOTE/STYLE/REGION blocks, styling tags, entities.
"""

from __future__ import annotations

import pytest
import srt
from hypothesis import given, settings
from hypothesis import strategies as st
from webvtt.vtt import _iter_blocks_of_lines

from handlers.errors import Unparsable
from handlers.text.documents import plan_document
from handlers.text.subtitles import _blocks, subtitle_parts
from handlers.text.wrapping import source_lines
from tests.examples import examples
from tests.unit.round_trip import chinese_left, lines_of, marked, skeleton, translated, untranslated

WORDS = ["你好", "我们今天要去", "公园玩", "电影", "。", "，", "！", "？", "Hello", "world", "3.5", " ", "  "]
SRT_TAGS = ["<i>", "</i>", "<b>", "</b>", "<u>", "</u>", '<font color="#ffff00">', "</font>", "{\\an8}"]
VTT_TAGS = [
    *("<i>", "</i>", "<b>", "</b>", "<u>", "</u>", "<c.yellow>", "<c.yellow.bg_blue>", "</c>"),
    *("<v Roger>", "<v.loud 罗杰>", "</v>", "<ruby>", "<rt>", "</rt>", "</ruby>", "<00:00:02.500>"),
    *("<lang en>", "</lang>", "&amp;", "&lt;", "&gt;", "&nbsp;", "&lrm;"),
]
EOL = st.sampled_from(["\n", "\r\n"])


@st.composite
def cue_text(draw: st.DrawFn, tags: list[str]) -> str:
    lines = []
    for _ in range(draw(st.integers(1, 3))):
        opening = draw(st.sampled_from(["", "", *tags])) + draw(st.sampled_from(["", "", "- ", "-"]))
        words = draw(st.lists(st.sampled_from(WORDS + tags), min_size=1, max_size=6))
        line = opening + "".join(words)
        lines.append(line if line.strip() else "你好")
    return "\n".join(lines)


@st.composite
def srt_files(draw: st.DrawFn) -> str:
    def time() -> str:
        h, m, s, ms = (draw(st.integers(0, top)) for top in (99, 59, 59, 999))
        return f"{h:02d}:{m:02d}:{s:02d}{draw(st.sampled_from([',', ',', '.']))}{ms:03d}"

    cues = []
    for index in range(draw(st.integers(0, 4))):
        number = draw(st.sampled_from([f"{index + 1}\n", f"{index + 1}\n", ""]))
        arrow = draw(st.sampled_from([" --> ", "-->", "  -->  "]))
        coordinates = draw(st.sampled_from(["", "", " X1:40 X2:600 Y1:20 Y2:50"]))
        cues.append(f"{number}{time()}{arrow}{time()}{coordinates}\n{draw(cue_text(SRT_TAGS))}")
    text = draw(st.sampled_from(["", "\ufeff", "\n"])) + draw(st.sampled_from(["\n\n", "\n\n\n"])).join(cues)
    text += draw(st.sampled_from(["", "\n", "\n\n"]))
    return text.replace("\n", draw(EOL))


@st.composite
def vtt_files(draw: st.DrawFn) -> str:
    def time() -> str:
        h, m, s, ms = (draw(st.integers(0, top)) for top in (99, 59, 59, 999))
        return draw(st.sampled_from([f"{h:02d}:{m:02d}:{s:02d}.{ms:03d}", f"{m:02d}:{s:02d}.{ms:03d}"]))

    header = (
        "WEBVTT"
        + draw(st.sampled_from(["", " - 中文字幕"]))
        + draw(st.sampled_from(["", "\nKind: captions"]))
    )
    blocks = [header]
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["cue", "cue", "cue", "note", "style", "region"]))
        if kind == "cue":
            identifier = draw(st.sampled_from(["", "1\n", "intro\n", "第一句\n"]))
            cue_settings = draw(
                st.sampled_from(["", " align:start", " line:0 position:10%,line-left size:50%"])
            )
            blocks.append(f"{identifier}{time()} --> {time()}{cue_settings}\n{draw(cue_text(VTT_TAGS))}")
        else:
            blocks.append(
                {
                    "note": draw(st.sampled_from(["NOTE 这是注释", "NOTE\n多行注释\n第二行"])),
                    "style": "STYLE\n::cue(.yellow) { color: yellow; }",
                    "region": "REGION\nid:fred\nwidth:40%",
                }[kind]
            )
    text = draw(st.sampled_from(["", "\ufeff"])) + draw(st.sampled_from(["\n\n", "\n\n\n"])).join(blocks)
    text += draw(st.sampled_from(["", "\n", "\n\n"]))
    return text.replace("\n", draw(EOL))


FILES = {"srt": srt_files(), "vtt": vtt_files()}


@pytest.mark.parametrize("kind", FILES)
@settings(max_examples=examples(300), deadline=None)
@given(data=st.data())
def test_untranslated_cues_give_the_file_back_byte_for_byte(kind: str, data: st.DataObject) -> None:
    text = data.draw(FILES[kind])
    assert untranslated(plan_document(text, kind)) == text  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", FILES)
@settings(max_examples=examples(300), deadline=None)
@given(data=st.data())
def test_a_translation_changes_cue_text_only(kind: str, data: st.DataObject) -> None:
    text = data.draw(FILES[kind])
    output = translated(text, kind)  # type: ignore[arg-type]
    parts, after = subtitle_parts(text, kind), subtitle_parts(output, kind)  # type: ignore[arg-type]
    # Numbers, timings, settings, headers, NOTE/STYLE/REGION blocks and blank lines as sent; no
    # Chinese left in any cue.
    assert skeleton(after) == skeleton(parts)
    assert chinese_left(after) == []


@settings(max_examples=examples(300), deadline=None)
@given(vtt_files())
def test_vtt_blocks_are_cut_as_webvtt_py_cuts_them(text: str) -> None:
    start = 1 if text.startswith("\ufeff") else 0
    lines = source_lines(text, start)
    ours = [[text[slice(*line)] for line in block] for block in _blocks(text, lines)]
    theirs = list(_iter_blocks_of_lines([text[slice(*line)] for line in lines]))
    assert ours == theirs


def test_no_cut_leaves_a_number_alone_on_a_cues_last_line() -> None:
    """Found by test_a_translation_changes_cue_text_only: the tag of "<i>3.5" went to the line
    above and "3.5" alone ended the cue, which SRT readers took as the next cue's number."""
    text = "1\n00:00:00,000 --> 00:00:00,000\n你好\nHello\n<i>3.5\n\n00:00:00,000 --> 00:00:00,000\n你好"
    output = translated(text, "srt")
    assert [cue.index for cue in srt.parse(output)] == [cue.index for cue in srt.parse(text)] == [1, None]
    assert [cue.content.endswith("3.5") for cue in srt.parse(output)] == [True, False]
    assert skeleton(subtitle_parts(output, "srt")) == skeleton(subtitle_parts(text, "srt"))


SRT = (
    "1\r\n00:00:01,000 --> 00:00:04,000 X1:40 X2:600 Y1:20 Y2:50\r\n"
    "{\\an8}<i>我们今天要去</i>\r\n公园玩。\r\n\r\n"
    "2\r\n00:00:05.500 --> 00:00:07,000\r\n{\\an8}- 你好吗？\r\n- <b>我很好</b>。\r\n\r\n\r\n"
    "3\r\n00:00:08,000 --> 00:00:09,000\r\nOK, see you.\r\n"
)


def test_srt_keeps_numbers_timings_coordinates_and_tags() -> None:
    document = plan_document(SRT, "srt")
    # The two lines of cue 1 are one sentence: the model sees them joined. The dialogue lines of
    # cue 2 are two speakers, two sentences; cue 3 has no Chinese and is not sent.
    assert document.model_inputs == ["我们今天要去ZX1 公园玩。", "你好吗？", "我很好ZX1。"]
    rendered = document.render(["We are going ZX1 to the park today.", "How are you?", "I am ZX1 fine."])
    assert rendered.text == SRT.replace(
        "<i>我们今天要去</i>\r\n公园玩。", "<i>We are going </i>\r\nto the park today."
    ).replace("{\\an8}- 你好吗？\r\n- <b>我很好</b>。", "{\\an8}- How are you?\r\n- <b>I am </b> fine.")
    assert rendered.dropped == []


def test_a_cue_line_break_inside_a_sentence_moves_with_the_translation() -> None:
    text = "1\n00:00:01,000 --> 00:00:04,000\n他昨天晚上在家里\n看了一部很长的电影。\n"
    document = plan_document(text, "srt")
    assert document.model_inputs == ["他昨天晚上在家里看了一部很长的电影。"]
    output = document.render(["Last night he watched a very long film at home."]).text
    # Two lines as sent, cut at the space nearest the middle; never a blank line inside the cue.
    assert output.endswith("\nLast night he watched a\nvery long film at home.\n")
    assert lines_of(output) == lines_of(text)


def test_a_cue_breaks_its_translation_at_a_space_only_where_no_new_line_would_look_like_a_dash() -> None:
    text = "1\n00:00:01,000 --> 00:00:02,000\n温度从零下五度\n变成了十度。\n"
    output = plan_document(text, "srt").render(["It went from - 5 degrees to 10 degrees."]).text
    assert "\n- " not in output and lines_of(output) == lines_of(text)


VTT = (
    "\ufeffWEBVTT - 中文字幕\nKind: captions\n\nNOTE 这是注释，不翻译\n\n"
    "STYLE\n::cue(.yellow) { color: yellow; }\n\n"
    "REGION\nid:fred\nwidth:40%\n\n"
    "intro\n00:01.000 --> 00:04.000 align:start line:0 region:fred\n"
    "<v Roger>你好 &amp; <c.yellow>欢迎</c>！</v>\n\n"
    "00:00:05.000 --> 00:00:07.000\n<ruby>东京<rt>Tokyo</rt></ruby>是首都。<00:00:06.000>好的。\n"
)


def test_vtt_keeps_its_header_blocks_settings_tags_and_entities() -> None:
    document = plan_document(VTT, "vtt")
    # Tags at a sentence's edge stay out of the model; inner ones travel as tokens.
    assert document.model_inputs == ["你好 ZX1 ZX2欢迎ZX3！", "东京ZX1 Tokyo ZX2ZX3是首都。", "好的。"]
    rendered = document.render(
        marked(["Hello ZX1 ZX2 welcome ZX3!", "Tokyo ZX1 Tokyo ZX2 ZX3 is the capital.", "OK <then> & so."])
    )
    assert rendered.text == VTT.replace(
        "<v Roger>你好 &amp; <c.yellow>欢迎</c>！</v>",
        # A tag after a sentence's end is a piece of its own: a space after a translated sentence, as in HTML.
        "<v Roger>EN(Hello &amp; <c.yellow> welcome </c>!) </v>",
    ).replace(
        "<ruby>东京<rt>Tokyo</rt></ruby>是首都。<00:00:06.000>好的。",
        # The model's "<" and "&" are text in WebVTT, escaped as such.
        "<ruby>EN(Tokyo <rt> Tokyo </rt> </ruby> is the capital.) "
        "<00:00:06.000>EN(OK &lt;then&gt; &amp; so.)",
    )


def test_cues_without_chinese_are_not_sent_to_the_model() -> None:
    text = "WEBVTT\n\n00:01.000 --> 00:02.000\n<i>Hello</i> world.\n\n00:02.000 --> 00:03.000\n你好。\n"
    document = plan_document(text, "vtt")
    assert document.model_inputs == ["你好。"]
    assert document.render(["Hi."]).text == text.replace("你好。", "Hi.")
    assert plan_document("1\n00:00:01,000 --> 00:00:02,000\nOK 123\n", "srt").model_inputs == []


def test_an_empty_file_is_nothing_to_translate() -> None:
    assert plan_document("", "srt").model_inputs == []
    assert plan_document("WEBVTT\n", "vtt").render([]).text == "WEBVTT\n"


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        ("今天天气很好。", "srt", "not SRT: line 1: expected a cue"),
        ("\n\n多余的一段\n\n1\n00:00:01,000 --> 00:00:02,000\n你好\n", "srt", "line 3: .* got '多余的一段'"),
        (
            "1\n00:00:01,000 --> 00:00:02,000\n你好\n\n2\n00:00:03,000 -> 00:00:04,000\n",
            "srt",
            "line 5: .* got '2'",
        ),
        (
            "1\n00:00:01,000 --> 00:00:02,000\n你好\n00:00:03,000 -> 00:00:04,000\n再见\n",
            "srt",
            "line 4: cue timings inside the text of the cue above",
        ),
        ("今天天气很好。", "vtt", 'not WebVTT: line 1: expected "WEBVTT" to open the file'),
        ("\nWEBVTT\n", "vtt", "line 1"),
        ("WEBVTTX\n", "vtt", "line 1"),
        ("WEBVTT\n\n00:01.000 --> 00:02.000\n你好\n\n漏了时间的字幕\n", "vtt", "line 6: expected a cue"),
        ("WEBVTT\n\n00:01.000 --> 00:99.000\n你好\n", "vtt", "line 3: unreadable cue timings"),
    ],
)
def test_a_file_that_is_not_in_its_declared_format_is_refused_by_line(
    text: str, kind: str, message: str
) -> None:
    with pytest.raises(Unparsable, match=message):
        plan_document(text, kind)  # type: ignore[arg-type]


def test_a_long_digit_run_is_refused_before_srt_parses_it() -> None:
    """srt's pattern backtracks polynomially over long digit runs (5,000 digits took minutes and
    cost the worker its life in the contract test): such a text is refused by name first."""
    with pytest.raises(Unparsable, match="more than 32 digits"):
        plan_document("0" * 5000, "srt")
    with pytest.raises(Unparsable, match="line 3"):
        plan_document("1\n00:00:01,000 --> 00:00:02,000\n电话" + "9" * 40 + "\n", "srt")
