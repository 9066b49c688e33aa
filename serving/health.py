"""Exit 0 when TorchServe's /ping says Healthy and no drain is under way, 1 otherwise: the HEALTHCHECK.

python -m serving.health [--key-file key_file.json] [--url http://127.0.0.1:8080]
With token authorization on, /ping needs the inference key, so a bare curl cannot be the probe.
serving.graceful writes its drain marker on SIGTERM: from then on this says unhealthy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import requests

from serving.client import Endpoints, TorchServeClient
from serving.graceful import DRAIN_MARKER


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--key-file", type=Path, default=Path("key_file.json"))
    parser.add_argument("--url", default=Endpoints.inference)
    parser.add_argument("--timeout", type=float, default=4.0)
    parser.add_argument("--marker", type=Path, default=DRAIN_MARKER, help="serving.graceful's drain marker")
    args = parser.parse_args(argv)
    if args.marker.exists():
        print("unhealthy: draining before a stop")
        return 1
    client = TorchServeClient(Endpoints(inference=args.url), args.key_file, timeout=args.timeout)
    try:
        response = client.ping()
    except (requests.RequestException, OSError, KeyError, ValueError) as error:
        print(f"unhealthy: {error}")
        return 1
    healthy = response.status_code == 200 and "Healthy" in response.text
    print(("healthy: " if healthy else "unhealthy: ") + response.text.strip()[:200])
    return 0 if healthy else 1


if __name__ == "__main__":
    raise SystemExit(main())
