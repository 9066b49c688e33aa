"""The hub model this project serves, pinned to one commit, and whether the hub can be reached.

Standard library only: deploy/image/build.sh runs archive.image_plan, which imports this, with the
host's python3, outside the venv.
"""

from __future__ import annotations

import os
import re
import socket
from urllib.parse import urlparse

DEFAULT_MODEL = "Helsinki-NLP/opus-mt-zh-en"
# The commit of Helsinki-NLP/opus-mt-zh-en that archives are built from: a branch such as `main`
# could change under a rebuilt image. Our hosts cannot reach the hub, so this hash was not read from
# it but from public code that pins the model (2026-11-24): several independent projects pin this
# commit, and one shows it as the snapshot directory of a hub download
# (models--Helsinki-NLP--opus-mt-zh-en/snapshots/<commit>). Upgrading: SECURITY.md, "Pinned versions".
DEFAULT_REVISION = "cf109095479db38d6df799875e34039d4938aaa6"
SYNTHETIC = "synthetic"
REQUIRED_FILES = ("config.json", "source.spm", "target.spm", "vocab.json")
COMMIT = re.compile(r"[0-9a-f]{40}")


def hub_url() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def hub_reachable(timeout: float = 5.0) -> bool:
    """A TCP connection to the hub (HF_ENDPOINT, else huggingface.co) opens within `timeout`."""
    endpoint = urlparse(hub_url())
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((endpoint.hostname or "", port), timeout=timeout).close()
    except OSError:
        return False
    return True
