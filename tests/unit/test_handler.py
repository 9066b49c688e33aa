"""The handler's stages inside TorchServe's own Context, on the tiny stand-in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ts.context import Context

from handlers import zh_en_handler
from handlers.translation.answers import TextAnswer
from handlers.translation.plan import PlannedRequest, render
from handlers.zh_en_handler import TranslationHandler
from tests.handler_context import initialized_handler, make_context
from tests.waiting import wait_until


def run(
    handler: TranslationHandler, model_dir: Path, batch: list[dict[str, Any]]
) -> tuple[list[Any], Context]:
    context = make_context(model_dir, "int8", len(batch))
    return handler.handle(batch, context), context


def test_unknown_handler_key_fails_the_load(tiny_model_dir: Path) -> None:
    context = make_context(tiny_model_dir, "int8", 1)
    context.model_yaml_config["handler"]["quantise"] = True
    with pytest.raises(ValueError, match="quantise"):
        TranslationHandler().initialize(context)


def test_mixed_batch_answers_every_request(handler: TranslationHandler, tiny_model_dir: Path) -> None:
    batch: list[dict[str, Any]] = [
        {"body": {"text": "汤姆不会同意的"}},
        {"body": {"text": ""}},
        {"body": "是那家。"},
        {"body": {"text": ["一", "二"], "num_beams": 2}},
        {"body": b"\xff\xfe"},
        {"body": {"text": "你好", "max_new_tokens": 3, "min_new_tokens": 3}},
    ]
    responses, context = run(handler, tiny_model_dir, batch)
    assert len(responses) == len(batch)
    statuses = [context.get_response_status(i)[0] for i in range(len(batch))]
    assert statuses == [200, 400, 200, 200, 400, 200]
    assert isinstance(responses[0]["translation"], str)
    assert len(responses[3]["translations"]) == 2
    for ok in (responses[0], responses[2], responses[3], responses[5]):
        assert ok["model"] == "zh_en" and ok["version"] == "1.0-int8" and ok["variant"] == "int8"
        assert ok["standin"] is True and "NOT a translation" in ok["notice"]
    assert responses[1] == {
        "code": 400,
        "type": "InvalidRequest",
        "message": "text is empty or whitespace only",
    }
    assert "UTF-8" in responses[4]["message"]
    assert all(context.get_response_content_type(i) == "application/json" for i in range(len(batch)))
    json.dumps(responses)  # TorchServe serializes exactly this


def test_batch_of_only_bad_requests(handler: TranslationHandler, tiny_model_dir: Path) -> None:
    responses, context = run(handler, tiny_model_dir, [{"body": {"text": ["a"] * 5}}, {"nobody": 1}])
    assert [context.get_response_status(i)[0] for i in range(2)] == [413, 415]
    assert "max_texts_per_request (4)" in responses[0]["message"]


def test_same_text_same_output_alone_or_batched(handler: TranslationHandler, tiny_model_dir: Path) -> None:
    alone, _ = run(handler, tiny_model_dir, [{"body": {"text": "汤姆不会同意的", "num_beams": 1}}])
    batched, _ = run(
        handler,
        tiny_model_dir,
        [
            {"body": {"text": "汤姆和他的朋友们在公园喝醉了", "num_beams": 1}},
            {"body": {"text": "汤姆不会同意的", "num_beams": 1}},
        ],
    )
    assert alone[0]["translation"] == batched[1]["translation"]


def test_request_over_the_decode_budget_is_413_and_names_the_limit(tiny_model_dir: Path) -> None:
    budgeted = TranslationHandler()
    budgeted.initialize(make_context(tiny_model_dir, "int8", 1, max_decode_tokens_per_request=64))
    at_limit = {"text": ["你好", "谢谢"], "num_beams": 4, "max_new_tokens": 8}  # 2 x 4 x 8 = 64
    over = {**at_limit, "max_new_tokens": 9}  # 72
    responses = budgeted.handle(
        [{"body": at_limit}, {"body": over}], context := make_context(tiny_model_dir, "int8", 2)
    )
    assert [context.get_response_status(i)[0] for i in range(2)] == [200, 413]
    assert "72 decode steps" in responses[1]["message"]
    assert "max_decode_tokens_per_request (64)" in responses[1]["message"]


def test_sentences_past_the_batch_budget_get_503_busy_and_the_rest_is_answered(tiny_model_dir: Path) -> None:
    handler = TranslationHandler()
    handler.initialize(make_context(tiny_model_dir, "int8", 1, max_sentences_per_batch=5))
    batch: list[dict[str, Any]] = [
        {"body": {"text": "一。二。三。四。", "num_beams": 1}},  # 4 sentences: admitted
        {"body": {"text": "五。六。", "num_beams": 1}},  # 4 + 2 > 5: busy
        {"body": {"text": "七。", "num_beams": 1}},  # 4 + 1 = 5: admitted
        {"body": {"text": ""}},  # a client error stays a client error
    ]
    responses, context = run(handler, tiny_model_dir, batch)
    statuses = [context.get_response_status(i)[0] for i in range(len(batch))]
    assert statuses == [200, 503, 200, 400]
    assert responses[1]["type"] == "Busy" and "max_sentences_per_batch 5" in responses[1]["message"]
    assert context.get_response_headers(1)["Retry-After"] == "1"
    assert responses[0]["stats"]["translated"] == 4 and responses[2]["stats"]["translated"] == 1


def test_an_idle_worker_trims_its_heap_once_and_not_between_calls(
    handler: TranslationHandler, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trims: list[int] = []
    heap = handler.requests.decoding.driver.heap  # type: ignore[union-attr]
    monkeypatch.setattr(heap, "_trim", lambda: trims.append(1))
    monkeypatch.setattr(heap, "idle_seconds", 1.0)
    for _ in range(3):  # back-to-back calls: no trim in between
        responses, _ = run(handler, tiny_model_dir, [{"body": {"text": "你好", "max_new_tokens": 3}}])
        assert "translation" in responses[0]
    assert trims == []
    wait_until(lambda: trims, 10, "a trim once the worker idles")
    assert trims == [1]


# One sentence with 600 inline tags, 5,000 characters: tens of milliseconds to split and protect.
MARKED_UP = "<p>" + "<b>你</b>" * 624 + "。"


def test_a_request_past_the_text_budget_gets_422_and_its_batch_is_answered(tiny_model_dir: Path) -> None:
    handler = TranslationHandler()
    handler.initialize(make_context(tiny_model_dir, "int8", 1, text_budget_ms=5))
    batch: list[dict[str, Any]] = [
        {"body": {"text": "你好。", "num_beams": 1}},
        {"body": {"text": [MARKED_UP] * 4, "format": "html", "num_beams": 1}},
        {"body": {"text": "谢谢。", "format": "html", "num_beams": 1}},
    ]
    responses, context = run(handler, tiny_model_dir, batch)
    assert [context.get_response_status(i)[0] for i in range(len(batch))] == [200, 422, 200]
    assert responses[1]["type"] == "InvalidRequest"  # docs/openapi.yaml: every 422 is one
    assert "text 0 is too costly to process" in responses[1]["message"]
    assert "5 ms budget (text_budget_ms)" in responses[1]["message"]
    assert responses[0]["stats"]["translated"] == 1 and responses[2]["stats"]["translated"] == 1


def test_rendering_past_the_text_budget_is_a_422_for_that_request_only(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rendering has its own budget: a request planned in time can still be refused at the end."""
    wide: dict[str, Any] = {"max_texts_per_request": 16, "max_chars_per_request": 80_000}
    handler = initialized_handler(tiny_model_dir, text_budget_ms=60_000, **wide)

    def spent_for_html(planned: PlannedRequest, budget_seconds: float) -> list[TextAnswer]:
        # The marked-up request's rendering gets a budget spent at once, whatever the machine's speed.
        return render(planned, 0.0 if planned.request.text_format == "html" else budget_seconds)

    monkeypatch.setattr(zh_en_handler, "render", spent_for_html)
    batch: list[dict[str, Any]] = [
        # 16 sentences of 624 protected spans each: milliseconds to put back together.
        {"body": {"text": [MARKED_UP] * 16, "format": "html", "num_beams": 1}},
        {"body": {"text": "谢谢。", "num_beams": 1}},
    ]
    responses, context = run(handler, tiny_model_dir, batch)
    assert [context.get_response_status(i)[0] for i in range(2)] == [422, 200]
    assert isinstance(responses[0], dict) and isinstance(responses[1], dict)
    assert "is too costly to process: its rebuilding around the translations" in responses[0]["message"]
    assert isinstance(responses[1]["translation"], str)
