"""One request's texts on their way through the model: plan, encode, decode (through the cache), answer.

plan_request() splits every text of a request into sentences (handlers.text.documents), refuses
Japanese/Korean texts, encodes the sentences the model must decode (cutting over-long ones) and
checks the request's limits. SentenceDecoder decodes the sentences of a whole TorchServe batch
together (every request's, grouped by length by Translator.translate_batch), skipping those
in the cache. answer() renders each text back and builds the response body.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from handlers.model.translator import Translator
from handlers.sentence_cache import CacheKey, SentenceCache, cache_key
from handlers.text.documents import Document, plan_document
from handlers.text.scripts import check_language
from handlers.wire.parsing import GenerationOptions, InvalidRequest, TranslationRequest


class BatchFull(InvalidRequest):
    """Not the client's fault: this batch already holds all the sentences it may decode."""

    kind = "Busy"
    retry_after = 1

    def __init__(self, queued: int, limit: int) -> None:
        super().__init__(
            f"the server is busy: this batch already holds {queued} sentences "
            f"(max_sentences_per_batch {limit}); retry shortly",
            status=503,
        )


@dataclass
class RequestWork:
    """A request's documents and, per sentence to decode (in document order), its token-id chunks."""

    request: TranslationRequest
    documents: list[Document]
    chunks: list[list[list[int]]]
    # Filled by decoding: per sentence, its translation and whether the cache answered it.
    outputs: list[str] = field(default_factory=list)
    cached: list[bool] = field(default_factory=list)


@dataclass(frozen=True)
class BatchCounts:
    """What one batch cost, for the worker's custom metrics."""

    cache_hits: int
    cache_misses: int
    sentences: int
    generated_tokens: int


def plan_request(request: TranslationRequest, translator: Translator) -> RequestWork:
    config = translator.config
    documents = []
    for index, text in enumerate(request.texts):
        check_language(text, f"text {index}" if request.as_list else "text")
        documents.append(plan_document(text, request.text_format))
    inputs = [sentence for document in documents for sentence in document.model_inputs]
    if len(inputs) > config.max_sentences_per_request:
        raise InvalidRequest(
            f"request has {len(inputs)} sentences to translate > max_sentences_per_request "
            f"({config.max_sentences_per_request}); send the text in several requests",
            status=413,
        )
    chunks = translator.encode_sentences(inputs)
    translator.check_cost([chunk for sentence in chunks for chunk in sentence], request.options)
    return RequestWork(request, documents, chunks)


class SentenceDecoder:
    """Decodes sentence chunks for a worker, answering repeats from its LRU cache."""

    def __init__(self, translator: Translator, cache: SentenceCache, model_tag: str) -> None:
        self.translator = translator
        self.cache = cache
        self.model_tag = model_tag  # name, version, variant: part of every key

    def decode_batch(self, works: Sequence[RequestWork]) -> BatchCounts:
        """Fill outputs/cached of every request's sentences; all misses go through one translate_batch."""
        chunk_ids: list[list[int]] = []
        options: list[GenerationOptions] = []
        for work in works:
            for sentence in work.chunks:
                chunk_ids += sentence
                options += [work.request.options] * len(sentence)
        tokens_before = self.translator.generated_tokens
        texts, hits = self._decode_chunks(chunk_ids, options)
        position = 0
        for work in works:
            for sentence in work.chunks:
                parts = range(position, position + len(sentence))
                work.outputs.append(" ".join(texts[i] for i in parts))
                work.cached.append(all(hits[i] for i in parts))
                position += len(sentence)
        return BatchCounts(
            cache_hits=sum(hits),
            cache_misses=len(hits) - sum(hits),
            sentences=sum(len(work.chunks) for work in works),
            generated_tokens=self.translator.generated_tokens - tokens_before,
        )

    def _decode_chunks(
        self, ids: list[list[int]], options: list[GenerationOptions]
    ) -> tuple[list[str], list[bool]]:
        texts: list[str] = [""] * len(ids)
        hits = [False] * len(ids)
        misses: dict[CacheKey, list[int]] = {}  # a sentence repeated in the batch is decoded once
        for index, (row, option) in enumerate(zip(ids, options, strict=True)):
            key = cache_key(self.model_tag, self.translator.decode_settings(option), row)
            cached = self.cache.get(key)
            if cached is None:
                misses.setdefault(key, []).append(index)
            else:
                texts[index], hits[index] = cached, True
        firsts = [indices[0] for indices in misses.values()]
        decoded = self.translator.translate_batch([ids[i] for i in firsts], [options[i] for i in firsts])
        for (key, indices), text in zip(misses.items(), decoded, strict=True):
            self.cache.put(key, text)
            for index in indices:
                texts[index] = text
        return texts, hits


def answer(work: RequestWork, max_input_tokens: int) -> dict[str, Any]:
    """The native response body (identity fields are added by the handler)."""
    translations: list[str] = []
    warnings: list[dict[str, Any]] = []
    pairs: list[list[dict[str, Any]]] = []
    start = 0
    for index, document in enumerate(work.documents):
        end = start + len(document.model_inputs)
        rendered = document.render(work.outputs[start:end])
        translations.append(rendered.text)
        warnings += [_dropped_warning(index, span) for span in rendered.dropped]
        cut = [chunks for chunks in work.chunks[start:end] if len(chunks) > 1]
        warnings += [_cut_warning(index, chunks, max_input_tokens) for chunks in cut]
        cached = iter(work.cached[start:end])
        pairs.append(
            [
                {**pair.__dict__, "cached": next(cached) if pair.translated else False}
                for pair in rendered.pairs
            ]
        )
        start = end
    body: dict[str, Any] = (
        {"translations": translations} if work.request.as_list else {"translation": translations[0]}
    )
    body["stats"] = {
        "sentences": sum(len(sentences) for sentences in pairs),
        "translated": len(work.outputs),
        "cached": sum(work.cached),
    }
    body["untranslated"] = [index for index, document in enumerate(work.documents) if not document.translated]
    body["warnings"] = warnings
    if work.request.want_sentences:
        body["sentences"] = pairs if work.request.as_list else pairs[0]
    return body


def _dropped_warning(text: int, span: str) -> dict[str, Any]:
    return {
        "text": text,
        "code": "placeholder_restored",
        "message": f"the model dropped the protected text {span[:80]!r}; it was appended to its sentence",
    }


def _cut_warning(text: int, chunks: list[list[int]], limit: int) -> dict[str, Any]:
    tokens = sum(len(chunk) for chunk in chunks)
    return {
        "text": text,
        "code": "sentence_cut",
        "message": f"a sentence of about {tokens} tokens is over the model's {limit}-token limit; "
        f"it was translated in {len(chunks)} parts",
    }
