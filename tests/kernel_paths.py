"""The C kernels' instruction-set paths as test parameters (handlers.model.native): every path, those
this CPU cannot run skipped with the reason, so a host that has them runs them and one that lacks
them says so. A missing or stale library fails collection: `make kernels` builds it."""

from __future__ import annotations

import pytest
from _pytest.mark.structures import ParameterSet

from handlers.model import native


def kernel_paths(int8_matmul: bool = False) -> list[ParameterSet]:
    """One parameter per path in native.PATHS (only those with an int8 matmul, AVX2 and up, if asked)."""
    library = native.open_library()
    features = native.cpu_features(library)
    built = {path.name for path in native.buildable_paths()}
    params = []
    for path in native.PATHS:
        if int8_matmul and not path.needs:
            continue  # the generic path leaves the matmuls to fbgemm
        missing = sorted(set(path.needs) - features)
        reason = (
            f"{path.name} is not built on this architecture"
            if path.name not in built
            else f"this CPU lacks {', '.join(missing)} ({path.name} runs on a host that has them)"
            if missing
            else None
        )
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        params.append(pytest.param(path.name, marks=marks, id=path.name))
    return params
