"""TorchServe handler for Chinese-to-English MarianMT (fp32 or int8, set by the model-config yaml).

One path for every request, in short stages: wire in (handlers.wire: the envelope, then a
validated TranslationRequest), plan (handlers.translation.plan: sentences, protected spans,
token ids), decode (handlers.translation.decoding: the sentence cache, then the step scheduler,
which admits sentences as rows free up), render (the texts rebuilt around their sentences), wire
out (the envelope's answer or error shape). Bad requests get their own 4xx; the rest of the call
is still answered.

How TorchServe calls the worker decides only when requests arrive and how answers leave
(handlers.open_requests): `torchserve_batching: static` decodes each TorchServe batch to its end in the
worker's thread; `torchserve_batching: continuous` (continuousBatching) keeps requests open across calls while
partition processes step, and answers each call with a chunk per request.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Hashable
from http import HTTPStatus
from pathlib import Path
from typing import Any

from ts.metrics.dimension import Dimension
from ts.metrics.metric_type_enum import MetricTypes
from ts.torch_handler.base_handler import BaseHandler

from handlers.calls import Calls, calls_for
from handlers.errors import Refused
from handlers.handler_config import HandlerConfig
from handlers.jobs import Job
from handlers.model.standin_marker import STANDIN_NOTICE
from handlers.model.translator import Translator
from handlers.open_requests import OpenRequests
from handlers.scheduling.partitions import Driver
from handlers.scheduling.policy import DecodePolicy
from handlers.scheduling.run import load_and_warm_up, scheduler_for
from handlers.sentence_cache import SentenceCache
from handlers.text.glossary import NO_GLOSSARY, load_tsv
from handlers.translation.decoding import Counts, SentenceDecoding
from handlers.translation.plan import plan_request, render
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
        self.requests: OpenRequests | None = None
        self.calls: Calls | None = None  # how TorchServe calls this worker (the scheduler's policy)
        self._gauged = 0.0  # when the scheduler gauges were last reported
        self.identity: dict[str, Any] = {}
        self.glossary = NO_GLOSSARY  # the deployment's (glossary_file in the yaml)
        self.config = HandlerConfig()  # the yaml's handler section (set at initialize)
        self.policy: DecodePolicy | None = None  # the deployment's decode rules (set at initialize)

    def initialize(self, context: Any) -> None:
        yaml = context.model_yaml_config or {}
        config = self.config = HandlerConfig.from_mapping(yaml.get("handler"))
        model_dir = Path(context.system_properties["model_dir"])
        self.calls = calls_for(config, yaml)
        self.translator = load_and_warm_up(model_dir, config, self.calls.loading_threads)
        if config.glossary_file is not None:
            self.glossary = load_tsv(model_dir / config.glossary_file, config.max_glossary_chars)
        self.identity = self._identity(context, config)
        self.policy = DecodePolicy.of(config, self.translator)
        cache = SentenceCache(config.sentence_cache_entries, config.sentence_cache_bytes)
        model_tag = f"{self.identity['model']}/{self.identity['version']}/{config.variant}"
        decoding = SentenceDecoding[Job](self.translator, cache, model_tag, self._driver(self.calls))
        self.requests = OpenRequests(decoding)
        info = self.translator.info
        logger.info(
            "loaded model=%s version=%s variant=%s decoder=%s torchserve_batching=%s max_batch_rows=%d "
            "source=%s standin=%s parameters=%d quantized_linear=%d threads=%d cpu_kernels=%s "
            "sentence_cache_entries=%d glossary_terms=%d load_seconds=%.2f",
            self.identity["model"],
            self.identity["version"],
            config.variant,
            self.translator.decoder.name,
            config.torchserve_batching,
            config.max_batch_rows,
            info.source,
            info.standin,
            info.parameters,
            info.quantized_linear,
            config.threads,
            info.kernels,
            config.sentence_cache_entries,
            len(self.glossary.terms),
            info.load_seconds,
        )
        if info.standin:
            logger.warning("model %s is the %s", self.identity["model"], STANDIN_NOTICE)
        self.initialized = True

    def handle(self, data: list[dict[str, Any]], context: Any) -> list[Any]:
        """One TorchServe call: open the new requests, decode, answer every request of the call."""
        assert self.requests is not None and self.calls is not None
        self.context, started = context, time.perf_counter()
        requests = self.calls.request_keys(context, len(data), self.requests)
        new = [index for index, request in enumerate(requests) if not self.requests.is_open(request)]
        jobs = {index: self._prepare(data[index], context, index) for index in new}
        self.calls.admit(list(jobs.values()))
        for index, job in jobs.items():
            self.requests.open(requests[index], job)
        self.calls.decode(self.requests)
        answers = [self._answer(index, request) for index, request in enumerate(requests)]
        self.calls.finish(context, [more for _, more in answers], (time.perf_counter() - started) * 1000)
        self._report()
        return [body for body, _ in answers]

    def _prepare(self, item: dict[str, Any], context: Any, index: int) -> Job:
        """Wire in (the envelope first, so that any error is answered in its shape), then the plan.

        Text and model code refuse in their own terms (handlers.errors); the status is chosen here.
        """
        assert self.translator is not None
        job = Job()
        try:
            job.protocol, payload = read_body(item)
            job.answer = job.protocol.answer_at_once(payload, self.config)  # e.g. /detect
            if job.answer is not None:
                return job
            request = job.protocol.parse(payload, self.config)
            if context.get_request_header(index, "explain") == "True":
                # `:explain` routes reach the handler too; a translation model has nothing to explain.
                raise InvalidRequest(NO_EXPLANATIONS, status=501)
            assert self.policy is not None
            job.planned = plan_request(request, self.translator, self.policy, self.glossary)
        except InvalidRequest as error:
            job.refuse(error)
        except Refused as refusal:
            job.refuse(client_error(refusal))
        return job

    def _answer(self, index: int, request: Hashable) -> tuple[ResponseBody | bytes, bool | None]:
        """This call's chunk for a request, and whether more follow: True, False (its last chunk),
        or None (a whole response: every answer of a static call, and a client error, after whose
        4xx TorchServe closes the connection). TorchServe serializes a returned object as it does
        for any handler."""
        assert self.requests is not None
        job = self.requests.job(request)
        progress = self.requests.progress(request)
        if progress is None:
            return b"", None  # answered already; TorchServe sends it until its connection closes
        whole_now = self.calls is not None and self.calls.whole_answers
        if whole_now or (progress.first and job.error is not None):
            whole = self._body(job)  # before the head: rendering may refuse the request (a 422)
            self._set_head(index, job)
            self.requests.answered(request, ended=whole_now)
            return whole, None
        lines = b"".join(self._line(job, sentence) for sentence in progress.lines)
        if progress.first or not progress.done:
            if progress.first:
                self._set_head(index, job)
            return lines, True
        whole = self._body(job)  # a TooCostly refusal now comes under the 200 already sent
        self.requests.answered(request, ended=True)
        if job.planned is not None and job.planned.request.stream:
            return lines + json.dumps(whole, ensure_ascii=False).encode("utf-8") + b"\n", False
        return _json(whole), False

    def _set_head(self, index: int, job: Job) -> None:
        """Status and headers of request `index` (sent with its first chunk under continuous batching)."""
        streaming = job.planned is not None and job.planned.request.stream
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
        if job.planned is None:
            assert job.error is not None
            return job.protocol.error_body(job.error)
        request = job.planned.request
        try:
            answers = render(job.planned, self.config.text_budget_ms / 1000)
        except Refused as refusal:
            # Under continuous batching a status may have gone out with a first chunk: the body says it.
            job.refuse(client_error(refusal))
            return self._body(job)
        body = native_body(answers, request.as_list, request.want_sentences, self.config.max_input_tokens)
        return job.protocol.answer({**body, **self.identity})

    @staticmethod
    def _line(job: Job, index: int) -> bytes:
        """One streamed sentence: its index among the sentences the model decodes, and its translation."""
        assert job.planned is not None
        line = {"sentence": index, "translation": job.planned.streamed(index)}
        return json.dumps(line, ensure_ascii=False).encode("utf-8") + b"\n"

    def _driver(self, calls: Calls) -> Driver:
        """The step scheduler(s): in this thread for static calls, in partition processes for step."""
        assert self.translator is not None
        return calls.driver([scheduler_for(self.translator, self.config) for _ in range(calls.partitions())])

    def _report(self) -> None:
        """Custom metrics (config/metrics.yaml declares them): counters, what waits and what runs,
        and time to first sentence. Under continuous batching at most once a second (calls come
        every few ms, and each metric is a log line the frontend parses) and when the last open request
        is answered, so that nothing waits for the next request."""
        assert self.requests is not None
        assert self.calls is not None
        holds_open = self.calls.holds_open
        if holds_open and time.monotonic() - self._gauged < 1.0 and self.requests.open_count:
            return
        self._gauged = time.monotonic()
        counts = self.requests.decoding.take_counts()
        if counts.any:
            self._count(counts)
        metrics, state = self.context.metrics, self.requests.state()
        variant = [Dimension("Variant", str(self.identity["variant"]))]
        if holds_open:
            for name, value in (
                ("QueuedSentences", state.waiting_sentences),
                ("RunningRows", state.running_rows),
            ):
                metrics.add_metric(name, value, "count", dimensions=variant, metric_type=MetricTypes.GAUGE)
        for milliseconds in counts.first_sentence_ms:
            metrics.add_time("TimeToFirstSentence", round(milliseconds, 2), dimensions=variant)

    def _count(self, counts: Counts) -> None:
        metrics = self.context.metrics
        variant = [Dimension("Variant", str(self.identity["variant"]))]
        for name, value in (
            ("SentenceCacheHits", counts.cache_hits),
            ("SentenceCacheMisses", counts.cache_misses),
            ("GlossaryHits", counts.glossary_hits),
        ):
            metrics.add_counter(name, value, dimensions=variant)
        # The work done names the C kernels' path that did it (handlers.model.native): a list of its own,
        # since TorchServe appends ModelName and Level to the list it is given.
        assert self.translator is not None
        kernels = Dimension("CpuKernels", self.translator.info.kernels)
        for name, value in (
            ("SentencesTranslated", counts.sentences),
            ("TokensGenerated", counts.generated_tokens),
        ):
            metrics.add_counter(
                name, value, dimensions=[Dimension("Variant", str(self.identity["variant"])), kernels]
            )

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


def _json(body: Any) -> bytes:
    """The bytes TorchServe itself sends for a dict a handler returns (json.dumps, indent 2)."""
    return json.dumps(body, indent=2).encode("utf-8")
