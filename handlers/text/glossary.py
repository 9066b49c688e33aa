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
        # Longest first: at one position the alternation takes the first that matches.
        ordered = sorted(self.terms, key=lambda term: (-len(term), term))
        object.__setattr__(
            self, "pattern", re.compile("|".join(map(re.escape, ordered))) if ordered else None
        )

    def __bool__(self) -> bool:
        return bool(self.terms)

    def matches(self, text: str) -> Iterable[re.Match[str]]:
        return self.pattern.finditer(text) if self.pattern is not None else ()

    def with_request(self, entries: Mapping[str, str]) -> Glossary:
        """This glossary with a request's entries on top: the request's wins on a shared term."""
        return Glossary({**self.terms, **entries}) if entries else self


NO_GLOSSARY = Glossary()


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
