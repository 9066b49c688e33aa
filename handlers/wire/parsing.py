"""Decode one TorchServe request's body, and validate a native request once into a TranslationRequest.

Two steps, so that the protocol is known before anything can fail in its shape:
handlers.wire.envelopes.read_body decodes the body here (an error there is answered natively)
and names its envelope; the envelope unwraps its body into our native shape, which
native_request() validates once, whatever the protocol. TorchServe hands each request over as a
dict of named parameters: a JSON body arrives parsed under "body" (or "data"), a text/* body as
str, anything else (including JSON that failed to parse, or text that is not UTF-8) as bytes; a
form (LibreTranslate's clients post them) arrives as one key per field, beside the query
parameters, and is its envelope's to read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from handlers.handler_config import HandlerConfig
from handlers.model.options import GenerationOptions
from handlers.text.documents import DOCUMENT_FORMATS, OFFICE_FORMATS, DocumentFormat
from handlers.translation.request import TranslationRequest
from handlers.wire.errors import InvalidRequest

OPTION_KEYS = ("num_beams", "max_new_tokens", "min_new_tokens", "alternatives")
# "sentences": also answer the aligned (source, translation) sentence pairs; "format": how the text
# is marked up; "glossary": {"源词": "term"}, terms translated one fixed way.
DOCUMENT_KEYS = ("sentences", "format", "glossary")
# What v1/v2 bodies may carry as parameters; streaming ("stream", torchserve_batching: continuous)
# is native only.
PROTOCOL_KEYS = (*OPTION_KEYS, *DOCUMENT_KEYS)
ALLOWED_KEYS = ("text", *PROTOCOL_KEYS, "stream")


def decode_body(item: Mapping[str, Any]) -> Any:
    """The decoded body of one request of a batch (not yet validated); InvalidRequest when there is
    none, or it is not UTF-8, or not JSON though it looks like it."""
    return _decode_body(_body_of(item))


def native_request(payload: Any, config: HandlerConfig) -> TranslationRequest:
    """Validate a payload in our native shape once; raise InvalidRequest naming the problem."""
    if isinstance(payload, str):
        return _validated(TranslationRequest((payload,), False, GenerationOptions()), config)
    if not isinstance(payload, dict):
        raise InvalidRequest(
            f'JSON body must be an object like {{"text": "..."}}, got {type(payload).__name__}'
        )
    unknown = sorted(set(payload) - set(ALLOWED_KEYS))
    if unknown:
        raise InvalidRequest(f"unknown field(s) {unknown}; allowed fields: {list(ALLOWED_KEYS)}")
    if "text" not in payload:
        raise InvalidRequest('missing field "text": send {"text": "..."} or {"text": ["...", ...]}')
    texts, as_list = _texts_of(payload["text"])
    options = GenerationOptions(
        num_beams=_option(payload, "num_beams"),
        max_new_tokens=_option(payload, "max_new_tokens"),
        min_new_tokens=_option(payload, "min_new_tokens"),
        alternatives=_option(payload, "alternatives") or 0,
    )
    text_format = payload.get("format", "text")
    if text_format not in DOCUMENT_FORMATS:
        raise InvalidRequest(f'"format" must be one of {list(DOCUMENT_FORMATS)}, got {text_format!r}'[:200])
    want_sentences = payload.get("sentences", False)
    if not isinstance(want_sentences, bool):
        raise InvalidRequest(f'"sentences" must be true or false, got {want_sentences!r}'[:200])
    stream = payload.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest(f'"stream" must be true or false, got {stream!r}'[:200])
    glossary = _glossary(payload.get("glossary", {}), config)
    if stream and config.torchserve_batching != "continuous":
        raise InvalidRequest(
            '"stream": true needs a model version served with torchserve_batching: continuous; '
            "this one decodes each batch to its end (torchserve_batching: static)",
            status=400,
        )
    fmt: DocumentFormat = DOCUMENT_FORMATS[DOCUMENT_FORMATS.index(text_format)]
    if fmt in OFFICE_FORMATS and (as_list or stream or options.alternatives or want_sentences):
        raise InvalidRequest(
            f'a {fmt} file is one "text" (its base64), answered whole: no list, "stream", '
            '"alternatives" or "sentences"'
        )
    request = TranslationRequest(texts, as_list, options, fmt, want_sentences, stream, glossary)
    return _validated(request, config)


def _body_of(item: Mapping[str, Any]) -> Any:
    for key in ("body", "data"):
        if key in item and item[key] is not None:
            return item[key]
    raise InvalidRequest(
        "no request body found: send JSON with 'Content-Type: application/json' or plain text "
        "with 'Content-Type: text/plain' (curl -d without -H sends a form, which is not accepted)",
        status=415,
    )


def _decode_body(body: Any) -> Any:
    """Bytes reach us when TorchServe could not decode them: decode here and say why not."""
    if not isinstance(body, (bytes, bytearray)):
        return body
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidRequest(f"request body is not valid UTF-8 (byte {error.start})") from None
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            header = _binary_v2_header(text, error)
            if header is not None:
                return header  # the v2 envelope refuses its binary tensors by name, in its shape
            raise InvalidRequest(f"request body is not valid JSON: {error}") from None
        except RecursionError as error:
            raise InvalidRequest(f"request body is not valid JSON: {error}") from None
    return text


def _binary_v2_header(text: str, error: json.JSONDecodeError) -> Any:
    """tritonclient's default binary mode sends a JSON header, then raw tensor bytes after it."""
    if error.msg != "Extra data":
        return None
    try:
        header = json.loads(text[: error.pos])
    except (json.JSONDecodeError, RecursionError):
        return None
    return header if isinstance(header, dict) and "inputs" in header else None


def _texts_of(value: Any) -> tuple[tuple[str, ...], bool]:
    if isinstance(value, str):
        return (value,), False
    if isinstance(value, list):
        if not value:
            raise InvalidRequest('"text" is an empty list: send at least one text')
        bad = [i for i, text in enumerate(value) if not isinstance(text, str)]
        if bad:
            raise InvalidRequest(f'"text" list items must be strings; item {bad[0]} is not')
        return tuple(value), True
    raise InvalidRequest(f'"text" must be a string or a list of strings, got {type(value).__name__}')


def _glossary(value: Any, config: HandlerConfig) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise InvalidRequest(
            f'"glossary" must be an object like {{"源词": "term"}}, got {type(value).__name__}'
        )
    if len(value) > config.max_glossary_entries:
        raise InvalidRequest(
            f'"glossary" has {len(value)} entries > max_glossary_entries ({config.max_glossary_entries})',
            status=413,
        )
    for source, target in value.items():
        if not isinstance(target, str) or not source.strip() or not target.strip():
            raise InvalidRequest(
                f'"glossary" entry {source!r} must map a non-empty term to a non-empty string'[:200]
            )
        if len(source) > config.max_glossary_chars or len(target) > config.max_glossary_chars:
            raise InvalidRequest(
                f'"glossary" entry {source[:40]!r}: terms are at most {config.max_glossary_chars} characters',
                status=413,
            )
        _check_encodable(source, "a glossary term")
        _check_encodable(target, "a glossary term")
    return tuple(value.items())


def _option(payload: Mapping[str, Any], key: str) -> int | None:
    value = payload.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f'"{key}" must be an integer, got {value!r}'[:200])
    return value


def check_text_count(count: int, config: HandlerConfig) -> None:
    if count > config.max_texts_per_request:
        raise InvalidRequest(
            f"too many texts: {count} > max_texts_per_request ({config.max_texts_per_request})", status=413
        )


def _validated(request: TranslationRequest, config: HandlerConfig) -> TranslationRequest:
    check_text_count(len(request.texts), config)
    for index, text in enumerate(request.texts):
        where = f"text {index}" if request.as_list else "text"
        if not text.strip():
            raise InvalidRequest(f"{where} is empty or whitespace only")
        _check_encodable(text, where)
        # A file's base64 is not its text: its paragraphs' characters are counted once read (plan).
        if len(text) > config.max_chars_per_text and request.text_format not in OFFICE_FORMATS:
            raise InvalidRequest(
                f"{where} has {len(text)} characters > max_chars_per_text ({config.max_chars_per_text})",
                status=413,
            )
    total = sum(len(text) for text in request.texts)
    if total > config.max_chars_per_request and request.text_format not in OFFICE_FORMATS:
        raise InvalidRequest(
            f"request has {total} characters in all > max_chars_per_request ({config.max_chars_per_request})",
            status=413,
        )
    _check_options(request.options, config)
    return request


def _check_encodable(text: str, where: str) -> None:
    """JSON escapes can smuggle in lone UTF-16 surrogates, which the tokenizer cannot take."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidRequest(
            f"{where} contains a lone UTF-16 surrogate ({text[error.start]!a}) at character {error.start}; "
            "send valid Unicode"
        ) from None


def _check_options(options: GenerationOptions, config: HandlerConfig) -> None:
    if options.num_beams is not None and not 1 <= options.num_beams <= config.max_beams:
        raise InvalidRequest(
            f'"num_beams" must be between 1 and {config.max_beams}, got {options.num_beams}',
            status=422,
        )
    if options.max_new_tokens is not None and not 1 <= options.max_new_tokens <= config.max_new_tokens:
        raise InvalidRequest(
            f'"max_new_tokens" must be between 1 and {config.max_new_tokens}, got {options.max_new_tokens}',
            status=422,
        )
    if options.min_new_tokens is not None:
        ceiling = options.max_new_tokens or config.max_new_tokens
        if not 0 <= options.min_new_tokens <= ceiling:
            raise InvalidRequest(
                f'"min_new_tokens" must be between 0 and {ceiling} (max_new_tokens), '
                f"got {options.min_new_tokens}",
                status=422,
            )
    if not 0 <= options.alternatives < config.max_beams:
        # The exact bound (below the request's own beam count) is checked once beams are known.
        raise InvalidRequest(
            f'"alternatives" must be between 0 and {config.max_beams - 1}, got {options.alternatives}',
            status=422,
        )
