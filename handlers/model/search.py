"""Search state of a cohort: sentences that started decoding at the same step.

A cohort's rows share one position, so they share one self-attention cache length and attend
without padding (padding would not be bit-stable, see handlers.model.cross_attention). The decoder
steps many cohorts at once (handlers.model.decoding.FastDecoder.step): the linear layers see every
row of every cohort, attention and the search see one cohort. A static batch is one cohort; the
step scheduler (handlers.scheduling.step_scheduler) starts a new cohort whenever rows free up.

Both searches follow generate()'s rules step for step: log-softmax (beam search), then
min-new-tokens (eos banned) and forced eos at the last position; top 2 x beams candidates;
finished hypotheses scored by length penalty; early stopping as generation_config says. A beam
step's bookkeeping is one C call per cohort where the kernels are loaded (BeamCohort._extend_natively),
torch's operators where they are not, or where equal values leave an order that counts to torch.topk.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from handlers.model import native
from handlers.model.cross_attention import CrossMemory
from handlers.model.self_attention_cache import LayerCache, reorder
from handlers.model.top_k import arg_max, log_softmax_top_k

NEG = -1.0e9  # generate()'s "never pick this" score, added the same way so sums round the same
# (owner, its finished hypotheses' generated ids, best first) of each sentence that ended this step:
# a beam search keeps up to `beams` of them (the next-best are a request's alternatives), greedy one.
Finished = list[tuple[Any, list[list[int]]]]
_PER_SENTENCE = ("running", "running_scores", "finished", "finished_scores", "is_finished", "improvable")


@dataclass(frozen=True)
class RowLimits:
    """One text's bounds on new tokens (eos included)."""

    max_new_tokens: int
    min_new_tokens: int = 0


@dataclass(frozen=True)
class SearchRules:
    """The parts of the model's generation_config that decide the result."""

    decoder_start: int
    eos: int
    forced_eos: bool
    length_penalty: float
    early_stopping: bool | str

    @classmethod
    def of(cls, generation_config: Any) -> SearchRules:
        """Unset fields take generate()'s own defaults, read from transformers rather than copied."""
        defaults = generation_config._get_default_generation_params()

        def value(name: str) -> Any:
            own = getattr(generation_config, name, None)
            return defaults[name] if own is None else own

        return cls(
            decoder_start=int(generation_config.decoder_start_token_id),
            eos=int(generation_config.eos_token_id),
            forced_eos=generation_config.forced_eos_token_id is not None,
            length_penalty=float(value("length_penalty")),
            early_stopping=value("early_stopping"),
        )


@dataclass(frozen=True)
class Vocabulary:
    """The output layer's columns as token ids, and the rules that constrain them."""

    ids: torch.Tensor  # column -> token id
    eos_column: int
    rules: SearchRules

    def constrain(
        self, scores: torch.Tensor, generated: int, caps: torch.Tensor, minimums: torch.Tensor
    ) -> None:
        """generate()'s logits processors, in its order, per row: min new tokens, then forced eos."""
        banned = generated < minimums
        if bool(banned.any()):
            scores[banned, self.eos_column] = -math.inf
        self._force_eos(scores, generated, caps)

    def best_log_probs(
        self, logits: torch.Tensor, generated: int, caps: torch.Tensor, minimums: torch.Tensor, k: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A beam step's scores per row, as generate() makes them (log-softmax, then `constrain`'s
        rules), reduced to each row's k best and their columns. Overwrites `logits`."""
        banned = torch.where(generated < minimums, self.eos_column, -1)
        log_probs, top, columns = log_softmax_top_k(logits, k, banned)
        forced = self._force_eos(log_probs, generated, caps)
        if forced is not None:  # every other column -inf: torch.topk orders the ties
            top[forced], columns[forced] = torch.topk(log_probs[forced], k, dim=-1)
        return top, columns

    def _force_eos(self, scores: torch.Tensor, generated: int, caps: torch.Tensor) -> torch.Tensor | None:
        """Rows at their last position hold only eos (forced_eos_token_id); returns them, or None."""
        if not self.rules.forced_eos:
            return None
        forced = (caps - 1 == generated).nonzero().flatten()
        if not forced.numel():
            return None
        scores.index_fill_(0, forced, -math.inf)
        scores[forced, self.eos_column] = 0.0
        return forced


class RunningCohort(Protocol):
    """What the step scheduler needs of any decoder's cohort."""

    @property
    def sentences(self) -> int: ...

    def advance(self, logits: torch.Tensor) -> Finished:
        """Take this step's target-side logits; drop and return the sentences that ended."""
        ...


class Cohort(RunningCohort, Protocol):
    """What FastDecoder.step needs of a cohort, and what the step gives back to it."""

    cross: CrossMemory
    cache: list[LayerCache]  # per decoder layer, this cohort's rows only
    generated: int  # new tokens so far: the position of this step

    @property
    def tokens(self) -> torch.Tensor:
        """This step's input token per row (sentence-major, a sentence's beams adjacent)."""
        ...

    @property
    def sentences(self) -> int: ...

    def advance(self, logits: torch.Tensor) -> Finished:
        """Take this step's target-side logits; drop and return the sentences that ended."""
        ...


class _CohortState:
    """What every search keeps per cohort: its sentences, their bounds, caches and next tokens."""

    def __init__(
        self, vocabulary: Vocabulary, owners: Sequence[Any], cross: CrossMemory, limits: Sequence[RowLimits]
    ) -> None:
        self.vocabulary, self.cross, self.generated = vocabulary, cross, 0
        self.cache: list[LayerCache] = []
        self.owners = list(owners)
        self.caps = torch.tensor([limit.max_new_tokens for limit in limits])
        self.minimums = torch.tensor([limit.min_new_tokens for limit in limits])
        # Position 0: the decoder start token, one row per sentence (a beam search's beams all
        # hold it, so one row stands for them).
        self._tokens = torch.full((len(self.owners),), vocabulary.rules.decoder_start, dtype=torch.long)

    @property
    def tokens(self) -> torch.Tensor:
        return self._tokens

    @property
    def sentences(self) -> int:
        return len(self.owners)


class GreedyCohort(_CohortState):
    def __init__(
        self, vocabulary: Vocabulary, owners: Sequence[Any], cross: CrossMemory, limits: Sequence[RowLimits]
    ) -> None:
        super().__init__(vocabulary, owners, cross, limits)
        self.results: list[list[int]] = [[] for _ in self.owners]

    def advance(self, logits: torch.Tensor) -> Finished:
        self.vocabulary.constrain(logits, self.generated, self.caps, self.minimums)
        tokens = self.vocabulary.ids[arg_max(logits)]
        for result, token in zip(self.results, tokens.tolist(), strict=True):
            result.append(token)
        self.generated += 1
        ended = (tokens == self.vocabulary.rules.eos) | (self.caps <= self.generated)
        self._tokens = tokens
        if not bool(ended.any()):
            return []
        done: Finished = [(self.owners[i], [self.results[i]]) for i in ended.nonzero().flatten().tolist()]
        keep = (~ended).nonzero().flatten()
        rows = keep.tolist()
        self.owners = [self.owners[i] for i in rows]
        self.results = [self.results[i] for i in rows]
        self.caps, self.minimums, self._tokens = self.caps[keep], self.minimums[keep], tokens[keep]
        self.cross = self.cross.keep(keep)
        for layer in self.cache:
            layer.select(keep)
        return done


class BeamCohort(_CohortState):
    """Beam search over a cohort's sentences, each decoded as generate() decodes it alone."""

    def __init__(
        self,
        vocabulary: Vocabulary,
        owners: Sequence[Any],
        cross: CrossMemory,
        limits: Sequence[RowLimits],
        beams: int,
    ) -> None:
        super().__init__(vocabulary, owners, cross, limits)
        self.rules, self.beams = vocabulary.rules, beams
        count = len(self.owners)
        self.running = torch.empty((count, beams, 0), dtype=torch.long)
        self.running_scores = torch.full((count, beams), NEG)
        self.running_scores[:, 0] = 0.0
        self.finished = torch.full((count, beams, int(self.caps.max())), -1, dtype=torch.long)
        self.finished_scores = torch.full((count, beams), NEG)
        self.is_finished = torch.zeros((count, beams), dtype=torch.bool)
        self.improvable = torch.ones(count, dtype=torch.bool)
        self.all_hit = torch.zeros(count, dtype=torch.bool)  # every candidate of the step ended
        self.top_beams = torch.arange(2 * beams) < beams

    def advance(self, logits: torch.Tensor) -> Finished:
        rows_per_sentence = logits.shape[0] // self.sentences
        caps, minimums = (x.repeat_interleave(rows_per_sentence) for x in (self.caps, self.minimums))
        best = self.vocabulary.best_log_probs(logits, self.generated, caps, minimums, 2 * self.beams)
        origins = self._extend(*(x.view(self.sentences, rows_per_sentence, -1) for x in best))
        self.generated += 1
        done, keep = self._finish_sentences()
        rows = (keep[:, None] * rows_per_sentence + origins[keep] * (rows_per_sentence > 1)).flatten()
        reorder(self.cache, rows)
        self._tokens = self.running[:, :, -1].flatten()
        return done

    def _extend(self, row_scores: torch.Tensor, row_columns: torch.Tensor) -> torch.Tensor:
        """One step for every sentence; returns each new running beam's origin beam.

        row_scores, row_columns: (sentences, rows, 2 x beams), each row's best log-probabilities and
        their columns, one row per beam (one for all beams at the first step). A sentence's best
        2 x beams candidates are among each row's own best 2 x beams (adding the beam's score keeps a
        row's order), so top-k runs per row and then over those few: the scores are the same sums
        generate() makes over the whole vocabulary of every beam.
        """
        origins = self._extend_natively(row_scores, row_columns)
        if origins is not None:
            return origins
        sentences, beams = row_scores.shape[0], self.beams
        row_scores, row_columns = (x.expand(-1, beams, -1) for x in (row_scores, row_columns))
        candidates = (row_scores + self.running_scores[:, :, None]).reshape(sentences, -1)
        top_scores, top_index = torch.topk(candidates, k=2 * beams)
        origin = top_index // (2 * beams)
        tokens = self.vocabulary.ids[row_columns.reshape(sentences, -1).gather(1, top_index)]
        sequences = torch.cat([_gather(self.running, origin), tokens[:, :, None]], dim=2)
        hits = (tokens == self.rules.eos) | (self.caps <= self.generated + 1)[:, None]

        running_scores = top_scores + hits.to(torch.float32) * NEG
        chosen = torch.topk(running_scores, k=beams)[1]
        self.running = _gather(sequences, chosen)
        self.running_scores = _gather(running_scores, chosen)

        scored = top_scores / ((self.generated + 1) ** self.rules.length_penalty)
        full = self.is_finished.all(dim=-1, keepdim=True) & (self.rules.early_stopping is True)
        scored += full.to(torch.float32) * NEG
        scored += (~self.improvable[:, None]).to(torch.float32) * NEG
        just_finished = hits & self.top_beams[None, :]
        scored += (~just_finished) * NEG
        padded = F.pad(sequences, (0, self.finished.shape[2] - sequences.shape[2]), value=-1)
        merged_scores = torch.cat([self.finished_scores, scored], dim=1)
        best = torch.topk(merged_scores, k=beams)[1]
        self.finished = _gather(torch.cat([self.finished, padded], dim=1), best)
        self.finished_scores = _gather(merged_scores, best)
        self.is_finished = _gather(torch.cat([self.is_finished, just_finished], dim=1), best)

        self._update_improvable(self.generated + 1)
        self.all_hit = hits.all(dim=-1)
        return _gather(origin, chosen)

    def _extend_natively(self, row_scores: torch.Tensor, row_columns: torch.Tensor) -> torch.Tensor | None:
        """_extend's step in one C call (kernels.c's beam_extend: the same scores, and the same
        hypotheses wherever they count), or None where there are no kernels or equal values leave
        an order that counts to torch.topk: then nothing has changed and torch's operators run."""
        kernels = native.current()
        if kernels is None or kernels.beam_extend is None:
            return None
        if row_scores.dtype != torch.float32 or self.running_scores.dtype != torch.float32:
            return None  # the kernel's floats are float32's
        if int(row_scores.shape[1]) not in (1, self.beams):
            return None  # a row per sentence (the first step) or per beam, as the kernel reads them
        count, beams, rules = self.sentences, self.beams, self.rules
        inputs = [x.contiguous() for x in (row_scores, row_columns, self.vocabulary.ids)]
        state = [x.contiguous() for x in (self.running, self.running_scores, self.caps)]
        kept = [x.contiguous() for x in (self.finished, self.finished_scores, self.is_finished)]
        kept.append(self.improvable.contiguous())
        outputs = [
            torch.empty((count, beams, self.generated + 1), dtype=torch.long),  # running
            torch.empty((count, beams)),  # running_scores
            torch.empty((count, beams), dtype=torch.long),  # origins
            *(torch.empty_like(x) for x in kept),  # finished, finished_scores, is_finished, improvable
            torch.empty(count, dtype=torch.bool),  # all_hit
        ]
        by_cap = rules.early_stopping == "never" and rules.length_penalty > 0.0
        undecided = kernels.beam_extend(
            count, beams, int(row_scores.shape[1]), *_pointers(inputs), rules.eos, self.generated,
            *_pointers(state), rules.length_penalty, by_cap, rules.early_stopping is True,
            int(self.finished.shape[2]), *_pointers(kept), *_pointers(outputs),
        )  # fmt: skip
        if undecided:
            return None
        self.running, self.running_scores, origins = outputs[:3]
        self.finished, self.finished_scores, self.is_finished, self.improvable, self.all_hit = outputs[3:]
        return origins

    def _update_improvable(self, generated: int) -> None:
        """generate()'s early-stop heuristic: can a running beam still beat the worst finished one?"""
        if self.rules.early_stopping == "never" and self.rules.length_penalty > 0.0:
            lengths = torch.tensor([float(cap) ** self.rules.length_penalty for cap in self.caps.tolist()])
            best_possible = self.running_scores[:, :1] / lengths[:, None]
        else:
            best_possible = self.running_scores[:, :1] / (generated**self.rules.length_penalty)
        worst_finished = torch.where(
            self.is_finished, torch.min(self.finished_scores, dim=1, keepdim=True)[0], NEG
        )
        self.improvable &= torch.any(best_possible > worst_finished, dim=-1)

    def _finish_sentences(self) -> tuple[Finished, torch.Tensor]:
        """The finished hypotheses of every sentence that is done (best first, as generate() ranks
        them), and the sentences that go on."""
        ended = ~self.improvable | self.all_hit
        if self.rules.early_stopping is True:
            ended |= self.is_finished.all(dim=-1)
        done: Finished = []
        for row in ended.nonzero().flatten().tolist():
            ranked = [ids[ids >= 0].tolist() for ids in self.finished[row][self.is_finished[row]]]
            done.append((self.owners[row], ranked))
        keep = (~ended).nonzero().flatten()
        if done:
            self.owners = [self.owners[i] for i in keep.tolist()]
            self.caps, self.minimums = self.caps[keep], self.minimums[keep]
            self.cross = self.cross.keep(keep)
            for name in _PER_SENTENCE:
                setattr(self, name, getattr(self, name)[keep])
        return done, keep


def _pointers(tensors: Sequence[torch.Tensor]) -> list[int]:
    return [tensor.data_ptr() for tensor in tensors]


def _gather(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """tensor[s, index[s, j], ...] for every sentence s: picks beams (dim 1) per sentence."""
    expanded = index.reshape(*index.shape, *([1] * (tensor.dim() - 2)))
    return torch.take_along_dim(tensor, expanded, dim=1)
