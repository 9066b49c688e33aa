"""Requests that stay open across TorchServe calls (`scheduler: step`, TorchServe continuous batching).

With `continuousBatching: true` TorchServe calls the handler again and again while any request
is open: a new request arrives with its body, an open one with its id only, and every call must
answer every request with one chunk. The chunk's `more` flag becomes TorchServe's ts_stream_next:
the first chunk of a request sends the HTTP status and headers, the last one (more=False) closes
it. So every response takes at least two calls:

- not streamed: empty chunks while decoding, then the whole body, exactly as `scheduler: static`
  answers it (the same bytes, sent with chunked transfer encoding);
- streamed (`"stream": true`): one JSON line per sentence, in order, as soon as that sentence
  and every one before it are decoded, then the whole response as the last line;
- a client error: its JSON error body as one full response with its 4xx status (more=None: no
  stream; TorchServe closes the connection after a 4xx, which also ends the request there). If
  TorchServe still sends the request in a later call, it gets an empty answer until it stops.

Repeated sentences are answered from the worker's sentence cache before they reach the scheduler.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from handlers.jobs import Job
from handlers.model.translator import Translator
from handlers.pipeline import BatchCounts
from handlers.scheduling.partitions import Partitions
from handlers.scheduling.step_scheduler import SentenceKey
from handlers.sentence_cache import CacheKey, SentenceCache, cache_key


@dataclass(frozen=True)
class Chunk:
    body: bytes
    more: bool | None  # True: more chunks follow; False: the last chunk; None: a whole response


@dataclass
class _Open:
    job: Job
    opened: float
    texts: list[str | None] = field(default_factory=list)  # per chunk of every sentence
    keys: list[CacheKey] = field(default_factory=list)
    misses: list[int] = field(default_factory=list)  # chunk indices the scheduler decodes, in its order
    streamed: int = 0  # sentences already sent (streaming)
    calls: int = 0  # chunks answered so far
    first_sentence_timed: bool = False

    @property
    def streaming(self) -> bool:
        return self.job.work is not None and self.job.work.request.stream

    def ready_sentences(self) -> int:
        """How many leading sentences are fully decoded."""
        assert self.job.work is not None
        ready, start = 0, 0
        for chunks in self.job.work.chunks:
            end = start + len(chunks)
            if any(text is None for text in self.texts[start:end]):
                break
            ready, start = ready + 1, end
        return ready

    @property
    def decoded(self) -> bool:
        return all(text is not None for text in self.texts)


class OpenRequests:
    def __init__(
        self,
        translator: Translator,
        scheduler: Partitions,
        cache: SentenceCache,
        model_tag: str,
        render: Callable[[Job], Any],  # the handler's response body, JSON-serialisable
    ) -> None:
        self.translator, self.scheduler, self.cache = translator, scheduler, cache
        self.model_tag, self.render = model_tag, render
        self._open: dict[Hashable, _Open] = {}
        self.counts = BatchCounts(0, 0, 0, 0)
        self.first_sentence_ms: list[float] = []  # since the last take_counts

    @property
    def open_count(self) -> int:
        return len(self._open)

    def is_open(self, request: Hashable) -> bool:
        return request in self._open

    def open(self, request: Hashable, job: Job) -> None:
        """A new request: answer its sentences from the cache, queue the rest for decoding."""
        entry = _Open(job, time.monotonic())
        self._open[request] = entry
        if job.work is None:
            return
        work = job.work
        chunks = [chunk for sentence in work.chunks for chunk in sentence]
        settings = self.translator.decode_settings(work.request.options)
        entry.keys = [cache_key(self.model_tag, settings, chunk) for chunk in chunks]
        entry.texts = [self.cache.get(key) for key in entry.keys]
        misses = [index for index, text in enumerate(entry.texts) if text is None]
        hits = len(chunks) - len(misses)
        self._add_counts(
            cache_hits=hits,
            cache_misses=len(misses),
            sentences=len(work.chunks),
            glossary_hits=sum(document.glossary_hits for document in work.documents),
        )
        options = work.request.options
        limits = [self.translator.row_limits(options, len(chunks[i])) for i in misses]
        entry.misses = misses
        beams = self.translator.beams_for(options)
        lead = _first_line_rows(work.chunks, misses) if work.request.stream else 0
        self.scheduler.submit(request, [chunks[i] for i in misses], limits, beams, lead)

    def close_missing(self, present: set[Hashable]) -> None:
        """Requests TorchServe no longer sends (the client went away): stop decoding them."""
        for request in [r for r in self._open if r not in present]:
            self.scheduler.cancel(request)
            self._drop(request)

    def advance(self, seconds: float, backlog_seconds: float) -> None:
        """Take what the scheduler finished: until news or `seconds`, or with a backlog `backlog_seconds`.

        A call costs the worker a read of every open request's headers (TorchServe's continuous
        batching resends them all), about half a core at 100 open requests when calls come at
        every finished sentence. While sentences wait for rows, answering sooner admits nothing
        sooner, so a call then gathers what finishes in `backlog_seconds` and answers it together;
        only a streamed line still goes out at once.
        """
        if self.scheduler.state().backlog:
            for key, ids in self.scheduler.run(self._gather, backlog_seconds):
                self._store(key, ids)
            return
        waiting = not any(self._has_news(entry) for entry in self._open.values())
        for key, ids in self.scheduler.run(self._news_in, seconds if waiting else 0.0):
            self._store(key, ids)

    def chunk(self, request: Hashable) -> Chunk:
        entry = self._open[request]
        entry.calls += 1
        first = entry.calls == 1
        job = entry.job
        if job.work is None:  # a client error
            return Chunk(json_body(self.render(job)) if first else b"", more=None)
        if entry.streaming:
            ready = entry.ready_sentences()
            lines = [_sentence_line(entry, index) for index in range(entry.streamed, ready)]
            entry.streamed = ready
            if entry.decoded and not first:
                self._finish(entry)
                whole = json.dumps(self.render(job), ensure_ascii=False).encode("utf-8")
                return self._last(request, b"".join(lines) + whole + b"\n")
            return Chunk(b"".join(lines), more=True)
        if entry.decoded and not first:
            self._finish(entry)
            return self._last(request, json_body(self.render(job)))
        return Chunk(b"", more=True)

    def take_counts(self) -> tuple[BatchCounts, list[float]]:
        """The work done and each request's time to its first decoded sentence, since the last call."""
        counts, self.counts = self.counts, BatchCounts(0, 0, 0, 0)
        firsts, self.first_sentence_ms = self.first_sentence_ms, []
        return counts, firsts

    def _has_news(self, entry: _Open) -> bool:
        if entry.calls == 0 or entry.job.work is None or entry.decoded:
            return True
        return entry.streaming and entry.ready_sentences() > entry.streamed

    def _gather(self, finished: list[tuple[SentenceKey, list[int]]]) -> bool:
        """Store what finished; keep collecting until the time is up, unless a stream has a new line
        (a streaming client reads each line as it comes; the others get their answers together)."""
        self._take(finished)
        return any(
            entry.streaming and entry.calls and entry.ready_sentences() > entry.streamed
            for entry in self._open.values()
        )

    def _news_in(self, finished: list[tuple[SentenceKey, list[int]]]) -> bool:
        self._take(finished)
        return any(self._has_news(entry) for entry in self._open.values())

    def _take(self, finished: list[tuple[SentenceKey, list[int]]]) -> None:
        """Store what the scheduler finished, taking it out of its list."""
        for key, ids in finished:
            self._store(key, ids)
        finished.clear()

    def _store(self, key: SentenceKey, ids: list[int]) -> None:
        entry = self._open.get(key.request)
        if entry is None:
            return  # cancelled while running
        index = entry.misses[key.index]
        text = self.translator.tokenizer.decode(ids, skip_special_tokens=True)
        entry.texts[index] = text
        self.cache.put(entry.keys[index], text)
        self._add_counts(generated_tokens=len(ids))
        if not entry.first_sentence_timed and entry.ready_sentences() > 0:
            entry.first_sentence_timed = True
            self.first_sentence_ms.append((time.monotonic() - entry.opened) * 1000)

    def _finish(self, entry: _Open) -> None:
        """Fill the request's outputs as pipeline.text_answers expects them."""
        work = entry.job.work
        assert work is not None
        start = 0
        for sentence in work.chunks:
            end = start + len(sentence)
            work.outputs.append(" ".join(text or "" for text in entry.texts[start:end]))
            work.cached.append(not any(start <= i < end for i in entry.misses))
            start = end

    def _last(self, request: Hashable, body: bytes) -> Chunk:
        self._drop(request)
        return Chunk(body, more=False)

    def _drop(self, request: Hashable) -> None:
        self._open.pop(request, None)

    def _add_counts(self, **added: int) -> None:
        self.counts = BatchCounts(**{k: v + added.get(k, 0) for k, v in vars(self.counts).items()})


def _first_line_rows(sentences: list[list[list[int]]], misses: list[int]) -> int:
    """How many of the rows to decode make up the first streamed line: the misses among the chunks
    of the first sentence that has one (cached sentences before it are sent at once)."""
    end = 0
    for chunks in sentences:
        end += len(chunks)
        if misses and misses[0] < end:
            return sum(1 for miss in misses if miss < end)
    return 0


def _sentence_line(entry: _Open, index: int) -> bytes:
    """One streamed sentence: its index among the sentences the model decodes, and its translation."""
    assert entry.job.work is not None
    start = sum(len(chunks) for chunks in entry.job.work.chunks[:index])
    parts = entry.texts[start : start + len(entry.job.work.chunks[index])]
    line = {"sentence": index, "translation": " ".join(text or "" for text in parts)}
    return json.dumps(line, ensure_ascii=False).encode("utf-8") + b"\n"


def json_body(body: Any) -> bytes:
    """The bytes TorchServe itself sends for a dict a handler returns (json.dumps, indent 2)."""
    return json.dumps(body, indent=2).encode("utf-8")
