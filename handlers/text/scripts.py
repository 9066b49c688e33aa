"""Which texts the model can translate: it reads Chinese, and only Chinese.

- A sentence with no Han character (English, numbers, a URL) is copied unchanged without a model
  call; a text made only of such sentences is reported as "untranslated".
- A text that is mostly Japanese kana or Korean hangul is refused with a 422 that names the
  language: the model would turn it into confident nonsense, and a client that sent Japanese to
  a Chinese model wants to know, not to receive a plausible-looking wrong answer. Japanese
  writing mixes kanji with kana, so the test is the kana share of the CJK letters, not their
  presence; Chinese text has essentially no kana (a stray の in a shop name stays well below it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from handlers.errors import UnsupportedLanguage

HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")
KANA = re.compile(r"[\u3041-\u3096\u30a1-\u30fa\u30fc\u31f0-\u31ff\uff66-\uff9d]")
HANGUL = re.compile(r"[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
# Share of kana (or hangul) among the CJK letters above which a text counts as Japanese (Korean).
FOREIGN_SHARE = 0.3


def has_han(text: str) -> bool:
    return HAN.search(text) is not None


def check_language(text: str, where: str) -> None:
    """Refuse a text that is mostly Japanese or Korean (UnsupportedLanguage)."""
    foreign = _foreign_script(text)
    if foreign is not None:
        name, count, han = foreign
        raise UnsupportedLanguage(
            f"{where} looks like {name.split()[0]}: {count} of its {count + han} CJK letters are "
            f"{name}; this model translates Chinese only"
        )


@dataclass(frozen=True)
class ScriptReading:
    """What the check above reads in a text, for clients that ask (LibreTranslate's /detect): its
    language, None when it has no Chinese, Japanese or Korean letters (the check knows no other
    script), and the share of its letters written in that language's scripts, 0 to 1."""

    language: Literal["zh", "ja", "ko"] | None
    share: float


def read_script(text: str) -> ScriptReading:
    letters = sum(1 for char in text if char.isalpha())
    han = len(HAN.findall(text))
    foreign = _foreign_script(text)
    if foreign is not None:
        name, count, _ = foreign
        return ScriptReading("ja" if name.startswith("Japanese") else "ko", min(1.0, (count + han) / letters))
    if han:
        return ScriptReading("zh", min(1.0, han / letters))
    return ScriptReading(None, 0.0)


def ranked_readings(text: str) -> list[ScriptReading]:
    """read_script's answer first, then each other of Chinese, Japanese and Korean whose own script
    (Han, kana, hangul) the text has, by its share of the letters: a ranked list, as detectors give.
    Empty when the text has none of them."""
    best = read_script(text)
    if best.language is None:
        return []
    letters = sum(1 for char in text if char.isalpha())
    own: dict[Literal["zh", "ja", "ko"], re.Pattern[str]] = {"zh": HAN, "ja": KANA, "ko": HANGUL}
    others = [
        ScriptReading(language, min(1.0, count / letters))
        for language, script in own.items()
        if language != best.language and (count := len(script.findall(text)))
    ]
    return [best, *sorted(others, key=lambda reading: -reading.share)]


def _foreign_script(text: str) -> tuple[str, int, int] | None:
    """The Japanese or Korean script a text is mostly written in: (its name, its letters, Han letters)."""
    han = len(HAN.findall(text))
    for name, letters in (("Japanese kana", KANA), ("Korean hangul", HANGUL)):
        count = len(letters.findall(text))
        if count and count / (count + han) > FOREIGN_SHARE:
            return name, count, han
    return None
