"""Terms a client (or the deployment) wants translated one fixed way: "源词" -> "target term".

A term is protected like a URL (handlers.text.protection): it reaches the model as a placeholder
token, and the placeholder comes back as the target term, once for each source occurrence (a
dropped placeholder is appended with a warning, as for any protected span). Terms are matched
longest first, leftmost first, and never inside another protected span (URLs, tags, ...).

The model sees only the placeholder, so its output (and the sentence cache's entry) depends on
where terms stand, not on their target text: two requests with different target terms for the
same source term share a cached decode and each still gets its own term.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# A deployment's file is read once at load; a bound keeps one regex from growing without end.
MAX_FILE_ENTRIES = 10_000


class GlossaryFileError(ValueError):
    """The deployment's glossary file cannot be used; the message names the line."""


@dataclass(frozen=True)
class Glossary:
    terms: Mapping[str, str] = field(default_factory=dict)
    pattern: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pattern = _longest_first(_trie(self.terms)) if self.terms else None
        object.__setattr__(self, "pattern", re.compile(pattern) if pattern is not None else None)

    def __bool__(self) -> bool:
        return bool(self.terms)

    def matches(self, text: str) -> Iterable[re.Match[str]]:
        return self.pattern.finditer(text) if self.pattern is not None else ()

    def with_request(self, entries: Mapping[str, str]) -> Glossary:
        """This glossary with a request's entries on top: the request's wins on a shared term."""
        return Glossary({**self.terms, **entries}) if entries else self


NO_GLOSSARY = Glossary()

_Trie = dict[str, "_Trie"]
_END = ""  # the key that marks a term's last character in the trie


def _trie(terms: Iterable[str]) -> _Trie:
    root: _Trie = {}
    for term in terms:
        node = root
        for char in term:
            node = node.setdefault(char, {})
        node[_END] = {}
    return root


def _longest_first(node: _Trie) -> str:
    """A pattern that matches, at a position, the longest term there: each character once, as a trie.

    A flat alternation of the terms, longest first, tried every term at every position of the text
    (256 terms of up to 100 characters: 47 ms over 5,000 letters "a" that begin most of them); the
    trie reads each character once per position, and its optional tails are greedy, so it takes the
    longest term that matches there, as the alternation did.
    """
    branches = [re.escape(char) + _longest_first(child) for char, child in sorted(node.items()) if char]
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"
    return f"(?:{body})?" if _END in node else body


def load_tsv(path: Path, max_chars: int) -> Glossary:
    """source<TAB>target per line; blank lines and lines starting with # are skipped."""
    terms: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
            raise GlossaryFileError(
                f"{path.name} line {number}: expected 'source<TAB>target', got {line!r}"[:300]
            )
        source, target = fields[0].strip(), fields[1].strip()
        if len(source) > max_chars or len(target) > max_chars:
            raise GlossaryFileError(f"{path.name} line {number}: a term is over {max_chars} characters")
        terms[source] = target
        if len(terms) > MAX_FILE_ENTRIES:
            raise GlossaryFileError(f"{path.name}: more than {MAX_FILE_ENTRIES} entries")
    return Glossary(terms)
