"""TorchServe handler for Chinese-to-English MarianMT (fp32 or int8, set by the model-config yaml).

Stages: initialize (config, load, quantize, pick the decoder, threads, warm-up),
preprocess (validate and tokenize each request), inference (every text of the
batch in decode units cut by beam count, input length and row budget, each
padded only to its longest), postprocess
(exactly one response per request; bad requests get their own 4xx, the rest
of the batch is still answered).
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from pathlib import Path
from typing import Any

from ts.torch_handler.base_handler import BaseHandler

from handlers.handler_config import HandlerConfig
from handlers.jobs import Job
from handlers.protocols import NATIVE, error_body, wrap_response
from handlers.request_parsing import InvalidRequest, parse_request
from handlers.translator import STANDIN_NOTICE, Translator

logger = logging.getLogger(__name__)


class TranslationHandler(BaseHandler):  # type: ignore[misc]  # ts ships no type hints
    def __init__(self) -> None:
        super().__init__()
        self.translator: Translator | None = None
        self.identity: dict[str, Any] = {}

    def initialize(self, context: Any) -> None:
        config = HandlerConfig.from_mapping((context.model_yaml_config or {}).get("handler"))
        model_dir = Path(context.system_properties["model_dir"])
        self.translator = Translator.load(model_dir, config)
        self.identity = self._identity(context, config)
        info = self.translator.info
        logger.info(
            "loaded model=%s version=%s variant=%s decoder=%s max_batch_rows=%d source=%s standin=%s "
            "parameters=%d quantized_linear=%d threads=%d load_seconds=%.2f",
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
            info.load_seconds,
        )
        if info.standin:
            logger.warning("model %s is the %s", self.identity["model"], STANDIN_NOTICE)
        self.initialized = True

    def preprocess(self, data: list[dict[str, Any]]) -> list[Job]:
        return [self._prepare(item) for item in data]

    def inference(self, jobs: list[Job], *args: Any, **kwargs: Any) -> list[Job]:
        """Every text of every valid request, decoded in units cut by beam count, length and row budget."""
        assert self.translator is not None
        rows = [(job, row) for job in jobs if job.error is None for row in range(len(job.token_ids))]
        outputs = self.translator.translate_batch(
            [job.token_ids[row] for job, row in rows], [job.options for job, _ in rows]
        )
        for job in jobs:
            job.translations = [""] * len(job.token_ids)
        for (job, row), text in zip(rows, outputs, strict=True):
            job.translations[row] = text
        return jobs

    def postprocess(self, jobs: list[Job]) -> list[dict[str, Any]]:
        return [self._respond(index, job) for index, job in enumerate(jobs)]

    def _prepare(self, item: dict[str, Any]) -> Job:
        assert self.translator is not None
        protocol = NATIVE
        try:
            request = parse_request(item, self.translator.config)
            protocol = request.protocol
            token_ids = self.translator.encode(request.texts)
            self.translator.check_cost(token_ids, request.options)
            return Job(request.as_list, request.options, token_ids, protocol=protocol)
        except InvalidRequest as error:
            return Job(error=error, protocol=error.protocol or protocol)

    def _respond(self, index: int, job: Job) -> dict[str, Any]:
        self.context.set_response_content_type(index, "application/json")
        if job.error is not None:
            # The standard reason phrase: the message (which may quote client input) stays in the body.
            self.context.set_response_status(job.error.status, HTTPStatus(job.error.status).phrase, index)
            return error_body(job.protocol, job.error.status, job.error.message)
        body: dict[str, Any] = (
            {"translations": job.translations} if job.as_list else {"translation": job.translations[0]}
        )
        return wrap_response(job.protocol, {**body, **self.identity})

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
