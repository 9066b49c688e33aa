"""A request's texts as documents and sentences (plan), and back to texts around their translations
(render).

plan_request() splits every text into sentences (handlers.text.documents), refuses Japanese and
Korean texts, encodes the sentences the model must decode (cutting over-long ones) and checks the
request's limits. render() rebuilds each text around its sentences' translations once they are
done (handlers.translation.decoding fills them). Both run under the request's text budget.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from handlers.errors import OutOfRange, OverLimit
from handlers.handler_config import HandlerConfig
from handlers.model.search import RowLimits
from handlers.model.translator import Translator
from handlers.scheduling.policy import DecodePolicy
from handlers.text.budget import text_budget
from handlers.text.documents import Document, plan_document
from handlers.text.glossary import NO_GLOSSARY, Glossary
from handlers.text.scripts import check_language
from handlers.translation.answers import SentenceAnswer, TextAnswer
from handlers.translation.request import TranslationRequest
from handlers.translation.sentence import Sentence


@dataclass(frozen=True)
class PlannedText:
    """One text of a request: its document (what render() rebuilds) and the sentences it decodes."""

    document: Document
    sentences: list[Sentence]


@dataclass(frozen=True)
class PlannedRequest:
    request: TranslationRequest
    texts: list[PlannedText]
    policy: DecodePolicy  # the deployment's rules, applied to this request's options below

    @property
    def beams(self) -> int:
        return self.policy.beams_for(self.request.options)

    @property
    def decode_settings(self) -> tuple[object, ...]:
        return self.policy.decode_settings(self.request.options)

    def row_limits(self, input_tokens: int) -> RowLimits:
        return self.policy.row_limits(self.request.options, input_tokens)

    @cached_property
    def sentences(self) -> list[Sentence]:
        """Every sentence to decode, in document order (once: streams index it line by line)."""
        return [sentence for text in self.texts for sentence in text.sentences]

    @property
    def done(self) -> bool:
        return all(sentence.done for sentence in self.sentences)

    def streamed(self, index: int) -> str:
        """Sentence `index` (of `sentences`) as the answer will read it: placeholders restored."""
        for text in self.texts:
            if index < len(text.sentences):
                return text.document.restored(index, text.sentences[index].translation)
            index -= len(text.sentences)
        raise IndexError(f"no sentence {index} in this request")

    def ready(self) -> int:
        """How many leading sentences are done (what a stream may send)."""
        return next((n for n, sentence in enumerate(self.sentences) if not sentence.done), self.count)

    @property
    def count(self) -> int:
        return len(self.sentences)

    @property
    def glossary_hits(self) -> int:
        return sum(text.document.glossary_hits for text in self.texts)


def plan_request(
    request: TranslationRequest,
    translator: Translator,
    policy: DecodePolicy,
    glossary: Glossary = NO_GLOSSARY,
) -> PlannedRequest:
    """The request's texts as documents and sentences; `glossary` is the deployment's (the request's
    own entries win over it); `policy` the deployment's decode rules (DecodePolicy.of(config, translator))."""
    config = policy.config
    beams = policy.beams_for(request.options)
    if request.options.alternatives >= beams and request.alternatives_at_most:
        request = replace(request, options=replace(request.options, alternatives=beams - 1))
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
            document = plan_document(text, request.text_format, terms)
            if document.office is not None:
                check_file_size(document.office.characters, config)
                text = document.office.html
            check_language(text, deadline.where)
            documents.append(document)
    inputs = [sentence for document in documents for sentence in document.model_inputs]
    if len(inputs) > config.max_sentences_per_request:
        raise OverLimit(
            f"request has {len(inputs)} sentences to translate > max_sentences_per_request "
            f"({config.max_sentences_per_request}); send the text in several requests"
        )
    encoded = iter(translator.encode_sentences(inputs))
    texts = [
        PlannedText(document, [Sentence.of(next(encoded)) for _ in document.model_inputs])
        for document in documents
    ]
    planned = PlannedRequest(request, texts, policy)
    policy.check_cost([chunk.ids for s in planned.sentences for chunk in s.chunks], request.options)
    return planned


def check_file_size(characters: int, config: HandlerConfig) -> None:
    """A .docx or .odt counts the characters of its paragraphs to translate, against the request's."""
    if characters > config.max_chars_per_request:
        raise OverLimit(
            f"the file has {characters} characters to translate > max_chars_per_request "
            f"({config.max_chars_per_request}); send it in parts"
        )


def render(
    planned: PlannedRequest, budget_seconds: float = HandlerConfig.text_budget_ms / 1000
) -> list[TextAnswer]:
    """Each text rebuilt around its sentences' translations; raises TooCostly past `budget_seconds`."""
    request = planned.request
    answers = []
    with text_budget(budget_seconds, "rebuilding around the translations") as deadline:
        for index, text in enumerate(planned.texts):
            deadline.where = f"text {index}" if request.as_list else "text"
            answers.append(_answer(text, request.options.alternatives > 0))
    return answers


def _answer(text: PlannedText, alternatives: bool) -> TextAnswer:
    rendered = text.document.render([sentence.translation for sentence in text.sentences])
    cached = iter(sentence.cached for sentence in text.sentences)
    pairs = [
        SentenceAnswer(pair.source, pair.translation, pair.translated, pair.translated and next(cached))
        for pair in rendered.pairs
    ]
    return TextAnswer(
        rendered.text,
        pairs,
        rendered.dropped,
        [cut for sentence in text.sentences if (cut := sentence.cut) is not None],
        len(text.sentences),
        sum(sentence.cached for sentence in text.sentences),
        _alternatives(text) if alternatives else None,
    )


def _alternatives(text: PlannedText) -> list[str]:
    """A one-sentence text rendered around each next-best translation of its sentence; a text of
    several sentences gets none (which sentence's alternatives would a whole text's be?)."""
    if len(text.sentences) != 1:
        return []
    return [text.document.render([alternative]).text for alternative in text.sentences[0].alternatives]
