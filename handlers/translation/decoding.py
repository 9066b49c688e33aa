"""Where sentences meet the sentence cache and the decoder: the one place that fills them.

open() answers what it can from the cache and submits the rest of a request's chunks to the
driver (the step scheduler, in the worker's thread or in partition processes); collect() takes
what the driver finished and fills the chunks, and the cache, with it. A chunk repeated within
a request is decoded once. The cache holds best translations only: a request that asks for
alternatives decodes every chunk (and leaves its best in the cache).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, fields
from typing import Generic, TypeVar

from handlers.model.translator import Translator
from handlers.scheduling.partitions import Driver, Finished
from handlers.scheduling.step_scheduler import Submission
from handlers.sentence_cache import SentenceCache, cache_key
from handlers.translation.plan import PlannedRequest
from handlers.translation.sentence import Chunk


@dataclass
class Counts:
    """What decoding cost since the last take_counts(), for the worker's custom metrics."""

    cache_hits: int = 0
    cache_misses: int = 0
    sentences: int = 0
    generated_tokens: int = 0
    glossary_hits: int = 0
    # Each request's time from open() to its first done sentence, in milliseconds.
    first_sentence_ms: list[float] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self) if f.name != "first_sentence_ms")


@dataclass
class Decoded:
    """A request as decoding sees it. The handler's record (handlers.jobs.Job) extends it with its
    envelope and what the calls have sent, so that a request has one record and this layer knows
    no HTTP."""

    planned: PlannedRequest | None = None  # None: refused, or answered without the model
    # Per submitted chunk (the driver's sentence index), every copy of it in the request.
    waiting: list[list[Chunk]] = field(default_factory=list)
    opened: float = 0.0  # monotonic time its sentences went to the cache and the decoder
    first_timed: bool = False  # its time to a first done sentence is counted
    answered: bool = False  # its whole answer has gone out: what still finishes is dropped

    @property
    def done(self) -> bool:
        """Every sentence is decoded, or the request needs none."""
        return self.planned is None or self.planned.done


Record = TypeVar("Record", bound=Decoded)


class SentenceDecoding(Generic[Record]):
    def __init__(self, translator: Translator, cache: SentenceCache, model_tag: str, driver: Driver) -> None:
        self.translator, self.cache, self.driver = translator, cache, driver
        self.model_tag = model_tag  # name, version, variant: part of every key
        self.counts = Counts()
        # Every open request by its key: the one registry of them (handlers.open_requests reads it).
        self.jobs: dict[Hashable, Record] = {}

    def open(self, owner: Hashable, job: Record) -> None:
        """Hold the request; answer its chunks from the cache and submit the others (one of each repeat)."""
        self.jobs[owner] = job
        planned = job.planned
        if planned is None:
            return  # refused, or answered without the model
        options = planned.request.options
        settings = planned.decode_settings
        misses: dict[object, list[Chunk]] = {}
        for sentence in planned.sentences:
            for chunk in sentence.chunks:
                chunk.key = cache_key(self.model_tag, settings, chunk.ids)
                text = None if options.alternatives else self.cache.get(chunk.key)
                if text is None:
                    misses.setdefault(chunk.key, []).append(chunk)
                else:
                    chunk.text, chunk.cached = text, True
        chunks = sum(len(sentence.chunks) for sentence in planned.sentences)
        missed = sum(len(copies) for copies in misses.values())
        self._add(
            cache_hits=chunks - missed,
            cache_misses=missed,
            sentences=planned.count,
            glossary_hits=planned.glossary_hits,
        )
        job.opened, job.waiting = time.monotonic(), list(misses.values())
        self._time_first_sentence(job)
        if not job.waiting:
            return
        ids = [copies[0].ids for copies in job.waiting]  # tuples, as a Submission holds them
        limits = [planned.row_limits(len(row)) for row in ids]
        lead = self._lead(planned, job.waiting) if planned.request.stream else 0
        keep = 1 + options.alternatives
        self.driver.submit(Submission.of(owner, ids, limits, planned.beams, lead, keep))

    def close(self, owner: Hashable) -> None:
        """Forget a request: answered, or its client gone (its waiting sentences are cancelled)."""
        job = self.jobs.pop(owner, None)
        if job is not None and not job.done:
            self.driver.cancel(owner)

    def collect(self, news: Callable[[], bool], seconds: float) -> None:
        """Fill what the driver finishes until `news()` (asked after each arrival) or `seconds` pass."""

        def take(finished: Finished) -> bool:
            for key, ranked in finished:
                self._fill(key.request, key.index, ranked)
            finished.clear()
            return news()

        for key, ranked in self.driver.run(take, seconds):
            self._fill(key.request, key.index, ranked)

    def take_counts(self) -> Counts:
        counts, self.counts = self.counts, Counts()
        return counts

    def _fill(self, owner: Hashable, index: int, ranked: list[list[int]]) -> None:
        job = self.jobs.get(owner)
        if job is None or job.answered:
            return  # closed (or its answer given) while its sentence ran
        texts = self.translator.ranked_texts(ranked)
        copies = job.waiting[index]
        self.cache.put(copies[0].key, texts[0])
        for chunk in copies:
            chunk.text, chunk.alternatives = texts[0], tuple(texts[1:])
        self._add(generated_tokens=len(ranked[0]))
        self._time_first_sentence(job)

    def _time_first_sentence(self, job: Decoded) -> None:
        if not job.first_timed and job.planned is not None and job.planned.ready() > 0:
            job.first_timed = True
            self.counts.first_sentence_ms.append((time.monotonic() - job.opened) * 1000)

    def _add(self, **added: int) -> None:
        for name, value in added.items():
            setattr(self.counts, name, getattr(self.counts, name) + value)

    @staticmethod
    def _lead(planned: PlannedRequest, waiting: list[list[Chunk]]) -> int:
        """How many submitted chunks make up the first streamed line: those of the first sentence
        not answered by the cache (cached sentences before it are sent at once)."""
        first = next((s for s in planned.sentences if not s.done), None)
        if first is None:
            return 0
        mine = {id(chunk) for chunk in first.chunks}
        return sum(1 for copies in waiting if any(id(chunk) in mine for chunk in copies))
