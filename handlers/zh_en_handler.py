"""TorchServe handler for Chinese-to-English MarianMT (fp32 or int8, set by the model-config yaml).

Stages: initialize (config, load, quantize, pick the decoder, threads, warm-up, the sentence
cache), preprocess (validate each request, split its texts into sentences, protect what must
not be translated, tokenize), inference (every sentence of the batch not in the cache, decoded
in units cut by beam count, input length and row budget, each padded only to its longest),
postprocess (each text rebuilt around its translated sentences; exactly one response per
request: bad requests get their own 4xx, the rest of the batch is still answered).
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from pathlib import Path
from typing import Any

from ts.metrics.dimension import Dimension
from ts.torch_handler.base_handler import BaseHandler

from handlers.handler_config import HandlerConfig
from handlers.jobs import Job, admit_within
from handlers.protocols import NATIVE, error_body, wrap_response
from handlers.request_parsing import InvalidRequest, parse_request
from handlers.sentence_cache import SentenceCache
from handlers.sentence_work import BatchCounts, SentenceDecoder, answer, plan_request
from handlers.translator import STANDIN_NOTICE, Translator

logger = logging.getLogger(__name__)

NO_EXPLANATIONS = "this model has no explanations; translate with /predictions, :predict or /infer"


class TranslationHandler(BaseHandler):  # type: ignore[misc]  # ts ships no type hints
    def __init__(self) -> None:
        super().__init__()
        self.translator: Translator | None = None
        self.sentences: SentenceDecoder | None = None
        self.identity: dict[str, Any] = {}

    def initialize(self, context: Any) -> None:
        config = HandlerConfig.from_mapping((context.model_yaml_config or {}).get("handler"))
        model_dir = Path(context.system_properties["model_dir"])
        self.translator = Translator.load(model_dir, config)
        self.identity = self._identity(context, config)
        cache = SentenceCache(config.sentence_cache_entries, config.sentence_cache_bytes)
        model_tag = f"{self.identity['model']}/{self.identity['version']}/{config.variant}"
        self.sentences = SentenceDecoder(self.translator, cache, model_tag)
        info = self.translator.info
        logger.info(
            "loaded model=%s version=%s variant=%s decoder=%s max_batch_rows=%d source=%s standin=%s "
            "parameters=%d quantized_linear=%d threads=%d sentence_cache_entries=%d load_seconds=%.2f",
            self.identity["model"],
            self.identity["version"],
            config.variant,
            self.translator.decoder.name,
            config.max_batch_rows,
            info.source,
            info.standin,
            info.parameters,
            info.quantized_linear,
            info.threads,
            config.sentence_cache_entries,
            info.load_seconds,
        )
        if info.standin:
            logger.warning("model %s is the %s", self.identity["model"], STANDIN_NOTICE)
        self.initialized = True

    def preprocess(self, data: list[dict[str, Any]]) -> list[Job]:
        assert self.translator is not None
        jobs = [self._prepare(item) for item in data]
        admit_within(jobs, self.translator.config.max_sentences_per_batch)
        return jobs

    def inference(self, jobs: list[Job], *args: Any, **kwargs: Any) -> list[Job]:
        """Every sentence of every valid request together: the cache first, the rest in decode units."""
        assert self.sentences is not None
        counts = self.sentences.decode_batch([job.work for job in jobs if job.work is not None])
        self._count(counts)
        return jobs

    def explain_handle(self, jobs: list[Job], raw_data: Any) -> list[dict[str, Any]]:
        """`:explain` routes reach the handler too; a translation model has nothing to explain."""
        for job in jobs:
            if job.work is not None:
                job.work, job.error = None, InvalidRequest(NO_EXPLANATIONS, status=501)
        return self.postprocess(jobs)

    def postprocess(self, jobs: list[Job]) -> list[dict[str, Any]]:
        return [self._respond(index, job) for index, job in enumerate(jobs)]

    def _prepare(self, item: dict[str, Any]) -> Job:
        assert self.translator is not None
        protocol = NATIVE
        try:
            request = parse_request(item, self.translator.config)
            protocol = request.protocol
            return Job(plan_request(request, self.translator), protocol=protocol)
        except InvalidRequest as error:
            return Job(error=error, protocol=error.protocol or protocol)

    def _respond(self, index: int, job: Job) -> dict[str, Any]:
        assert self.translator is not None
        self.context.set_response_content_type(index, "application/json")
        if job.work is None:
            assert job.error is not None
            # The standard reason phrase: the message (which may quote client input) stays in the body.
            self.context.set_response_status(job.error.status, HTTPStatus(job.error.status).phrase, index)
            if job.error.retry_after is not None:
                self.context.set_response_header(index, "Retry-After", str(job.error.retry_after))
            return error_body(job.protocol, job.error.status, job.error.message, job.error.kind)
        body = answer(job.work, self.translator.config.max_input_tokens)
        return wrap_response(job.protocol, {**body, **self.identity})

    def _count(self, counts: BatchCounts) -> None:
        """Custom metrics, exposed on the metrics port (config/metrics.yaml declares them)."""
        metrics = self.context.metrics
        variant = [Dimension("Variant", str(self.identity["variant"]))]
        for name, value in (
            ("SentenceCacheHits", counts.cache_hits),
            ("SentenceCacheMisses", counts.cache_misses),
            ("SentencesTranslated", counts.sentences),
            ("TokensGenerated", counts.generated_tokens),
        ):
            metrics.add_counter(name, value, dimensions=variant)

    def _identity(self, context: Any, config: HandlerConfig) -> dict[str, Any]:
        assert self.translator is not None
        model = (context.manifest or {}).get("model", {})
        identity: dict[str, Any] = {
            "model": model.get("modelName", context.model_name),
            "version": model.get("modelVersion"),
            "variant": config.variant,
            "decoder": self.translator.decoder.name,
            "standin": self.translator.info.standin,
        }
        if self.translator.info.standin:
            identity["notice"] = STANDIN_NOTICE
        return identity
