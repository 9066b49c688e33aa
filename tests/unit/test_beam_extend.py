"""kernels.c's beam_extend (BeamCohort's step in one C call) decodes as torch's operators do.

Two cohorts take the same logits step after step, one through the C step and one through torch's
operators (the C step turned off), and must end the same sentences with the same hypotheses in the
same order, and hold the same running beams, the same scores bit for bit and the same finished
hypotheses wherever they count. Coarse logits make equal values common: then the C step hands
those steps to torch's operators, and the results still agree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch

from handlers.model import native
from handlers.model.cross_attention import CrossMemory
from handlers.model.search import BeamCohort, Finished, RowLimits, SearchRules, Vocabulary
from tests.kernel_paths import kernel_paths

WIDTH, EOS = 300, 2


@pytest.fixture(params=kernel_paths())
def library(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> native.Kernels:
    """One instruction-set path's kernels as this process's (each path this CPU runs, in turn)."""
    kernels = native.load(request.param)
    assert kernels is not None and kernels.beam_extend is not None
    monkeypatch.setattr(native, "current", lambda: kernels)
    return kernels


@dataclass(frozen=True)
class Case:
    beams: int
    length_penalty: float
    early_stopping: bool | str
    grid: float  # logits rounded to multiples of this (0: not rounded): the coarser, the more ties
    forced_eos: bool = True


CASES = [
    Case(4, 1.0, False, 0.0),
    Case(4, 0.6, True, 0.0),
    Case(2, 2.0, "never", 0.0),
    Case(5, 1.0, "never", 0.0, forced_eos=False),
    Case(4, 1.0, False, 0.5),
    Case(3, 0.6, True, 1.0),
]


def eos_vocabulary(case: Case) -> Vocabulary:
    rules = SearchRules(WIDTH, EOS, case.forced_eos, case.length_penalty, case.early_stopping)
    ids = torch.roll(torch.arange(WIDTH), 7)  # columns name other ids: the kernel must map them
    return Vocabulary(ids, int((ids == EOS).nonzero()[0, 0]), rules)


def make(case: Case, sentences: int, seed: int) -> BeamCohort:
    draw = torch.Generator().manual_seed(seed)
    caps = torch.randint(1, 12, (sentences,), generator=draw).tolist()
    limits = [RowLimits(cap, min(cap - 1, i % 3)) for i, cap in enumerate(caps)]
    return BeamCohort(eos_vocabulary(case), list(range(sentences)), CrossMemory([]), limits, case.beams)


def logits_for(step: int, rows: int, case: Case, seed: int) -> torch.Tensor:
    draw = torch.Generator().manual_seed(seed * 1000 + step)
    logits = torch.randn(rows, WIDTH, generator=draw) * 3
    logits[:, EOS] += step * 0.3  # eos grows likelier, so sentences end before their caps too
    if case.grid:
        logits = torch.round(logits / case.grid) * case.grid
    return logits


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.int32) if tensor.dtype == torch.float32 else tensor


def assert_same_state(ours: BeamCohort, torchs: BeamCohort) -> None:
    """What a running sentence's next steps and results depend on, equal (bit for bit for floats)."""
    for name in ("running", "running_scores", "finished_scores", "is_finished", "improvable", "tokens"):
        assert torch.equal(bits(getattr(ours, name)), bits(getattr(torchs, name))), name
    assert torch.equal(ours.finished[ours.is_finished], torchs.finished[torchs.is_finished])


def decode(
    case: Case, sentences: int, seed: int, steps: Iterator[int]
) -> Iterator[tuple[Finished, Finished]]:
    ours, torchs = make(case, sentences, seed), make(case, sentences, seed)
    torchs._extend_natively = lambda *_: None  # type: ignore[method-assign]
    for step in steps:
        if not ours.sentences:
            return
        rows = ours.sentences * (1 if step == 0 else case.beams)
        logits = logits_for(step, rows, case, seed)
        yield ours.advance(logits.clone()), torchs.advance(logits.clone())
        assert_same_state(ours, torchs)


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"{c.beams}b-lp{c.length_penalty}-{c.early_stopping}-g{c.grid}"
)
def test_the_c_step_decodes_as_torchs_operators(library: native.Kernels, case: Case) -> None:
    ended = 0
    for seed in range(6):
        for ours, torchs in decode(case, sentences=5, seed=seed, steps=iter(range(20))):
            assert ours == torchs
            ended += len(ours)
    assert ended == 30, "every sentence ends within its cap"


def counting(library: native.Kernels, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The C step's answers from here on: 0 where it decided, 1 where it left the step to torch."""
    calls: list[int] = []
    kernel = library.beam_extend
    assert kernel is not None

    def counted(*arguments: object) -> int:
        calls.append(int(kernel(*arguments)))
        return calls[-1]

    counted_library = dataclasses.replace(library, beam_extend=counted)
    monkeypatch.setattr(native, "current", lambda: counted_library)
    return calls


def test_without_equal_values_the_c_step_decides_every_step(
    library: native.Kernels, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = counting(library, monkeypatch)
    for ours, torchs in decode(CASES[0], sentences=5, seed=3, steps=iter(range(20))):
        assert ours == torchs
    assert calls and not any(calls), f"torch decided {sum(calls)} of {len(calls)} steps"


def test_coarse_logits_leave_some_steps_to_torch(
    library: native.Kernels, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ties case must really reach the fallback, or its agreement above proves nothing."""
    calls = counting(library, monkeypatch)
    for seed in range(6):
        for ours, torchs in decode(CASES[5], sentences=5, seed=seed, steps=iter(range(20))):
            assert ours == torchs
    assert 0 < sum(calls) < len(calls), (sum(calls), len(calls))


def two_beams(first: list[float], second: list[float], caps: int = 9) -> tuple[BeamCohort, torch.Tensor]:
    """One sentence at its second step, two beams of score 0.0, whose rows' best four are given."""
    case = Case(2, 1.0, False, 0.0)
    cohort = BeamCohort(eos_vocabulary(case), [0], CrossMemory([]), [RowLimits(caps)], 2)
    cohort.running, cohort.running_scores = torch.tensor([[[5], [6]]]), torch.zeros(1, 2)
    cohort.generated = 1
    return cohort, torch.tensor([[first, second]])


def test_equal_candidates_that_could_change_a_beam_are_left_to_torch(library: native.Kernels) -> None:
    columns = torch.tensor([[[10, 11, 12, 13], [20, 21, 22, 23]]])
    cohort, scores = two_beams([-1.0, -2.0, -3.0, -4.0], [-1.0, -2.5, -3.5, -4.5])
    assert cohort._extend_natively(scores, columns) is None, "-1.0 twice: torch.topk orders them"
    assert torch.equal(cohort.running, torch.tensor([[[5], [6]]])), "nothing changed"
    cohort, scores = two_beams([-1.0, -2.0, -3.0, -4.0], [-1.5, -3.0, -5.0, -6.0])
    assert cohort._extend_natively(scores, columns) is None, "-3.0 twice: the 4th best and the next"
    cohort, scores = two_beams([-1.0, -2.0, -3.0, -5.0], [-1.5, -2.5, -3.5, -5.0])
    assert cohort._extend_natively(scores, columns) is not None, "-5.0 twice below the best four: no matter"
    cohort, scores = two_beams([-1.0, -2.0, -3.0, -4.0], [-1.5, -2.5, -3.5, float("nan")])
    assert cohort._extend_natively(scores, columns) is None, "a NaN: torch.topk's own rules for it"


def test_at_its_cap_only_a_sentences_finished_candidates_must_be_ordered(library: native.Kernels) -> None:
    """At the cap every candidate ends with the sentence: the first `beams` become finished hypotheses,
    the rest are dropped, so equal values among the rest are no reason to leave the step."""
    columns = torch.tensor([[[10, 11, 12, 13], [20, 21, 22, 23]]])
    cohort, scores = two_beams([-1.0, -2.0, -3.0, -4.0], [-1.5, -3.0, -3.5, -4.5], caps=2)
    assert cohort._extend_natively(scores, columns) is not None
    assert cohort.is_finished.tolist() == [[True, True]] and bool(cohort.all_hit[0])
    ids = cohort.vocabulary.ids
    assert cohort.finished[0, :, :2].tolist() == [[5, int(ids[10])], [6, int(ids[20])]]
    cohort, scores = two_beams([-1.0, -2.0, -3.0, -4.0], [-1.0, -3.0, -3.5, -4.5], caps=2)
    assert cohort._extend_natively(scores, columns) is None, "-1.0 twice among the finished ones"
