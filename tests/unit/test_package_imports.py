"""The handler's packages import in one direction (docs/ARCHITECTURE.md draws it).

Read from the source with ast, so a new import that breaks the rule fails here rather than in review:
- text/ knows neither torch nor HTTP: it imports only itself and handlers.errors;
- model/ and scheduling/ never import the wire edge or the handler's top level, and model/ not the
  handler's config either: it gets its own part of it (handlers.model.model_config, which imports
  nothing of the handler; handler_config imports it, for the types its keys share);
- translation/, the domain, imports what is below it (model, scheduling, text, the sentence cache),
  never the wire edge or the handler's records (handlers.jobs extends translation's Decoded);
- wire/ never imports the handler's top level (it may read text formats, the script check, model
  options and the domain types it converts to and from, handlers.translation);
- the wire edge stays at the edge: only the handler's top level (zh_en_handler.py, jobs.py) imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from archive.tatoeba import REPO_ROOT

HANDLERS = REPO_ROOT / "handlers"
LEAVES = {"handlers.errors", "handlers.handler_config"}
# What a leaf itself may import of the handler, and the leaves a package may not import.
LEAF_IMPORTS = {"handlers.errors": (), "handlers.handler_config": ("handlers.model.model_config",)}
NOT_FOR = {"model": ("handlers.handler_config",)}

# package -> the handlers.* prefixes its modules may import (besides themselves and the leaves)
ALLOWED: dict[str, tuple[str, ...]] = {
    "text": (),
    "model": (),
    "scheduling": ("handlers.model",),
    "translation": ("handlers.model", "handlers.scheduling", "handlers.text", "handlers.sentence_cache"),
    "wire": (
        "handlers.text.documents",
        "handlers.text.scripts",
        "handlers.model.options",
        "handlers.translation",
    ),
}
# The only modules outside handlers/wire/ that may import it: they read requests and write answers.
WIRE_IMPORTERS = {HANDLERS / "zh_en_handler.py", HANDLERS / "jobs.py"}
NO_THIRD_PARTY = {"text": ("torch", "transformers", "ts", "requests")}


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names if node.module == "handlers"}
    return names


def modules(package: str) -> list[Path]:
    return sorted((HANDLERS / package).glob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_downward(package: str) -> None:
    own = f"handlers.{package}"
    allowed = (own, *(LEAVES - set(NOT_FOR.get(package, ()))), *ALLOWED[package])
    wrong = {
        f"{path.name}: {name}"
        for path in modules(package)
        for name in imports_of(path)
        if name.split(".")[0] == "handlers" and not name.startswith(allowed)
    }
    assert not wrong, f"handlers/{package} imports against the direction: {sorted(wrong)}"


def test_only_the_handlers_top_level_imports_the_wire_edge() -> None:
    below = [
        path
        for path in sorted(HANDLERS.rglob("*.py"))
        if path not in WIRE_IMPORTERS and (HANDLERS / "wire") not in path.parents
    ]
    assert {HANDLERS / "translation" / "decoding.py", HANDLERS / "translation" / "request.py"} <= set(below)
    wrong = {
        f"{path.relative_to(HANDLERS)}: {name}"
        for path in below
        for name in imports_of(path)
        if name == "handlers.wire" or name.startswith("handlers.wire.")
    }
    assert not wrong, (
        f"only {sorted(path.name for path in WIRE_IMPORTERS)} may import handlers.wire: {sorted(wrong)}"
    )


def test_text_needs_neither_torch_nor_http() -> None:
    banned = NO_THIRD_PARTY["text"]
    wrong = {
        f"{path.name}: {name}"
        for path in modules("text")
        for name in imports_of(path)
        if name.split(".")[0] in banned
    }
    assert not wrong, sorted(wrong)


def test_leaves_import_nothing_of_the_handler_but_the_models_config() -> None:
    for leaf in LEAVES:
        path = HANDLERS / f"{leaf.split('.')[-1]}.py"
        imported = {name for name in imports_of(path) if name.startswith("handlers")}
        assert imported <= set(LEAF_IMPORTS[leaf]), leaf
    model_config = HANDLERS / "model" / "model_config.py"
    assert not {name for name in imports_of(model_config) if name.startswith("handlers")}
