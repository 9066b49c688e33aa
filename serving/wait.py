"""Wait until a started TorchServe answers /ping and zh_en has READY workers, then say how to call it.

python -m serving.wait --key-file key_file.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import requests

from serving.client import MODEL_NAME, Endpoints, ServerError, TorchServeClient


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--key-file", type=Path, default=Path("key_file.json"))
    parser.add_argument("--inference", default=Endpoints.inference)
    parser.add_argument("--management", default=Endpoints.management)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    client = TorchServeClient(Endpoints(args.inference, args.management), args.key_file)
    deadline = time.monotonic() + args.timeout
    print(f"waiting for {args.inference}/ping and {MODEL_NAME} workers ...", flush=True)
    while True:
        try:
            if client.ping().status_code == 200:
                version = client.default_version()
                client.wait_ready(version, workers=1, timeout=max(1.0, deadline - time.monotonic()))
                break
        except (requests.ConnectionError, ServerError, FileNotFoundError, KeyError, ValueError):
            pass
        if time.monotonic() > deadline:
            print(
                f"TorchServe did not become ready in {args.timeout:.0f}s: "
                "see logs/ts_log.log and logs/model_log.log"
            )
            return 1
        time.sleep(1.0)
    print(
        f"ready: {MODEL_NAME} version {version}. Try:\n"
        '  TOKEN=$(python3 -c "import json; '
        f"print(json.load(open('{args.key_file}'))['inference']['key'])\")\n"
        f"  curl -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' "
        f'{args.inference}/predictions/{MODEL_NAME} -d \'{{"text": "汤姆不会同意的"}}\''
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
