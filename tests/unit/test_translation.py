"""Requests through plan -> decode (sentence cache, then the step scheduler) -> render -> body, on
the tiny stand-in.

The cache is a faster path, so it must give exactly what decoding gives: checked here on the
lively stand-in (whose output depends on its input) with the cache on and off.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from handlers.errors import OutOfRange, OverLimit, UnsupportedLanguage
from handlers.handler_config import HandlerConfig
from handlers.model.options import GenerationOptions
from handlers.model.translator import Translator
from handlers.scheduling.inline import InlineDriver
from handlers.scheduling.policy import DecodePolicy
from handlers.scheduling.step_scheduler import StepScheduler
from handlers.sentence_cache import SentenceCache
from handlers.translation.decoding import Decoded, SentenceDecoding
from handlers.translation.plan import PlannedRequest, plan_request, render
from handlers.translation.request import TranslationRequest
from handlers.wire.errors import client_error
from handlers.wire.responses import native_body

ARTICLE = (
    "汤姆不会同意的。汤姆和他的朋友们在公园喝醉了！\n\n是那家。汤姆不会同意的。\nSee https://example.com."
)


CONFIG = HandlerConfig(variant="int8", warmup=False, max_input_tokens=12)


@pytest.fixture(scope="module")
def translator(lively_model_dir: Path) -> Translator:
    return Translator.load(lively_model_dir, CONFIG.model)


def plan(
    request: TranslationRequest, translator: Translator, config: HandlerConfig = CONFIG
) -> PlannedRequest:
    return plan_request(request, translator, DecodePolicy.of(config, translator))


def request(*texts: str, **options: int) -> TranslationRequest:
    return TranslationRequest(texts, True, GenerationOptions(**options), want_sentences=True)


def answer(planned: PlannedRequest) -> dict[str, Any]:
    """The native body, as the handler builds it (identity fields aside), with a 12-token limit."""
    return native_body(render(planned), planned.request.as_list, planned.request.want_sentences, 12)


def decoding(translator: Translator, cache: SentenceCache, model_tag: str) -> SentenceDecoding[Decoded]:
    pad_id = translator.tokenizer.pad_token_id
    steps = StepScheduler(translator.decoder, pad_id, CONFIG.max_batch_rows, CONFIG.max_cohorts, 16)
    return SentenceDecoding[Decoded](translator, cache, model_tag, InlineDriver(steps))


def run(decoder: SentenceDecoding[Decoded], *requests: TranslationRequest) -> list[PlannedRequest]:
    """One static call: open every request, step until all are done, close them."""
    planned = [plan(each, decoder.translator) for each in requests]
    for owner, each in enumerate(planned):
        decoder.open(owner, Decoded(planned=each))
    decoder.collect(lambda: all(each.done for each in planned), float("inf"))
    for owner in range(len(planned)):
        decoder.close(owner)
    return planned


def test_the_cache_answers_exactly_what_decoding_gives(translator: Translator) -> None:
    cold = decoding(translator, SentenceCache(0, 0), "m")
    warm = decoding(translator, SentenceCache(1000, 10**7), "m")
    for options in ({}, {"num_beams": 1}):
        expected = answer(run(cold, request(ARTICLE, **options))[0])
        first = answer(run(warm, request(ARTICLE, **options))[0])
        second = answer(run(warm, request(ARTICLE, **options))[0])
        assert first["translations"] == expected["translations"] == second["translations"]
        assert second["stats"]["cached"] == second["stats"]["translated"] > 0
        assert first["stats"]["cached"] == 0


def test_a_sentence_repeated_in_a_request_is_decoded_once(translator: Translator) -> None:
    decoder = decoding(translator, SentenceCache(1000, 10**7), "m")
    run(decoder, request("是那家。", "是那家。", "是那家。"))
    counts = decoder.take_counts()
    once = decoding(translator, SentenceCache(0, 0), "n")
    run(once, request("是那家。"))
    assert (counts.cache_hits, counts.cache_misses, counts.sentences) == (0, 3, 3)
    assert counts.generated_tokens == once.take_counts().generated_tokens > 0


def test_cache_keys_separate_decode_options_and_models(translator: Translator) -> None:
    cache = SentenceCache(1000, 10**7)
    beam4 = answer(run(decoding(translator, cache, "m"), request("是那家。"))[0])
    greedy = answer(run(decoding(translator, cache, "m"), request("是那家。", num_beams=1))[0])
    other = answer(run(decoding(translator, cache, "other"), request("是那家。"))[0])
    assert beam4["stats"]["cached"] == greedy["stats"]["cached"] == other["stats"]["cached"] == 0


def test_an_over_long_sentence_is_cut_translated_whole_and_flagged(translator: Translator) -> None:
    long = "汤姆和他的朋友们在公园喝醉了，汤姆和他的朋友们在公园喝醉了，汤姆不会同意的。"
    planned = run(decoding(translator, SentenceCache(0, 0), "m"), request(long))[0]
    chunks = planned.texts[0].sentences[0].chunks
    assert len(chunks) > 1 and all(len(chunk.ids) <= 12 for chunk in chunks)
    body = answer(planned)
    assert [warning["code"] for warning in body["warnings"]] == ["sentence_cut"]
    assert body["sentences"][0][0]["source"] == long


def test_answer_reports_pairs_untranslated_texts_and_stats(translator: Translator) -> None:
    planned = run(decoding(translator, SentenceCache(0, 0), "m"), request(ARTICLE, "Only English."))[0]
    body = answer(planned)
    assert body["untranslated"] == [1]
    assert body["translations"][1] == "Only English."
    assert body["stats"] == {"sentences": 6, "translated": 4, "cached": 0}
    sources = [pair["source"] for pair in body["sentences"][0]]
    assert sources == [
        "汤姆不会同意的。",
        "汤姆和他的朋友们在公园喝醉了！",
        "是那家。",
        "汤姆不会同意的。",
        "See https://example.com.",
    ]
    assert body["translations"][0].count("\n") == ARTICLE.count("\n")


def test_limits_are_checked_when_planning(translator: Translator) -> None:
    small = dataclasses.replace(CONFIG, max_sentences_per_request=3)
    with pytest.raises(OverLimit) as raised:
        plan(request("一。二。三。四。"), translator, small)
    assert (
        client_error(raised.value).status == 413 and "max_sentences_per_request (3)" in raised.value.message
    )
    with pytest.raises(UnsupportedLanguage) as refused:
        plan(request("ありがとうございます"), translator)
    assert client_error(refused.value).status == 422 and refused.value.message.startswith(
        "text 0 looks like Japanese"
    )


def test_alternatives_follow_the_best_translation_and_are_always_decoded(translator: Translator) -> None:
    cache = SentenceCache(1000, 10**7)
    plain = answer(run(decoding(translator, cache, "m"), request("汤姆不会同意的。", "是那家。"))[0])
    asked = answer(
        run(decoding(translator, cache, "m"), request("汤姆不会同意的。", "是那家。", alternatives=3))[0]
    )
    # The cache answered the plain request's sentences again, but alternatives are never cached.
    assert asked["stats"]["cached"] == 0 and asked["translations"] == plain["translations"]
    for best, alternatives in zip(asked["translations"], asked["alternatives"], strict=True):
        assert 1 <= len(alternatives) <= 3 and best not in alternatives
        assert len(set(alternatives)) == len(alternatives)
    assert "alternatives" not in plain


def test_a_text_of_several_sentences_gets_no_alternatives_and_a_warning(translator: Translator) -> None:
    body = answer(run(decoding(translator, SentenceCache(0, 0), "m"), request(ARTICLE, alternatives=2))[0])
    assert body["alternatives"] == [[]]
    assert [warning["code"] for warning in body["warnings"]] == ["alternatives_single_sentence"]


def test_alternatives_must_stay_below_the_beam_count(translator: Translator) -> None:
    with pytest.raises(OutOfRange, match="below the beam count"):
        plan(request("是那家。", num_beams=2, alternatives=2), translator)
    # LibreTranslate's ceiling: beams - 1 come back instead of a refusal.
    ceiling = dataclasses.replace(request("是那家。", num_beams=2, alternatives=5), alternatives_at_most=True)
    assert plan(ceiling, translator).request.options.alternatives == 1


def test_glossary_terms_come_back_once_and_share_the_cached_decode(translator: Translator) -> None:
    """The model sees a placeholder, never the target term: two glossaries share the decode."""
    cache = SentenceCache(1000, 10**7)
    decoder = decoding(translator, cache, "m")

    def with_terms(terms: dict[str, str]) -> dict[str, Any]:
        sent = TranslationRequest(("汤姆在公园。",), True, GenerationOptions(), glossary=tuple(terms.items()))
        return answer(run(decoder, sent)[0])

    first, second = with_terms({"公园": "GARDEN-A"}), with_terms({"公园": "GARDEN-B"})
    assert first["translations"][0].count("GARDEN-A") == 1 and "GARDEN-B" not in first["translations"][0]
    assert second["translations"][0].count("GARDEN-B") == 1 and "GARDEN-A" not in second["translations"][0]
    assert second["stats"]["cached"] == 1
    plain = answer(run(decoder, request("汤姆在公园。"))[0])
    assert plain["stats"]["cached"] == 0  # without the term the model input differs
