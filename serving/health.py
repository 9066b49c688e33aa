"""Exit 0 when zh_en translates and no drain is under way, 1 otherwise: the container HEALTHCHECK.

python -m serving.health [--key-file key_file.json] [--url http://127.0.0.1:8080]
/ping first, then a one-token translation: /ping reports the frontend and stays Healthy with no
worker able to translate (deploy/FLEET.md), as the front door's /healthz also knows. With token
authorization on both need the inference key, so a bare curl cannot be the probe.
serving.graceful writes its drain marker on SIGTERM: from then on this says unhealthy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import requests

from serving.client import Endpoints, TorchServeClient
from serving.graceful import DRAIN_MARKER
from serving.swap import PROBE_TEXT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--key-file", type=Path, default=Path("key_file.json"))
    parser.add_argument("--url", default=Endpoints.inference)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds for each of the two calls")
    parser.add_argument("--marker", type=Path, default=DRAIN_MARKER, help="serving.graceful's drain marker")
    args = parser.parse_args(argv)
    if args.marker.exists():
        print("unhealthy: draining before a stop")
        return 1
    client = TorchServeClient(Endpoints(inference=args.url), args.key_file, timeout=args.timeout)
    try:
        ping = client.ping()
        if ping.status_code != 200 or "Healthy" not in ping.text:
            print(f"unhealthy: /ping answered {ping.status_code} {ping.text.strip()[:200]}")
            return 1
        probe = client.translate(PROBE_TEXT, num_beams=1, max_new_tokens=1)
    except (requests.RequestException, OSError, KeyError, ValueError) as error:
        print(f"unhealthy: {error}")
        return 1
    if probe.status_code != 200:
        print(f"unhealthy: /ping is Healthy, a translation got {probe.status_code} {probe.text[:150]}")
        return 1
    print("healthy: /ping Healthy, a translation answered")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
