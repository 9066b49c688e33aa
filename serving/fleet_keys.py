"""Client keys for the front door: made here, stored as SHA-256 digests in nginx's keys.map.

One line per key, an nginx `map` entry with the key's name and when it was made:

    "<sha256 hex of the key>" "<name>";  # 2026-11-22T21:40:00Z

The key itself is shown once, when it is made, and stored nowhere by this module. The file is
mode 0600 all the same, and every change replaces it whole (a half-written map never loads).
Changes take effect on `nginx -s reload` (serving.fleet does it), with no restart.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from serving.files import write_atomically

KEY_PREFIX = "zhen_"  # lets secret scanners recognise a leaked key
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
_LINE = re.compile(rf'^"(?P<digest>[0-9a-f]{{64}})" "(?P<name>{NAME_PATTERN})";\s*(?:#\s*(?P<created>\S+))?')


@dataclass(frozen=True)
class KeyEntry:
    name: str
    digest: str
    created: str


def digest(key: str) -> str:
    """What front_door.js computes from the Authorization header: SHA-256, hex."""
    return hashlib.sha256(key.encode()).hexdigest()


def write_client_key(path: Path, key: str) -> None:
    """A key in key_file.json's shape, mode 0600: serving.client and tests.soak.steady_load read it as is."""
    write_atomically(path, json.dumps({"inference": {"key": key}}), mode=0o600)


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)  # 256 random bits


class KeyStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    def ensure(self) -> None:
        """An empty map where none exists yet: nginx refuses to start on a missing include."""
        if not self.path.exists():
            self._write([])

    def entries(self) -> list[KeyEntry]:
        if not self.path.exists():
            return []
        found = (_LINE.match(line) for line in self.path.read_text().splitlines())
        return [KeyEntry(m["name"], m["digest"], m["created"] or "") for m in found if m]

    def add(self, name: str) -> str:
        """Make a key for `name` and store its digest; return the key (the only time it exists)."""
        if not re.fullmatch(NAME_PATTERN, name):
            raise ValueError(f"key name {name!r}: use letters, digits, '_', '.', '-' (at most 64)")
        entries = self.entries()
        if any(entry.name == name for entry in entries):
            raise ValueError(f"a key named {name!r} exists: revoke it first, or add one under a new name")
        key = new_key()
        created = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._write([*entries, KeyEntry(name, digest(key), created)])
        return key

    def revoke(self, name: str) -> None:
        entries = self.entries()
        kept = [entry for entry in entries if entry.name != name]
        if len(kept) == len(entries):
            raise KeyError(f"no key named {name!r}; `keys list` shows the names")
        self._write(kept)

    def _write(self, entries: list[KeyEntry]) -> None:
        lines = ["# client keys for the front door (serving.fleet keys): SHA-256 digest -> name"]
        lines += [f'"{e.digest}" "{e.name}";  # {e.created}' for e in entries]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, "\n".join(lines) + "\n", mode=0o600)
