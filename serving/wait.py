"""Wait until a started TorchServe answers /ping and zh_en has READY workers, then say how to call it.

python -m serving.wait --key-file key_file.json
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import requests

from serving.client import MODEL_NAME, Endpoints, ServerError, TorchServeClient

# A start writes this banner to ts_log.log first; what follows the last one belongs to this start.
START_BANNER = "Torchserve version:"
LOAD_FAILED = re.compile(r"Failed to load model: (\S+)")
# The log grows across starts and the wait reads it once a second: only its end can hold this start
# (its banner and initial loads are a few kB of lines).
TAIL_BYTES = 1 << 20


def load_failure(ts_log: Path) -> str | None:
    """Why TorchServe's latest start could not load a model named on its command line, or None.

    Without this the wait would poll a model that will never register until its timeout: for
    example when another user's TorchServe made /tmp/models, where archives are unpacked.
    """
    try:
        with ts_log.open("rb") as log:
            log.seek(max(0, log.seek(0, 2) - TAIL_BYTES))
            lines = log.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    starts = [i for i, line in enumerate(lines) if START_BANNER in line]
    latest = lines[starts[-1] :] if starts else lines
    for i, line in enumerate(latest):
        failed = LOAD_FAILED.search(line)
        if failed:
            cause = latest[i + 1].strip() if i + 1 < len(latest) else ""
            return f"{failed.group(1)} failed to load: {cause}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--key-file", type=Path, default=Path("key_file.json"))
    parser.add_argument("--inference", default=Endpoints.inference)
    parser.add_argument("--management", default=Endpoints.management)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--ts-log", type=Path, default=Path("logs/ts_log.log"), help="TorchServe's own log")
    args = parser.parse_args(argv)
    client = TorchServeClient(Endpoints(args.inference, args.management), args.key_file)
    deadline = time.monotonic() + args.timeout
    print(f"waiting for {args.inference}/ping and {MODEL_NAME} workers ...", flush=True)
    pinged = False
    while True:
        try:
            pinged = client.ping().status_code == 200
            if pinged:
                version = client.default_version()
                client.wait_ready(version, workers=1, timeout=max(1.0, deadline - time.monotonic()))
                break
        except (requests.ConnectionError, ServerError, FileNotFoundError, KeyError, ValueError):
            # Once /ping answers, the start's banner and any failed initial load are in the log.
            failure = load_failure(args.ts_log) if pinged else None
            if failure is not None:
                print(f"TorchServe is up, but {failure}\n(see {args.ts_log} and docs/TROUBLESHOOTING.md)")
                return 1
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
