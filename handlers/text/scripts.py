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
    han = len(HAN.findall(text))
    for name, letters in (("Japanese kana", KANA), ("Korean hangul", HANGUL)):
        count = len(letters.findall(text))
        if count and count / (count + han) > FOREIGN_SHARE:
            raise UnsupportedLanguage(
                f"{where} looks like {name.split()[0]}: {count} of its {count + han} CJK letters are "
                f"{name}; this model translates Chinese only"
            )
