"""LibreTranslate 1.9.6 as shipped, plus one change: each sentence decodes its reference length.

Run by LibreTranslate's own venv (bench.libretranslate_peer starts it), never imported by the
project's code at run time, so it needs nothing but the standard library and LibreTranslate:

    <venv>/bin/python bench/libretranslate_launcher.py --host 127.0.0.1 --port P --load-only zh,en

Why: our server, serving the stand-in, is told each sentence's reference length by the bench
(min_new_tokens = max_new_tokens = reference tokens, sent with every request), so random weights
decode as many steps as the real model would. LibreTranslate has no such request field. The one
change made here wraps Argos Translate's `apply_packaged_translation` (argostranslate/translate.py,
called once per paragraph of a request) so that its CTranslate2 `translate_batch` call gets
`min_decoding_length = max_decoding_length = n`, n looked up by the paragraph's text in the JSON map
text -> reference tokens named by ZH_EN_LT_LENGTHS (bench.load writes it before the run). Every
sentence Argos splits the paragraph into decodes n steps, as every sentence of a request does on our
server. A paragraph missing from the map decodes freely and is counted on stderr ("length lookup
missed"), which the bench reads back. Beam size, batching, threads, sentence splitting,
tokenization and the HTTP layer are LibreTranslate's and Argos's own.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

LENGTHS_ENV = "ZH_EN_LT_LENGTHS"
MISSED = "length lookup missed"


def read_lengths(path: Path) -> dict[str, int]:
    """text -> reference tokens, keyed by the stripped text as Argos's paragraphs arrive."""
    return {text.strip(): int(tokens) for text, tokens in json.loads(path.read_text()).items()}


class ForcedLengths:
    """A CTranslate2 translator whose every translate_batch decodes exactly `tokens` steps."""

    def __init__(self, translator: Any, tokens: int) -> None:
        self.translator = translator
        self.tokens = tokens

    def translate_batch(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.update(min_decoding_length=self.tokens, max_decoding_length=self.tokens)
        return self.translator.translate_batch(*args, **kwargs)


def forcing(apply: Callable[..., Any], lengths: Mapping[str, int]) -> Callable[..., Any]:
    """`apply_packaged_translation` with the paragraph's translator forced to its reference length."""

    def apply_forced(pkg: Any, input_text: str, translator: Any, *rest: Any, **kwargs: Any) -> Any:
        tokens = lengths.get(input_text.strip())
        if tokens is None:
            print(f"{MISSED}: {input_text[:60]!r}", file=sys.stderr, flush=True)
            return apply(pkg, input_text, translator, *rest, **kwargs)
        return apply(pkg, input_text, ForcedLengths(translator, tokens), *rest, **kwargs)

    return apply_forced


def main() -> None:
    # LibreTranslate's venv has these; the project's does not import this function.
    from argostranslate import translate
    from libretranslate.main import main as libretranslate_main

    if path := os.environ.get(LENGTHS_ENV):
        translate.apply_packaged_translation = forcing(
            translate.apply_packaged_translation, read_lengths(Path(path))
        )
    sys.argv[0] = "libretranslate"
    libretranslate_main()


if __name__ == "__main__":
    main()
