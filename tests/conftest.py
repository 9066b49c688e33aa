"""Shared fixtures: the tiny stand-in model, tiny archives built by the real archiver, a real server.

Chained so each expensive thing is made once per session: model dir -> archives -> server.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from _pytest.nodeid import NodeId  # pytest 9's node id: see pytest_collection_modifyitems

from archive.build import ArchiveSpec, build_archive, model_digest
from archive.standin import build_standin
from archive.tatoeba import REPO_ROOT
from serving.torchserve import TorchServe

# Nothing here imports torch or transformers (about 8 s of every pytest process's start): the
# fixtures that need them import them, so a run of HTTP-only tests (make test's timed step) never does.
if TYPE_CHECKING:
    from handlers.zh_en_handler import TranslationHandler
    from tests.alone_decodes import AloneDecodes

TINY_MODEL_DIR = REPO_ROOT / "build" / "models" / "standin-tiny"
# Session fixtures worth making once: the modules that use one run in one pytest-xdist process.
SHARED_FIXTURES = ("alone_decodes", "shared_fleet")
# `make test`'s second step runs the tests marked `timed` alone and collects only the modules that
# carry the mark (--timed-modules), found by their text: importing the whole suite to pick them out
# took a third of that step.
TIMED_MARK = "pytest.mark.timed"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--timed-modules", action="store_true", help=f"collect only the modules that use {TIMED_MARK}"
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if config.getoption("timed_modules") and collection_path.suffix == ".py":
        return TIMED_MARK not in collection_path.read_text()
    return None


def _relative(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which finds no xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup` (`make test` runs two processes): each module is one group, so its
    fixtures are made once; modules that share a costly session fixture (SHARED_FIXTURES) share a
    group, and the longest groups (by their modules' `long` marks) come first (with
    --no-loadscope-reorder, in this order)."""
    marked = {item.path for item in items if item.get_closest_marker("timed")}
    unseen = sorted(_relative(path) for path in marked if TIMED_MARK not in path.read_text())
    if unseen:  # marked some other way (a mark applied by name, say): --timed-modules would skip them
        raise pytest.UsageError(f"timed tests whose module does not name {TIMED_MARK}: {unseen}")
    if not config.getoption("loadgroup", default=False):  # what xdist sets in its workers for loadgroup
        return
    groups: dict[Path, str] = {}
    for item in items:
        shared = [name for name in SHARED_FIXTURES if name in getattr(item, "fixturenames", ())]
        if shared or item.path not in groups:
            groups[item.path] = shared[0] if shared else _relative(item.path)
    for item in items:
        # xdist schedules by node id and reads a group after its last "@". It writes `_nodeid`,
        # which pytest 9 no longer reads (a node's id is `_id`), so the group is set here.
        item._id = NodeId.parse(f"{_own_node_id(item)}@{groups[item.path]}")
    repeated = [node for node, count in Counter(item.nodeid for item in items).items() if count > 1]
    if repeated:
        raise pytest.UsageError(f"items share a node id, so xdist would run one of each: {repeated}")
    # The longest groups are handed out first, so that neither process is left with one of them
    # while the other has nothing to do: a group's length is the sum of its modules' `long` marks.
    module_item: dict[Path, pytest.Item] = {}
    for item in items:
        module_item.setdefault(item.path, item)
    seconds: dict[str, float] = dict.fromkeys(groups.values(), 0.0)
    for path, group in groups.items():
        seconds[group] += _long_seconds(module_item[path])
    items.sort(key=lambda item: -seconds[groups[item.path]])  # stable: the rest keep their order


def _long_seconds(item: pytest.Item) -> float:
    mark = item.get_closest_marker("long")
    return float(mark.kwargs["seconds"]) if mark is not None else 0.0


def _own_node_id(item: pytest.Item) -> str:
    """The item's node id, with its parameters where the plugin that made it left them out:
    schemathesis names each API operation's item (`test_x[POST /ping]`) but gives every one the
    test's id, and xdist, which schedules by id, ran one operation of each such test."""
    base = item.nodeid.rpartition("::")[2]
    if item.name != base and item.name.startswith(f"{base}["):
        return item.nodeid[: -len(base)] + item.name
    return item.nodeid


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return build_standin(TINY_MODEL_DIR, "tiny")


@pytest.fixture(scope="session")
def tiny_store(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """model_store with zh_en_fp32.mar and zh_en_int8.mar of the tiny stand-in."""
    store = tmp_path_factory.mktemp("model_store")
    digest = model_digest(tiny_model_dir)
    for variant in ("fp32", "int8"):
        build_archive(ArchiveSpec(variant, tiny_model_dir, store), digest)
    return store


@pytest.fixture(scope="session")
def server(tiny_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TorchServe]:
    """A real TorchServe on free local ports, production config, serving the int8 tiny archive.

    One for the whole session: a test that changes it (registers a version, scales, swaps) puts it
    back as it found it, so the next module meets the server `make serve` starts.
    """
    with TorchServe(tiny_store, tmp_path_factory.mktemp("torchserve")) as running:
        yield running


@pytest.fixture(scope="session")
def alone_decodes(lively_model_dir: Path) -> AloneDecodes:
    """The invariance tests' reference: lively sentences decoded one at a time (tests/alone_decodes.py)."""
    from tests.alone_decodes import AloneDecodes

    return AloneDecodes(lively_model_dir)


@pytest.fixture(scope="module")
def handler(tiny_model_dir: Path) -> TranslationHandler:
    """An initialized int8 handler on the tiny stand-in, fresh per test module (its cache too)."""
    from tests.handler_context import initialized_handler

    return initialized_handler(tiny_model_dir)


@pytest.fixture(scope="session")
def fuzz_handler(tiny_model_dir: Path) -> TranslationHandler:
    """One initialized handler for property-based tests (hypothesis forbids function-scoped fixtures)."""
    from tests.handler_context import initialized_handler

    return initialized_handler(tiny_model_dir)


@pytest.fixture(scope="session")
def lively_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny stand-in with larger seeded weights and an eos bias: unlike the near-flat random
    stand-in, its output depends on the input and ends at varied lengths, so the decoder's
    choices (tokens, eos, finished beams) are really exercised."""
    import shutil

    import torch
    from transformers import AutoModelForSeq2SeqLM

    out = tmp_path_factory.mktemp("lively") / "model"
    shutil.copytree(tiny_model_dir, out)
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() == 2 and "embed_positions" not in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.15)
        model.final_logits_bias[0, model.config.eos_token_id] = 2.0
    model.save_pretrained(out)
    return out
