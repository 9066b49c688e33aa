"""Typed handler settings, read from the `handler:` section of a model-config yaml.

Unknown keys and wrong types are errors at load time: a typo in the yaml must
fail the worker loudly rather than be ignored and serve with defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

Variant = Literal["fp32", "int8"]
# "fast": our own greedy/beam loops over the target-side output layer (handlers.model.decoding);
# "generate": transformers' generate(), kept to compare against.
DecoderName = Literal["fast", "generate"]
DECODER_NAMES: tuple[DecoderName, ...] = get_args(DecoderName)  # the registry: choices, yaml, benches
Scheduler = Literal["static", "step"]
# The int8 matmul kernels (handlers.model.quantization.int8_kernels). fbgemm (the default) gives the
# outputs every earlier figure and test was made with; oneDNN uses AMX int8 tiles where the CPU has
# them (auto: oneDNN there, fbgemm elsewhere) and is faster, but rounds some outputs differently in
# the last bit (batch invariance holds on each): docs/BENCHMARKS.md measures both.
Int8Kernels = Literal["fbgemm", "onednn", "auto"]
# Our C kernels' instruction-set path (handlers.model.native): auto (the best one a host of ours has
# proven, of those the CPU offers), torch (none: torch's operators), or one path by name (for tests
# and benchmarks; a path this CPU lacks fails the load). Every path gives the same bits.
CpuKernels = Literal["auto", "torch", "generic", "avx2", "avx_vnni", "avx512_vnni", "amx"]

# The model's positional limit: opus-mt-zh-en has max_position_embeddings 512.
MODEL_MAX_TOKENS = 512


class ConfigError(ValueError):
    """The handler section of the model-config yaml is invalid."""


@dataclass(frozen=True)
class HandlerConfig:
    """Everything the handler needs to know besides the model files.

    Generation settings left as None fall back to the model's own
    generation_config.json.
    """

    variant: Variant = "fp32"
    int8_kernels: Int8Kernels = "fbgemm"
    cpu_kernels: CpuKernels = "auto"
    threads: int = 1
    warmup: bool = True
    num_beams: int | None = None
    decoder: DecoderName = "fast"
    # Row budget of one decode unit: texts x beams decoded together. A TorchServe batch is cut into
    # units of at most this many rows, grouped by input length (bench.studies.layout measures it).
    max_batch_rows: int = 64
    # Every request decodes through the step scheduler (handlers.scheduling.step_scheduler): its
    # sentences join and leave the running batch one decoder step at a time, up to max_batch_rows
    # rows, mixing at most max_cohorts start positions. The scheduler decides when requests are
    # admitted: static: at TorchServe's batch boundaries (each batch decoded to its end in the
    # worker's thread); step: at any step (needs continuousBatching: true and one worker in the
    # yaml; requests stay open across calls). Under step, a call returns after step_slice_ms so
    # that new requests are admitted, or at the first news. While sentences already wait for
    # rows, a call lasts backlog_slice_ms and answers what finished in it together: new requests
    # would only queue, and every call costs the worker a read of each open request
    # (handlers.open_requests). step_partitions running batches (each max_batch_rows) step side by
    # side in their own processes, each with `threads` intra-op threads: on 2 cores, 2 x 1
    # (handlers.scheduling.partitions says why). Fairness (docs/SCHEDULING.md): a request's first
    # sentence goes ahead of documents' remaining ones; documents (requests of several sentences)
    # hold at most document_rows_beside_interactive rows while a one-sentence request runs or
    # waits or arrived within interactive_window_ms, and always run at least one sentence.
    scheduler: Scheduler = "static"
    step_partitions: int = 1
    # Each cohort costs its own attention calls and search per step: under 100 users at beam 4, 4
    # served 1.14x what 8 did (2 about the same as 4), interactive p95 beside documents unchanged
    # (docs/BENCHMARKS.md, "Cohorts per running batch").
    max_cohorts: int = 4
    document_rows_beside_interactive: int = 16
    interactive_window_ms: int = 2000
    step_slice_ms: int = 50
    backlog_slice_ms: int = 250
    # Runaway-generation guard: at most ratio * input tokens + slack new tokens,
    # and never more than max_new_tokens.
    max_new_tokens: int = 256
    new_tokens_ratio: float = 2.0
    new_tokens_slack: int = 10
    max_texts_per_request: int = 16
    # A text is split into sentences before decoding, so a text may be a whole article.
    max_chars_per_text: int = 5000
    max_chars_per_request: int = 20000
    max_sentences_per_request: int = 500
    # What one TorchServe batch may decode. Requests past it get a 503 with Retry-After instead of
    # pushing the whole batch past responseTimeout (16 requests of 500 sentences would take
    # many minutes, and then every one of them would fail). The first request always fits.
    max_sentences_per_batch: int = 500
    # The model's positional limit per decoded sentence; a longer sentence is cut, never truncated.
    max_input_tokens: int = MODEL_MAX_TOKENS
    max_beams: int = 8
    # Work bound per request: beams x new-token cap, summed over its sentences. Without it one request
    # (500 sentences, 8 beams, 256 forced tokens) could hold a worker for many minutes. 20,000
    # characters of short sentences at beam 4 ask for about 192k.
    max_decode_tokens_per_request: int = 262144
    # Per-worker LRU cache of sentence translations (0 entries: off), bounded by entries and bytes.
    sentence_cache_entries: int = 20000
    sentence_cache_bytes: int = 32 * 1024 * 1024
    # The deployment's glossary: a TSV (source<TAB>target) shipped in the archive beside this yaml
    # (archive.build packs the file named here). A request's own "glossary" entries win over it.
    glossary_file: str | None = None
    # Bounds on a request's "glossary": entries, and characters per source or target term.
    max_glossary_entries: int = 256
    max_glossary_chars: int = 100
    # Time one request's text stages may take: splitting, markup and protection before the model
    # (plan), rebuilding the texts after it (render), each. Past it the request gets a 422
    # (TooCostly) and the batch goes on (handlers.text.budget says how it is checked). Every text
    # within the limits above takes milliseconds (make fuzz measures the worst found).
    text_budget_ms: int = 2000

    def __post_init__(self) -> None:
        if self.variant not in get_args(Variant):
            raise ConfigError(f"variant must be one of {get_args(Variant)}, got {self.variant!r}")
        if self.int8_kernels not in get_args(Int8Kernels):
            raise ConfigError(
                f"int8_kernels must be one of {get_args(Int8Kernels)}, got {self.int8_kernels!r}"
            )
        if self.cpu_kernels not in get_args(CpuKernels):
            raise ConfigError(f"cpu_kernels must be one of {get_args(CpuKernels)}, got {self.cpu_kernels!r}")
        if self.decoder not in DECODER_NAMES:
            raise ConfigError(f"decoder must be one of {DECODER_NAMES}, got {self.decoder!r}")
        _require(self.threads >= 1, "threads must be >= 1")
        _require(self.max_batch_rows >= 1, "max_batch_rows must be >= 1")
        if self.scheduler not in get_args(Scheduler):
            raise ConfigError(f"scheduler must be one of {get_args(Scheduler)}, got {self.scheduler!r}")
        _require(self.max_cohorts >= 1, "max_cohorts must be >= 1")
        _require(self.step_partitions >= 1, "step_partitions must be >= 1")
        _require(self.document_rows_beside_interactive >= 1, "document_rows_beside_interactive must be >= 1")
        _require(self.interactive_window_ms >= 0, "interactive_window_ms must be >= 0")
        _require(self.step_slice_ms >= 1, "step_slice_ms must be >= 1")
        _require(self.backlog_slice_ms >= 1, "backlog_slice_ms must be >= 1")
        _require(
            self.num_beams is None or 1 <= self.num_beams <= self.max_beams,
            f"num_beams must be between 1 and max_beams ({self.max_beams})",
        )
        _require(self.max_new_tokens >= 1, "max_new_tokens must be >= 1")
        _require(self.new_tokens_ratio > 0, "new_tokens_ratio must be > 0")
        _require(self.new_tokens_slack >= 0, "new_tokens_slack must be >= 0")
        _require(self.max_texts_per_request >= 1, "max_texts_per_request must be >= 1")
        _require(self.max_chars_per_text >= 1, "max_chars_per_text must be >= 1")
        _require(self.max_chars_per_request >= 1, "max_chars_per_request must be >= 1")
        _require(self.max_sentences_per_request >= 1, "max_sentences_per_request must be >= 1")
        _require(self.max_sentences_per_batch >= 1, "max_sentences_per_batch must be >= 1")
        _require(self.sentence_cache_entries >= 0, "sentence_cache_entries must be >= 0")
        _require(self.sentence_cache_bytes >= 0, "sentence_cache_bytes must be >= 0")
        _require(
            1 <= self.max_input_tokens <= MODEL_MAX_TOKENS,
            f"max_input_tokens must be between 1 and {MODEL_MAX_TOKENS}",
        )

        _require(self.max_decode_tokens_per_request >= 1, "max_decode_tokens_per_request must be >= 1")
        _require(self.max_glossary_entries >= 0, "max_glossary_entries must be >= 0")
        _require(self.max_glossary_chars >= 1, "max_glossary_chars must be >= 1")
        _require(self.text_budget_ms >= 1, "text_budget_ms must be >= 1")
        _require(
            self.glossary_file is None or "/" not in self.glossary_file,
            "glossary_file must be a file name in the archive, not a path",
        )

    @property
    def quantize(self) -> bool:
        return self.variant == "int8"

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> HandlerConfig:
        """Build from the yaml mapping; unknown keys and wrong types raise ConfigError."""
        raw = dict(raw or {})
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - set(fields))
        if unknown:
            raise ConfigError(f"unknown handler config key(s) {unknown}; known keys: {sorted(fields)}")
        for name, value in raw.items():
            _check_type(name, value, fields[name].type)
        return cls(**raw)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
}


def _expected_types(text: str) -> tuple[type, ...]:
    """The Python types a field annotated `text` takes; a Literal alias of this module takes its
    choices' types (__post_init__ then checks the choice itself)."""
    if text in _TYPES:
        return _TYPES[text]
    alias = globals().get(text)
    if get_origin(alias) is Literal:
        return tuple({type(choice) for choice in get_args(alias)})
    raise TypeError(f"HandlerConfig has a field of type {text}, which _check_type cannot check")


def _check_type(name: str, value: Any, annotation: object) -> None:
    text = str(annotation)
    if value is None and "None" in text:
        return
    expected = _expected_types(text.replace(" | None", ""))
    # bool is an int subclass: reject True where a number is meant, and 1 where a bool is.
    if isinstance(value, bool) != (expected == (bool,)) or not isinstance(value, expected):
        raise ConfigError(f"handler config key {name!r} must be {text}, got {value!r}")
