"""How many examples a property test runs: its full count in CI, a quarter in the local loop.

`make test` is the loop every change pays, so it samples; CI (CI=true, or HYPOTHESIS_PROFILE=ci
to ask for it locally) runs each property test's full count. The adversarial cases
(tests/adversarial.py) are not sampled: they run in full everywhere.
"""

from __future__ import annotations

import os

FULL = os.environ.get("CI") == "true" or os.environ.get("HYPOTHESIS_PROFILE") == "ci"


def examples(full: int) -> int:
    return full if FULL else max(25, full // 4)
