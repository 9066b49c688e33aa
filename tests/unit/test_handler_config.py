from __future__ import annotations

import dataclasses

import pytest
import yaml

from archive.tatoeba import REPO_ROOT
from handlers.handler_config import ConfigError, HandlerConfig, markdown


def test_defaults_are_fp32_single_thread() -> None:
    config = HandlerConfig.from_mapping(None)
    assert (config.variant, config.threads, config.model.quantize) == ("fp32", 1, False)


def test_int8_variant_quantizes() -> None:
    assert HandlerConfig.from_mapping({"variant": "int8"}).model.quantize


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_shipped_model_configs_parse(variant: str) -> None:
    raw = yaml.safe_load((REPO_ROOT / "config" / f"zh_en_{variant}.yaml").read_text())
    config = HandlerConfig.from_mapping(raw["handler"])
    assert config.variant == variant
    # Every key the yaml sets is what the handler reads, and the worker layout is the one path's:
    # one continuous-batching worker whose 2 partitions x 1 thread use a 2-vCPU host.
    assert {key: getattr(config, key) for key in raw["handler"]} == raw["handler"]
    assert (raw["continuousBatching"], raw["minWorkers"], raw["maxWorkers"]) == (True, 1, 1)
    assert (config.torchserve_batching, config.step_partitions, config.threads) == ("continuous", 2, 1)
    assert config.text_budget_ms == 2000  # not set there: the default, documented in docs/API.md


def test_text_budget_is_a_positive_number_of_milliseconds() -> None:
    assert HandlerConfig.from_mapping({"text_budget_ms": 250}).text_budget_ms == 250
    with pytest.raises(ConfigError, match="text_budget_ms must be >= 1"):
        HandlerConfig.from_mapping({"text_budget_ms": 0})
    with pytest.raises(ConfigError, match="text_budget_ms"):
        HandlerConfig.from_mapping({"text_budget_ms": 2.5})


def test_unknown_key_is_rejected_and_named() -> None:
    with pytest.raises(ConfigError, match="threadz"):
        HandlerConfig.from_mapping({"threadz": 2})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("threads", "2"),
        ("threads", True),
        ("warmup", 1),
        ("new_tokens_ratio", "2"),
        ("variant", 8),
        ("cpu_kernels", 2),
        ("int8_kernels", None),
    ],
)
def test_wrong_type_is_rejected(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        HandlerConfig.from_mapping({key: value})


@pytest.mark.parametrize(
    "raw",
    [
        {"variant": "int4"},
        {"threads": 0},
        {"num_beams": 9},
        {"max_input_tokens": 513},
        {"max_new_tokens": 0},
        {"cpu_kernels": "avx9"},
        {"int8_kernels": "mkl"},
    ],
)
def test_out_of_range_values_are_rejected(raw: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        HandlerConfig.from_mapping(raw)


def test_every_field_of_every_type_is_checked_from_the_yaml() -> None:
    """Each key, given its default, parses: no field has a type from_mapping cannot check (an
    `int8_kernels: onednn` once raised a KeyError for its Literal type instead of loading)."""
    defaults = HandlerConfig()
    raw = {field.name: getattr(defaults, field.name) for field in dataclasses.fields(HandlerConfig)}
    assert HandlerConfig.from_mapping(raw) == defaults
    assert (
        HandlerConfig.from_mapping({"int8_kernels": "onednn", "cpu_kernels": "generic"}).cpu_kernels
        == "generic"
    )


def test_config_is_frozen() -> None:
    config = HandlerConfig()
    with pytest.raises(AttributeError):
        config.threads = 4  # type: ignore[misc]


def test_configuration_doc_is_generated_from_the_dataclass() -> None:
    """docs/CONFIGURATION.md lists every key with its default and bounds: `make config-doc` writes it."""
    written = (REPO_ROOT / "docs" / "CONFIGURATION.md").read_text()
    assert written == markdown(), "docs/CONFIGURATION.md is stale: run `make config-doc`"
    for spec in dataclasses.fields(HandlerConfig):
        assert f"| `{spec.name}` |" in written and spec.metadata["what"]


def test_shipped_yamls_set_what_the_code_defaults_to_but_the_variant() -> None:
    """The code default is what ships: the yamls may spell a key out, never change it (variant aside)."""
    defaults = HandlerConfig()
    for variant in ("fp32", "int8"):
        raw = yaml.safe_load((REPO_ROOT / "config" / f"zh_en_{variant}.yaml").read_text())["handler"]
        differing = {key for key, value in raw.items() if getattr(defaults, key) != value}
        assert differing <= {"variant"}, f"zh_en_{variant}.yaml changes {differing}"


def test_the_renamed_scheduler_key_says_what_replaced_it() -> None:
    with pytest.raises(ConfigError, match="torchserve_batching: continuous"):
        HandlerConfig.from_mapping({"scheduler": "step"})


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"step_partitions": 0}, "step_partitions must be >= 1"),
        ({"new_tokens_ratio": 0.0}, "new_tokens_ratio must be > 0.0"),
        ({"max_input_tokens": 0}, "max_input_tokens must be between 1 and 512"),
        ({"torchserve_batching": "step"}, "torchserve_batching must be one of"),
        ({"num_beams": 0}, "num_beams must be >= 1"),
        ({"glossary_file": "../x.tsv"}, "glossary_file must be a file name"),
    ],
)
def test_every_bound_error_names_its_key(raw: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        HandlerConfig.from_mapping(raw)
