"""The native response body, built from what each text of a request became.

Identity fields (model, version, variant, stand-in notice) are added by the handler, and
the request's envelope puts the body in its protocol's shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from handlers.translation.answers import CutSentence, TextAnswer


def native_body(
    answers: Sequence[TextAnswer], as_list: bool, want_sentences: bool, max_input_tokens: int
) -> dict[str, Any]:
    translations = [answer.translation for answer in answers]
    body: dict[str, Any] = {"translations": translations} if as_list else {"translation": translations[0]}
    body["stats"] = {
        "sentences": sum(len(answer.sentences) for answer in answers),
        "translated": sum(answer.decoded for answer in answers),
        "cached": sum(answer.cached for answer in answers),
    }
    body["untranslated"] = [index for index, answer in enumerate(answers) if not answer.decoded]
    warnings: list[dict[str, Any]] = []
    for index, answer in enumerate(answers):
        warnings += [_dropped_warning(index, span) for span in answer.dropped]
        warnings += [_cut_warning(index, cut, max_input_tokens) for cut in answer.cut]
        if answer.alternatives == [] and answer.decoded > 1:
            warnings.append(_alternatives_warning(index, answer.decoded))
    body["warnings"] = warnings
    if answers and answers[0].alternatives is not None:
        alternatives = [answer.alternatives or [] for answer in answers]
        body["alternatives"] = alternatives if as_list else alternatives[0]
    if want_sentences:
        pairs = [[sentence.__dict__ for sentence in answer.sentences] for answer in answers]
        body["sentences"] = pairs if as_list else pairs[0]
    return body


def _dropped_warning(text: int, span: str) -> dict[str, Any]:
    return {
        "text": text,
        "code": "placeholder_restored",
        "message": f"the model dropped the protected text {span[:80]!r}; it was appended to its sentence",
    }


def _alternatives_warning(text: int, sentences: int) -> dict[str, Any]:
    return {
        "text": text,
        "code": "alternatives_single_sentence",
        "message": f"alternatives are given for a text of one sentence; this one has {sentences}: "
        "send its sentences as a list of texts to get alternatives for each",
    }


def _cut_warning(text: int, cut: CutSentence, limit: int) -> dict[str, Any]:
    return {
        "text": text,
        "code": "sentence_cut",
        "message": f"a sentence of about {cut.tokens} tokens is over the model's {limit}-token limit; "
        f"it was translated in {cut.parts} parts",
    }
