"""TorchServe's own Context around the handler, for tests that call it in process (no server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ts.context import Context, RequestProcessor
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl

from archive.tatoeba import REPO_ROOT
from handlers.zh_en_handler import TranslationHandler

MANIFEST = {"model": {"modelName": "zh_en", "modelVersion": "1.0-int8"}}
METRICS_CONFIG = REPO_ROOT / "config" / "metrics.yaml"


def make_context(model_dir: Path, variant: str, batch: int, **handler_keys: Any) -> Context:
    """A Context for one call of `batch` requests; handler_keys go into the yaml's handler section.

    One call answers its whole batch (torchserve_batching: static): nothing here calls again for
    requests held open, as TorchServe's continuous batching would."""
    handler = {
        "variant": variant,
        "warmup": False,
        "max_texts_per_request": 4,
        "torchserve_batching": "static",
    }
    yaml_config = {"handler": {**handler, **handler_keys}}
    metrics = MetricsCacheYamlImpl(config_file_path=str(METRICS_CONFIG))
    context = Context(
        "zh_en",
        str(model_dir),
        MANIFEST,
        batch,
        None,
        "0.12.0",
        metrics=metrics,
        model_yaml_config=yaml_config,
    )
    context.request_processor = [RequestProcessor({}) for _ in range(batch)]
    return context


def initialized_handler(model_dir: Path, variant: str = "int8", **handler_keys: Any) -> TranslationHandler:
    handler = TranslationHandler()
    handler.initialize(make_context(model_dir, variant, 1, **handler_keys))
    return handler
