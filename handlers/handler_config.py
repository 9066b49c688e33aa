"""Typed handler settings, read from the `handler:` section of a model-config yaml.

Unknown keys, wrong types and values out of bounds are errors at load time that name the key: a
typo in the yaml must fail the worker loudly rather than be ignored and serve with defaults. Each
field carries what it changes and its bounds (`setting`), from which __post_init__ checks it and
docs/CONFIGURATION.md is generated (`python -m handlers.handler_config`, `make config-doc`; a
test fails when the two differ). The defaults are what config/zh_en_*.yaml ship.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

from handlers.model.model_config import (
    DECODER_NAMES,
    MODEL_MAX_TOKENS,
    CpuKernels,
    DecoderName,
    Int8Kernels,
    ModelConfig,
    Variant,
)

__all__ = [  # the model's types are named here too: the yaml's keys are typed with them
    "DECODER_NAMES",
    "MODEL_MAX_TOKENS",
    "ConfigError",
    "CpuKernels",
    "DecoderName",
    "HandlerConfig",
    "Int8Kernels",
    "TorchServeBatching",
    "Variant",
]

# How TorchServe calls the worker: with each batch (static) or again and again with the requests it
# holds open (continuous: TorchServe's continuousBatching). Either way one step scheduler decodes.
TorchServeBatching = Literal["static", "continuous"]


class ConfigError(ValueError):
    """The handler section of the model-config yaml is invalid."""


# Keys that were renamed: the old name, and what to write instead.
RENAMED = {
    "scheduler": "`scheduler` is now `torchserve_batching`: `scheduler: step` is `torchserve_batching: "
    "continuous`, `scheduler: static` is `torchserve_batching: static`",
}


def setting(
    default: Any,
    what: str,
    *,
    at_least: float | None = None,
    at_most: float | None = None,
    above: float | None = None,
) -> Any:
    """A field: its default, what it changes (one paragraph for docs/CONFIGURATION.md), its bounds."""
    bounds = {"at_least": at_least, "at_most": at_most, "above": above}
    return field(default=default, metadata={"what": what, **bounds})


@dataclass(frozen=True)
class HandlerConfig:
    """Everything the handler needs to know besides the model files."""

    variant: Variant = setting(
        "fp32",
        "The weights the worker serves: fp32 as the model has them, or int8 (every linear layer "
        "quantized per row when the worker loads, docs/INT8.md). Each archive sets its own.",
    )
    int8_kernels: Int8Kernels = setting(
        "fbgemm",
        "int8 only: torch's kernels for the int8 matmuls our own do not run. fbgemm gives the outputs "
        "every test and figure was made with; onednn uses AMX tiles where the CPU has them and rounds "
        "some outputs differently in the last bit; auto picks onednn there, fbgemm elsewhere.",
    )
    cpu_kernels: CpuKernels = setting(
        "auto",
        "Our C kernels' instruction-set path (docs/INT8.md): auto takes the best one a host of ours "
        "has proven of those the CPU offers; a path's name forces it (the load fails if the CPU lacks "
        "it); torch runs none. The same outputs on every path.",
    )
    threads: int = setting(
        1, "Intra-op threads of each process that decodes (each partition under continuous).", at_least=1
    )
    warmup: bool = setting(True, "Translate a few sentences at load, so the first request is not slow.")
    num_beams: int | None = setting(
        None,
        "Default beams of a request that names none; unset: the model's generation_config.json "
        "decides (4 for opus-mt-zh-en). At most max_beams.",
        at_least=1,
    )
    decoder: DecoderName = setting(
        "fast",
        "fast: our own greedy and beam loops over the target-side output layer (the ids of "
        "generate(), restricted to target-side pieces); generate: transformers' generate(), kept to "
        "compare against.",
    )
    max_batch_rows: int = setting(
        64,
        "Rows (sentences x beams) each running batch holds; 64 and 128 were level under `make layout` "
        "on a 2-vCPU AMD EPYC (bench/results/runs/2026-11-28-0940-547dbec).",
        at_least=1,
    )
    torchserve_batching: TorchServeBatching = setting(
        "continuous",
        "How TorchServe calls the worker; one step scheduler decodes either way (docs/SCHEDULING.md). "
        "continuous: requests are admitted at any decoder step and stay open across calls, answers "
        "can stream; needs `continuousBatching: true` and one worker in the same yaml. static: each "
        "TorchServe batch is decoded to its end in the worker's thread, and answered whole; needs "
        "`continuousBatching` unset or false.",
    )
    step_partitions: int = setting(
        2,
        "continuous only: running batches that step side by side, each in its own process with "
        "`threads` threads; one per core (handlers.scheduling.partitions says why).",
        at_least=1,
    )
    max_cohorts: int = setting(
        4,
        "Start positions a running batch mixes at most. Each cohort costs its own attention calls and "
        'search per step; docs/history/benchmarks-2026-11.md, "Cohorts per running batch", measures '
        "2, 4 and 8.",
        at_least=1,
    )
    document_rows_beside_interactive: int = setting(
        16,
        "Rows documents (requests of several sentences) may hold while a one-sentence request runs, "
        "waits or arrived within interactive_window_ms; a document always runs at least one sentence "
        "(docs/SCHEDULING.md, fairness).",
        at_least=1,
    )
    interactive_window_ms: int = setting(
        2000, "How long after a one-sentence request documents keep to their share of rows.", at_least=0
    )
    step_slice_ms: int = setting(
        50,
        "continuous only: a handler call returns after this long, or at the first finished sentence, "
        "so that TorchServe can hand it new requests.",
        at_least=1,
    )
    backlog_slice_ms: int = setting(
        250,
        "continuous only: while sentences already wait for rows, a call lasts this long and answers "
        "what finished in it together (new requests would only queue, and every call reads each open "
        "request).",
        at_least=1,
    )
    max_new_tokens: int = setting(
        256,
        "Runaway-generation guard: a sentence gets at most new_tokens_ratio x its input tokens + "
        "new_tokens_slack new tokens, and never more than this.",
        at_least=1,
    )
    new_tokens_ratio: float = setting(2.0, "See max_new_tokens.", above=0.0)
    new_tokens_slack: int = setting(10, "See max_new_tokens.", at_least=0)
    max_texts_per_request: int = setting(
        128,
        "Texts in one request; past it a 413 names the limit. Weblate sends 20 at a time (more with "
        "plural forms); the character, sentence and decode limits bound the cost.",
        at_least=1,
    )
    max_chars_per_text: int = setting(
        5000,
        "Characters of one text; a text is split into sentences before decoding, so it may be an article.",
        at_least=1,
    )
    max_chars_per_request: int = setting(20000, "Characters of all a request's texts.", at_least=1)
    max_sentences_per_request: int = setting(500, "Sentences of all a request's texts.", at_least=1)
    max_sentences_per_batch: int = setting(
        500,
        "static only: what one TorchServe batch may decode. Requests past it get a 503 with "
        "Retry-After instead of pushing the whole batch past responseTimeout; the first always fits.",
        at_least=1,
    )
    max_input_tokens: int = setting(
        MODEL_MAX_TOKENS,
        "Tokens of one decoded sentence (the model's positional limit is 512); a longer sentence is cut "
        "at clause breaks, else by tokens, never truncated.",
        at_least=1,
        at_most=MODEL_MAX_TOKENS,
    )
    max_beams: int = setting(8, "Beams a request may ask for.", at_least=1)
    max_decode_tokens_per_request: int = setting(
        262144,
        "Work bound per request: beams x new-token cap, summed over its sentences (20,000 characters of "
        "short sentences at beam 4 ask for about 192k); past it a 413.",
        at_least=1,
    )
    sentence_cache_entries: int = setting(
        20000,
        "Per-worker LRU cache of sentence translations, keyed by version, variant, decode options and "
        "source ids; 0 switches it off. 20,000 short sentences take about 8 MB.",
        at_least=0,
    )
    sentence_cache_bytes: int = setting(32 * 1024 * 1024, "The cache's bound in bytes.", at_least=0)
    glossary_file: str | None = setting(
        None,
        "The deployment's glossary: a TSV (a source term, a tab, its target, per line) shipped in "
        "the archive beside the yaml (archive.build packs the file named here); a file name, not a "
        "path. A request's own "
        '"glossary" entries win over it.',
    )
    max_glossary_entries: int = setting(256, 'Entries of a request\'s "glossary".', at_least=0)
    max_glossary_chars: int = setting(100, "Characters per source or target term of a glossary.", at_least=1)
    text_budget_ms: int = setting(
        2000,
        "Time one request's text stages may take: splitting, markup and protection before the model, "
        "rebuilding after it, each. Past it the request gets a 422 (TooCostly) and the batch goes on; "
        "every text within the limits takes milliseconds (make fuzz measures the worst found).",
        at_least=1,
    )

    def __post_init__(self) -> None:
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            choices = _choices(str(spec.type))
            if choices and value not in choices:
                raise ConfigError(f"{spec.name} must be one of {choices}, got {value!r}")
            if value is not None:
                _check_bounds(spec, value)
        _require(
            self.num_beams is None or self.num_beams <= self.max_beams,
            f"num_beams must be between 1 and max_beams ({self.max_beams})",
        )
        _require(
            self.glossary_file is None or "/" not in self.glossary_file,
            "glossary_file must be a file name in the archive, not a path",
        )

    @property
    def model(self) -> ModelConfig:
        """What the model layer loads and steps with; it knows nothing else of this config."""
        return ModelConfig(
            variant=self.variant,
            int8_kernels=self.int8_kernels,
            cpu_kernels=self.cpu_kernels,
            decoder=self.decoder,
            threads=self.threads,
            max_input_tokens=self.max_input_tokens,
        )

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> HandlerConfig:
        """Build from the yaml mapping; unknown keys and wrong types raise ConfigError."""
        raw = dict(raw or {})
        fields = {f.name: f for f in dataclasses.fields(cls)}
        renamed = [RENAMED[key] for key in sorted(set(raw) & set(RENAMED))]
        if renamed:
            raise ConfigError("renamed handler config key: " + "; ".join(renamed))
        unknown = sorted(set(raw) - set(fields))
        if unknown:
            raise ConfigError(f"unknown handler config key(s) {unknown}; known keys: {sorted(fields)}")
        for name, value in raw.items():
            _check_type(name, value, fields[name].type)
        return cls(**raw)


def _check_bounds(spec: dataclasses.Field[Any], value: Any) -> None:
    low, high, above = (spec.metadata[bound] for bound in ("at_least", "at_most", "above"))
    if above is not None:
        _require(value > above, f"{spec.name} must be > {above}")
    if low is not None and high is not None:
        _require(low <= value <= high, f"{spec.name} must be between {low} and {high}")
    elif low is not None:
        _require(value >= low, f"{spec.name} must be >= {low}")
    elif high is not None:
        _require(value <= high, f"{spec.name} must be <= {high}")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
}


def _choices(text: str) -> tuple[Any, ...]:
    """The values a field annotated `text` may take, if it is a Literal alias of this module."""
    alias = globals().get(text.replace(" | None", ""))
    return get_args(alias) if get_origin(alias) is Literal else ()


def _expected_types(text: str) -> tuple[type, ...]:
    """The Python types a field annotated `text` takes; a Literal alias of this module takes its
    choices' types (__post_init__ then checks the choice itself)."""
    if text in _TYPES:
        return _TYPES[text]
    if choices := _choices(text):
        return tuple({type(choice) for choice in choices})
    raise TypeError(f"HandlerConfig has a field of type {text}, which _check_type cannot check")


def _check_type(name: str, value: Any, annotation: object) -> None:
    text = str(annotation)
    if value is None and "None" in text:
        return
    expected = _expected_types(text.replace(" | None", ""))
    # bool is an int subclass: reject True where a number is meant, and 1 where a bool is.
    if isinstance(value, bool) != (expected == (bool,)) or not isinstance(value, expected):
        raise ConfigError(f"handler config key {name!r} must be {text}, got {value!r}")


def markdown() -> str:
    """docs/CONFIGURATION.md: every key of the handler section, its default, bounds and effect."""
    lines = [
        "# Handler configuration",
        "",
        "<!-- Generated from handlers/handler_config.py by `make config-doc`; "
        "tests/unit/test_handler_config.py fails when this file differs. Edit the dataclass, not this. -->",
        "",
        "The `handler:` section of a model-config yaml (`config/zh_en_fp32.yaml`, `config/zh_en_int8.yaml`, "
        "packed into each archive). Every key is optional; a key left out takes the default, which is what "
        "those yamls ship. An unknown key, a wrong type or a value out of bounds fails the worker's load "
        "with an error that names the key. TorchServe's own keys (workers, batchSize, continuousBatching, "
        "responseTimeout) sit above the section, in the same yaml: docs/SCHEDULING.md and "
        "deploy/EC2.md say how to set them.",
        "",
        "| key | default | allowed | what it changes |",
        "|---|---|---|---|",
    ]
    for spec in dataclasses.fields(HandlerConfig):
        lines.append(
            f"| `{spec.name}` | {_shown(spec.default)} | {_allowed(spec)} | {spec.metadata['what']} |"
        )
    return "\n".join(lines) + "\n"


def _shown(value: Any) -> str:
    return "unset" if value is None else f"`{str(value).lower() if isinstance(value, bool) else value}`"


def _allowed(spec: dataclasses.Field[Any]) -> str:
    text = str(spec.type)
    choices = _choices(text)
    if choices:
        return ", ".join(f"`{choice}`" for choice in choices)
    low, high, above = (spec.metadata[bound] for bound in ("at_least", "at_most", "above"))
    kind = text.replace(" | None", "")
    kind = {"int": "integer", "float": "number", "bool": "true or false", "str": "text"}.get(kind, kind)
    bounds = [
        f"{sign} {bound}" for sign, bound in ((">", above), (">=", low), ("<=", high)) if bound is not None
    ]
    shown = " and ".join(bounds)
    return f"{kind} {shown}".strip() + (", or unset" if "None" in text else "")


if __name__ == "__main__":
    sys.stdout.write(markdown())
