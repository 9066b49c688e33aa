"""TorchServe handler for Chinese-to-English MarianMT (fp32 or int8, set by the model-config yaml).

Stages: initialize (config, load, quantize, pick the decoder, threads, warm-up, the sentence
cache), preprocess (validate each request, split its texts into sentences, protect what must
not be translated, tokenize), inference (every sentence of the batch not in the cache, decoded
in units cut by beam count, input length and row budget, each padded only to its longest),
postprocess (each text rebuilt around its translated sentences; exactly one response per
request: bad requests get their own 4xx, the rest of the batch is still answered).

With `scheduler: step` (and TorchServe's continuousBatching) the same stages run per request as
it arrives, and decoding is shared across calls: handle_open admits the new requests, lets the
step scheduler decode for a time slice, and answers every open request with a chunk
(handlers.open_requests says how chunks make the HTTP response).
"""

from __future__ import annotations

import logging
import time
from http import HTTPStatus
from pathlib import Path
from typing import Any

from ts.metrics.dimension import Dimension
from ts.metrics.metric_type_enum import MetricTypes
from ts.torch_handler.base_handler import BaseHandler

from handlers.errors import Refused
from handlers.handler_config import ConfigError, HandlerConfig
from handlers.jobs import Job, admit_within
from handlers.model.decoding import FastDecoder
from handlers.model.heap_trim import IDLE_TRIM_SECONDS, IdleTrim
from handlers.model.translator import STANDIN_NOTICE, Translator
from handlers.open_requests import OpenRequests
from handlers.pipeline import BatchCounts, CachedDecoding, plan_request, text_answers
from handlers.scheduling.partition_processes import ProcessPartitions
from handlers.scheduling.step_scheduler import StepScheduler
from handlers.sentence_cache import SentenceCache
from handlers.text.glossary import NO_GLOSSARY, load_tsv
from handlers.wire.envelope import ResponseBody
from handlers.wire.envelopes import read_body
from handlers.wire.errors import InvalidRequest, client_error
from handlers.wire.responses import native_body

logger = logging.getLogger(__name__)

NO_EXPLANATIONS = "this model has no explanations; translate with /predictions, :predict or /infer"


class TranslationHandler(BaseHandler):  # type: ignore[misc]  # ts ships no type hints
    def __init__(self) -> None:
        super().__init__()
        self.translator: Translator | None = None
        self.sentences: CachedDecoding | None = None
        self.open_requests: OpenRequests | None = None  # scheduler: step
        self._gauged = 0.0  # when the scheduler gauges were last reported
        self.heap = IdleTrim(IDLE_TRIM_SECONDS)
        self.identity: dict[str, Any] = {}
        self.glossary = NO_GLOSSARY  # the deployment's (glossary_file in the yaml)

    def initialize(self, context: Any) -> None:
        config = HandlerConfig.from_mapping((context.model_yaml_config or {}).get("handler"))
        model_dir = Path(context.system_properties["model_dir"])
        self.translator = Translator.load(model_dir, config)
        if config.glossary_file is not None:
            self.glossary = load_tsv(model_dir / config.glossary_file, config.max_glossary_chars)
        self.identity = self._identity(context, config)
        cache = SentenceCache(config.sentence_cache_entries, config.sentence_cache_bytes)
        model_tag = f"{self.identity['model']}/{self.identity['version']}/{config.variant}"
        self.sentences = CachedDecoding(self.translator, cache, model_tag)
        if config.scheduler == "step":
            self.open_requests = self._open_requests(context, cache, model_tag)
        info = self.translator.info
        logger.info(
            "loaded model=%s version=%s variant=%s decoder=%s max_batch_rows=%d source=%s standin=%s "
            "parameters=%d quantized_linear=%d threads=%d sentence_cache_entries=%d glossary_terms=%d "
            "load_seconds=%.2f",
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
            len(self.glossary.terms),
            info.load_seconds,
        )
        if info.standin:
            logger.warning("model %s is the %s", self.identity["model"], STANDIN_NOTICE)
        self.initialized = True

    def handle(self, data: list[dict[str, Any]], context: Any) -> list[Any]:
        if self.open_requests is not None:
            return self.handle_open(data, context)  # its partitions trim their own heaps
        self.heap.busy()
        try:
            return super().handle(data, context)  # type: ignore[no-any-return]
        finally:
            self.heap.idle()

    def handle_open(self, data: list[dict[str, Any]], context: Any) -> list[bytes]:
        """One continuous-batching call: admit new requests, decode a time slice, answer every one."""
        assert self.open_requests is not None and self.translator is not None
        self.context = context
        requests = [context.get_request_id(index) for index in range(len(data))]
        self.open_requests.close_missing(set(requests))
        for index, (item, request) in enumerate(zip(data, requests, strict=True)):
            if not self.open_requests.is_open(request):
                job = self._prepare(item)
                if context.get_request_header(index, "explain") == "True" and job.work is not None:
                    job.refuse(InvalidRequest(NO_EXPLANATIONS, status=501))
                self._set_head(index, job)
                self.open_requests.open(request, job)
        config = self.translator.config
        self.open_requests.advance(config.step_slice_ms / 1000, config.backlog_slice_ms / 1000)
        chunks = [self.open_requests.chunk(request) for request in requests]
        # TorchServe's ts_stream_next: a request's stream closes when its criterion says it is
        # done; None sends a whole (unstreamed) response.
        context.stopping_criteria = [
            lambda _, more=chunk.more: None if more is None else not more for chunk in chunks
        ]
        self._report_scheduler()
        return [chunk.body for chunk in chunks]

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

    def explain_handle(self, jobs: list[Job], raw_data: Any) -> list[ResponseBody]:
        """`:explain` routes reach the handler too; a translation model has nothing to explain."""
        for job in jobs:
            if job.work is not None:
                job.refuse(InvalidRequest(NO_EXPLANATIONS, status=501))
        return self.postprocess(jobs)

    def postprocess(self, jobs: list[Job]) -> list[ResponseBody]:
        return [self._respond(index, job) for index, job in enumerate(jobs)]

    def _prepare(self, item: dict[str, Any]) -> Job:
        """Wire in (the envelope first, so that any error is answered in its shape), then the plan.

        Text and model code refuse in their own terms (handlers.errors); the status is chosen here.
        """
        assert self.translator is not None
        job = Job()
        try:
            job.protocol, payload = read_body(item)
            job.answer = job.protocol.answer_at_once(payload)  # LibreTranslate's /detect: no model
            if job.answer is not None:
                return job
            request = job.protocol.parse(payload, self.translator.config)
            job.work = plan_request(request, self.translator, self.glossary)
        except InvalidRequest as error:
            job.refuse(error)
        except Refused as refusal:
            job.refuse(client_error(refusal))
        return job

    def _respond(self, index: int, job: Job) -> ResponseBody:
        body = self._body(job)  # first: rendering may refuse the request (TooCostly), a 422
        self._set_head(index, job)
        return body

    def _set_head(self, index: int, job: Job) -> None:
        """Status and headers of request `index` (sent with its first chunk under scheduler: step)."""
        streaming = job.work is not None and job.work.request.stream
        self.context.set_response_content_type(
            index, "application/x-ndjson" if streaming else "application/json"
        )
        if streaming:
            self.context.set_response_header(index, "X-Accel-Buffering", "no")  # nginx: pass chunks on
        if job.error is not None:
            # The standard reason phrase: the message (which may quote client input) stays in the body.
            status = job.protocol.status(job.error.status)
            self.context.set_response_status(status, HTTPStatus(status).phrase, index)
            if job.error.retry_after is not None:
                self.context.set_response_header(index, "Retry-After", str(job.error.retry_after))

    def _body(self, job: Job) -> ResponseBody:
        assert self.translator is not None
        if job.answer is not None:
            return job.answer
        if job.work is None:
            assert job.error is not None
            return job.protocol.error_body(job.error)
        request = job.work.request
        try:
            answers = text_answers(job.work, self.translator.config.text_budget_ms / 1000)
        except Refused as refusal:
            # Under scheduler: step the status has gone out with the first chunk: the body says it.
            job.refuse(client_error(refusal))
            return self._body(job)
        body = native_body(
            answers, request.as_list, request.want_sentences, self.translator.config.max_input_tokens
        )
        return job.protocol.answer({**body, **self.identity})

    def _open_requests(self, context: Any, cache: SentenceCache, model_tag: str) -> OpenRequests:
        assert self.translator is not None
        yaml = context.model_yaml_config or {}
        if not yaml.get("continuousBatching"):
            raise ConfigError("scheduler: step needs continuousBatching: true in the model-config yaml")
        if max(yaml.get("minWorkers", 1), yaml.get("maxWorkers", 1)) > 1:
            # TorchServe 0.12 polls new jobs under one lock per model; an idle worker waits for a
            # job while holding it, so a second worker would stall every open request of the first
            # until the next request arrives. One worker, with step_partitions for the cores.
            raise ConfigError(
                "scheduler: step needs minWorkers: 1 and maxWorkers: 1 (use step_partitions for cores)"
            )
        decoder = self.translator.decoder
        assert isinstance(decoder, FastDecoder)  # HandlerConfig requires decoder: fast for step
        config = self.translator.config
        pad_id = self.translator.tokenizer.pad_token_id
        partitions = [
            StepScheduler(decoder, pad_id, config.max_batch_rows, config.max_cohorts, config.document_share)
            for _ in range(config.step_partitions)
        ]
        return OpenRequests(self.translator, ProcessPartitions(partitions), cache, model_tag, self._body)

    def _count(self, counts: BatchCounts) -> None:
        """Custom metrics, exposed on the metrics port (config/metrics.yaml declares them)."""
        metrics = self.context.metrics
        variant = [Dimension("Variant", str(self.identity["variant"]))]
        for name, value in (
            ("SentenceCacheHits", counts.cache_hits),
            ("SentenceCacheMisses", counts.cache_misses),
            ("SentencesTranslated", counts.sentences),
            ("TokensGenerated", counts.generated_tokens),
            ("GlossaryHits", counts.glossary_hits),
        ):
            metrics.add_counter(name, value, dimensions=variant)

    def _report_scheduler(self) -> None:
        """scheduler: step: counters, what waits and what runs, and time to first sentence, at most
        once a second (calls come every few ms, and each metric is a log line the frontend parses)
        and when the last open request is answered, so that nothing waits for the next request."""
        assert self.open_requests is not None
        if time.monotonic() - self._gauged < 1.0 and self.open_requests.open_count:
            return
        self._gauged = time.monotonic()
        counts, first_sentence_ms = self.open_requests.take_counts()
        if counts.sentences or counts.generated_tokens or counts.cache_hits or counts.glossary_hits:
            self._count(counts)
        metrics, state = self.context.metrics, self.open_requests.scheduler.state()
        variant = [Dimension("Variant", str(self.identity["variant"]))]
        for name, value in (
            ("QueuedSentences", state.waiting_sentences),
            ("RunningRows", state.running_rows),
        ):
            metrics.add_metric(name, value, "count", dimensions=variant, metric_type=MetricTypes.GAUGE)
        for milliseconds in first_sentence_ms:
            metrics.add_time("TimeToFirstSentence", round(milliseconds, 2), dimensions=variant)

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
