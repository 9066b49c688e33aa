"""LibreTranslate's API (POST /translate and /detect at the front door): its requests in, its answers out.

LibreTranslate clients (libretranslatepy, Weblate, browser extensions) send their fields as JSON, a
urlencoded form or a multipart form. The front door (deploy/nginx/libretranslate.conf) checks and
strips the key, names the route in the field "libretranslate" (TorchServe hands the handler the
body, not the path, nor even the query string), then passes the fields to /predictions/zh_en: JSON
as JSON, any form as a multipart form, whose fields TorchServe hands over as separate keys of the
request (as bytes). The field rules, messages and statuses follow LibreTranslate 1.9.6
(libretranslate/app.py, translate() and detect()): every refusal is a 400 {"error": "..."}.
A body is LibreTranslate's when the front door named its route, or when it holds "q".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, Self

from handlers.handler_config import HandlerConfig
from handlers.text.scripts import ranked_readings, read_script
from handlers.translation.request import TranslationRequest
from handlers.wire import parsing
from handlers.wire.envelope import Envelope, ResponseBody
from handlers.wire.errors import InvalidRequest

Route = Literal["translate", "detect"]
# The field the front door sets to the route (it overwrites any the client sent).
ROUTE_FIELD = "libretranslate"
FORMATS = ("text", "html")  # LibreTranslate's; our other formats stay on the native API
# What /translate reads (front_door.js passes on no other form field; the key never).
FIELDS = ("q", "source", "target", "format", "alternatives")


@dataclass(frozen=True)
class Language:
    code: str
    name: str
    targets: tuple[str, ...]


# What GET /languages answers (deploy/nginx/libretranslate.conf serves it; a test holds the two equal).
# LibreTranslate names Chinese zh-Hans (simplified) and zh-Hant (traditional); opus-mt-zh-en reads
# both, and its test set mixes them. English is listed because clients check that a target is known.
LANGUAGES = (
    Language("en", "English", ()),
    Language("zh-Hans", "Chinese", ("en",)),
    Language("zh-Hant", "Chinese (traditional)", ("en",)),
)
# LibreTranslate's aliases (libretranslate/language.py): zh for zh-Hans, zt for zh-Hant; any case.
ALIASES = {"zh": "zh-Hans", "zt": "zh-Hant"}
# Beyond LibreTranslate (which refuses them): Chinese and English as clients send them, in any case,
# with - or _, a script and a region (zh-CN, zh_TW, zh-Hans-SG, en-US) or ISO 639-2/3 (zho, chi, cmn,
# eng). The script decides, else the region: Taiwan, Hong Kong and Macau write traditional.
CHINESE, ENGLISH = ("zh", "zho", "chi", "cmn"), ("en", "eng")
TRADITIONAL = frozenset(("hant", "tw", "hk", "mo"))
AUTO = "auto"
# LibreTranslate's answer when it recognises nothing (language.py, detect_languages).
NOTHING_RECOGNISED = {"confidence": 0.0, "language": "en"}
DETECTED_CODES = {"zh": "zh-Hans", "ja": "ja", "ko": "ko"}


@dataclass(frozen=True)
class LibreTranslate(Envelope):
    """One LibreTranslate request, and what its answer must carry back."""

    route: Route = "translate"
    form: bool = False  # fields from a form (LibreTranslate normalises line breaks in those)
    # source "auto": each text's detected language (code, confidence 0-100), answered as
    # "detectedLanguage"; None when the client named the source.
    detected: tuple[tuple[str, float], ...] | None = None
    # Indices of the empty (or blank) texts of a q list: LibreTranslate answers them with "" and
    # translates the rest, so they skip the model and come back in place.
    blank: tuple[int, ...] = ()
    name: ClassVar[str] = "libretranslate"

    @classmethod
    def detect(cls, payload: Any) -> Self | None:
        return cls.of(payload) if _is_libretranslate(payload) else None

    @classmethod
    def read_form(cls, item: Mapping[str, Any]) -> tuple[Self, dict[str, Any]] | None:
        """A LibreTranslate form's fields (the request's keys), or None when the request has a body
        or its fields are no LibreTranslate request (such a form stays a 415)."""
        if any(item.get(key) is not None for key in ("body", "data")):
            return None
        fields = {name: _text(value) for name, value in item.items()}
        return (cls.of(fields, form=True), fields) if _is_libretranslate(fields) else None

    @classmethod
    def of(cls, payload: Mapping[str, Any], form: bool = False) -> Self:
        """The call a LibreTranslate body makes; never raises (unwrap validates)."""
        route: Route = "detect" if payload.get(ROUTE_FIELD) == "detect" else "translate"
        detected = None
        if route == "translate" and _lower(payload.get("source")) == AUTO:
            detected = tuple(_detection(text) for text in _texts(payload.get("q")))
        q = payload.get("q")
        blank = (
            tuple(i for i, text in enumerate(_texts(q)) if not text.strip()) if isinstance(q, list) else ()
        )
        return cls(route, form, detected, blank)

    def unwrap(self, payload: Any) -> dict[str, Any]:
        """The native request for a /translate body, checked in LibreTranslate's order and words."""
        fields = _fields(payload)
        q = fields.get("q")
        for name in ("q", "source", "target"):
            if not fields.get(name):
                raise InvalidRequest(f"Invalid request: missing {name} parameter")
        try:
            alternatives = max(0, int(fields.get("alternatives") or 0))
        except (TypeError, ValueError):
            raise InvalidRequest("Invalid request: alternatives parameter is not a number") from None
        if self.form and isinstance(q, str):
            q = "\n".join(q.splitlines())  # as LibreTranslate does for forms (RFC 2046 line breaks)
        source, target = _language(fields["source"]), _language(fields["target"])
        text_format = fields.get("format") or "text"
        if text_format not in FORMATS:
            raise InvalidRequest(f"{text_format} format is not supported")
        if target.code not in source.targets:
            raise InvalidRequest(
                f"{target.name} ({target.code}) is not available as a target language from "
                f"{source.name} ({source.code})"
            )
        if self.blank:
            blanks = set(self.blank)
            q = [text for index, text in enumerate(_texts(q)) if index not in blanks]
        native: dict[str, Any] = {"text": q, "format": text_format}
        if alternatives:
            native["alternatives"] = alternatives
        return native

    def parse(self, payload: Any, config: HandlerConfig) -> TranslationRequest:
        """As every envelope's, with the blank texts counted against max_texts_per_request, and
        `alternatives` a ceiling (LibreTranslate has no limit): beams - 1 at most come back."""
        parsing.check_text_count(len(_texts(_fields(payload).get("q"))), config)
        native = self.unwrap(payload)
        if "alternatives" in native:
            native["alternatives"] = min(native["alternatives"], config.max_beams - 1)
        return replace(parsing.native_request(native, config), alternatives_at_most=True)

    def answer_at_once(self, payload: Any, config: HandlerConfig) -> ResponseBody | None:
        """POST /detect needs no model: the script check answers it; nor does a q list of blank texts."""
        if self.route == "detect":
            return detect_answer(payload)
        count = len(_texts(_fields(payload).get("q")))
        if not self.blank or len(self.blank) < count:
            return None
        parsing.check_text_count(count, config)
        native = self.unwrap(payload)  # the checks any other request gets, in their order
        return self.answer({"translations": [], **({"alternatives": []} if "alternatives" in native else {})})

    def answer(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A native success body in LibreTranslate's shape; our other fields (the stand-in notice
        above all, warnings, stats, the model's identity) travel beside it, as with v1."""
        as_list = "translations" in body
        answer: dict[str, Any] = {"translatedText": body["translations"] if as_list else body["translation"]}
        if "alternatives" in body:
            answer["alternatives"] = body["alternatives"]
        if self.blank:  # each blank text's "" back where it was sent
            answer = {
                key: self._with_blanks(values, "" if key == "translatedText" else [])
                for key, values in answer.items()
            }
        if self.detected is not None:
            detected = [_detected_language(reading) for reading in self.detected]
            answer["detectedLanguage"] = detected if as_list else detected[0]
        taken = (*answer, "translation", "translations")
        return {**answer, **{key: value for key, value in body.items() if key not in taken}}

    def _with_blanks(self, values: list[Any], blank: Any) -> list[Any]:
        translated, blanks = iter(values), set(self.blank)
        return [blank if index in blanks else next(translated) for index in range(len(values) + len(blanks))]

    def error_body(self, error: InvalidRequest) -> dict[str, Any]:
        return {"error": error.message}

    def status(self, status: int) -> int:
        """LibreTranslate answers every invalid request with 400: over a limit, an unsupported
        language."""
        return 400 if status in (413, 415, 422) else status


def _is_libretranslate(payload: Any) -> bool:
    """Whether a decoded body is a LibreTranslate request: the front door's route field, or "q"."""
    return isinstance(payload, dict) and (ROUTE_FIELD in payload or "q" in payload)


def detect_answer(payload: Any) -> list[dict[str, Any]]:
    """POST /detect: what the script check reads in q (one text, or a list read as one), ranked best
    first as LibreTranslate's detector ranks its candidates.

    It knows Chinese, Japanese and Korean; anything else is LibreTranslate's "nothing recognised"."""
    q = _fields(payload).get("q")
    if not q:
        raise InvalidRequest("Invalid request: missing q parameter")
    texts = _texts(q)
    if not texts:
        raise InvalidRequest("Invalid request: q must be a text or a list of texts")
    readings = ranked_readings("\n".join(texts))
    if not readings:
        return [dict(NOTHING_RECOGNISED)]
    return [
        _detected_language((DETECTED_CODES[r.language], round(100 * r.share, 1)))
        for r in readings
        if r.language
    ]


def languages_body() -> list[dict[str, Any]]:
    return [{"code": lang.code, "name": lang.name, "targets": list(lang.targets)} for lang in LANGUAGES]


def _fields(payload: Any) -> Mapping[str, Any]:
    if not isinstance(payload, dict):
        raise InvalidRequest("Invalid JSON format")
    return payload


def _language(value: Any) -> Language:
    code = ALIASES.get(_lower(value), _lower(value)).lower()
    if code == AUTO:
        return LANGUAGES[1]  # what we translate from; "detectedLanguage" says what was read
    primary, *subtags = code.replace("_", "-").split("-")
    if primary in ENGLISH:
        return LANGUAGES[0]
    if primary in CHINESE:
        traditional = "hans" not in subtags and not TRADITIONAL.isdisjoint(subtags)
        return LANGUAGES[2] if traditional else LANGUAGES[1]
    raise InvalidRequest(f"{str(value)[:100]} is not supported")  # a long code quoted only in part


def _detection(text: str) -> tuple[str, float]:
    reading = read_script(text)
    if reading.language is None:
        return str(NOTHING_RECOGNISED["language"]), 0.0
    return DETECTED_CODES[reading.language], round(100 * reading.share, 1)


def _detected_language(reading: tuple[str, float]) -> dict[str, Any]:
    return {"confidence": reading[1], "language": reading[0]}


def _texts(q: Any) -> list[str]:
    if isinstance(q, str):
        return [q]
    if isinstance(q, list) and all(isinstance(text, str) for text in q):
        return q
    return []


def _lower(value: Any) -> str:
    return value.lower() if isinstance(value, str) else json.dumps(value)


def _text(value: Any) -> Any:
    # Form fields and query parameters reach the handler as bytes; Flask decodes forms leniently too.
    return value.decode("utf-8", errors="replace") if isinstance(value, (bytes, bytearray)) else value
