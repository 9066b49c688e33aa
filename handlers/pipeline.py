"""One request's texts on their way through the model: plan, decode (through the cache), render.

plan_request() splits every text of a request into sentences (handlers.text.documents), refuses
Japanese/Korean texts, encodes the sentences the model must decode (cutting over-long ones) and
checks the request's limits. CachedDecoding decodes the sentences of a whole TorchServe batch
together (every request's, grouped by length by Translator.translate_batch), skipping those in
the cache. text_answers() renders each text back around its translations, for the wire edge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from handlers.errors import OutOfRange, OverLimit
from handlers.handler_config import HandlerConfig
from handlers.model.options import GenerationOptions
from handlers.model.translator import Translator
from handlers.sentence_cache import CacheKey, SentenceCache, cache_key
from handlers.text.budget import Deadline, text_budget
from handlers.text.documents import Document, plan_document
from handlers.text.glossary import NO_GLOSSARY, Glossary
from handlers.text.scripts import check_language
from handlers.translation.answers import CutSentence, SentenceAnswer, TextAnswer
from handlers.translation.request import TranslationRequest


@dataclass
class RequestWork:
    """A request's documents and, per sentence to decode (in document order), its token-id chunks."""

    request: TranslationRequest
    documents: list[Document]
    chunks: list[list[list[int]]]
    # Filled by decoding: per sentence, its translation and whether the cache answered it, and
    # (only when the request asks for alternatives) its next-best translations.
    outputs: list[str] = field(default_factory=list)
    cached: list[bool] = field(default_factory=list)
    alternatives: list[list[str]] = field(default_factory=list)


@dataclass(frozen=True)
class BatchCounts:
    """What one batch cost, for the worker's custom metrics."""

    cache_hits: int
    cache_misses: int
    sentences: int
    generated_tokens: int
    glossary_hits: int = 0


def plan_request(
    request: TranslationRequest, translator: Translator, glossary: Glossary = NO_GLOSSARY
) -> RequestWork:
    """The request's texts as documents and token ids; `glossary` is the deployment's (the request's
    own entries win over it)."""
    config = translator.config
    beams = translator.beams_for(request.options)
    if request.options.alternatives >= beams:
        raise OutOfRange(
            f'"alternatives" must be below the beam count ({beams}): a beam search finishes at most '
            f"{beams} translations, the best and {beams - 1} others; got {request.options.alternatives}"
        )
    terms = glossary.with_request(dict(request.glossary))
    documents = []
    with text_budget(config.text_budget_ms / 1000, "splitting into sentences and markup") as deadline:
        for index, text in enumerate(request.texts):
            deadline.where = f"text {index}" if request.as_list else "text"
            check_language(text, deadline.where)
            documents.append(plan_document(text, request.text_format, terms))
    inputs = [sentence for document in documents for sentence in document.model_inputs]
    if len(inputs) > config.max_sentences_per_request:
        raise OverLimit(
            f"request has {len(inputs)} sentences to translate > max_sentences_per_request "
            f"({config.max_sentences_per_request}); send the text in several requests"
        )
    chunks = translator.encode_sentences(inputs)
    translator.check_cost([chunk for sentence in chunks for chunk in sentence], request.options)
    return RequestWork(request, documents, chunks)


class CachedDecoding:
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
        ranked, hits = self._decode_chunks(chunk_ids, options)
        position = 0
        for work in works:
            for sentence in work.chunks:
                parts = range(position, position + len(sentence))
                work.outputs.append(" ".join(ranked[i][0] for i in parts))
                work.cached.append(all(hits[i] for i in parts))
                if work.request.options.alternatives:  # offered for a sentence decoded in one part
                    work.alternatives.append(ranked[parts[0]][1:] if len(parts) == 1 else [])
                position += len(sentence)
        return BatchCounts(
            cache_hits=sum(hits),
            cache_misses=len(hits) - sum(hits),
            sentences=sum(len(work.chunks) for work in works),
            generated_tokens=self.translator.generated_tokens - tokens_before,
            glossary_hits=sum(document.glossary_hits for work in works for document in work.documents),
        )

    def _decode_chunks(
        self, ids: list[list[int]], options: list[GenerationOptions]
    ) -> tuple[list[list[str]], list[bool]]:
        """Per chunk its translation (then its alternatives, when asked), and whether the cache answered.

        The cache holds best translations only: a chunk that wants alternatives is always decoded.
        """
        ranked: list[list[str]] = [[] for _ in ids]
        hits = [False] * len(ids)
        # A sentence repeated in the batch is decoded once (per number of alternatives asked).
        misses: dict[tuple[CacheKey, int], list[int]] = {}
        for index, (row, option) in enumerate(zip(ids, options, strict=True)):
            key = cache_key(self.model_tag, self.translator.decode_settings(option), row)
            cached = None if option.alternatives else self.cache.get(key)
            if cached is None:
                misses.setdefault((key, option.alternatives), []).append(index)
            else:
                ranked[index], hits[index] = [cached], True
        firsts = [indices[0] for indices in misses.values()]
        decoded = self.translator.translate_ranked([ids[i] for i in firsts], [options[i] for i in firsts])
        for ((key, _), indices), texts in zip(misses.items(), decoded, strict=True):
            self.cache.put(key, texts[0])
            for index in indices:
                ranked[index] = texts
        return ranked, hits


def text_answers(
    work: RequestWork, budget_seconds: float = HandlerConfig.text_budget_ms / 1000
) -> list[TextAnswer]:
    """Each text rebuilt around its decoded sentences (outputs and cached filled by decoding); raises
    TooCostly past `budget_seconds`."""
    with text_budget(budget_seconds, "rebuilding around the translations") as deadline:
        return _text_answers(work, deadline)


def _text_answers(work: RequestWork, deadline: Deadline) -> list[TextAnswer]:
    answers = []
    start = 0
    for index, document in enumerate(work.documents):
        deadline.where = f"text {index}" if work.request.as_list else "text"
        end = start + len(document.model_inputs)
        rendered = document.render(work.outputs[start:end])
        alternatives = _alternatives(work, document, start) if work.request.options.alternatives else None
        cached = iter(work.cached[start:end])
        sentences = [
            SentenceAnswer(pair.source, pair.translation, pair.translated, pair.translated and next(cached))
            for pair in rendered.pairs
        ]
        cut = [
            CutSentence(sum(len(chunk) for chunk in chunks), len(chunks))
            for chunks in work.chunks[start:end]
            if len(chunks) > 1
        ]
        answers.append(
            TextAnswer(
                rendered.text,
                sentences,
                rendered.dropped,
                cut,
                end - start,
                sum(work.cached[start:end]),
                alternatives,
            )
        )
        start = end
    return answers


def _alternatives(work: RequestWork, document: Document, start: int) -> list[str]:
    """A one-sentence text rendered around each next-best translation of its sentence; a text of
    several sentences gets none (which sentence's alternatives would a whole text's be?)."""
    if len(document.model_inputs) != 1:
        return []
    return [document.render([alternative]).text for alternative in work.alternatives[start]]
