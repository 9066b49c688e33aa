"""Translate units of text exactly as the server translates a request: its plan, decode and render.

A unit is what one online request would carry: one line of a text file, one row of a table, or a
whole HTML, SRT, WebVTT or Markdown file. `UnitTranslator` loads the archive once and runs each
unit through the server's stages (handlers.translation.plan.plan_request, SentenceDecoding with
the sentence cache and the step scheduler in this thread, plan.render): there is no second
pipeline to drift from the first. Per-row int8 keeps a sentence's ids independent of what it is
decoded beside, so the batch output equals the server's for the same text, byte for byte.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

from batch.archive_model import ArchiveModel, batch_config, open_archive
from batch.units import JobOptions, Unit, UnitResult
from handlers.errors import Refused
from handlers.model.options import GenerationOptions
from handlers.scheduling.inline import InlineDriver
from handlers.scheduling.policy import DecodePolicy
from handlers.scheduling.run import load_and_warm_up, scheduler_for
from handlers.sentence_cache import SentenceCache
from handlers.text.documents import DocumentFormat
from handlers.text.glossary import NO_GLOSSARY, load_tsv
from handlers.translation.decoding import Decoded, SentenceDecoding
from handlers.translation.plan import PlannedRequest, plan_request, render
from handlers.translation.request import TranslationRequest


class UnitTranslator:
    """One archive loaded once; translates lists of units (an actor holds one of these)."""

    def __init__(self, archive: Path | ArchiveModel, options: JobOptions) -> None:
        self.archive = archive if isinstance(archive, ArchiveModel) else open_archive(archive)
        self.options = options
        config = batch_config(self.archive.served_config)
        if options.beams is not None and not 1 <= options.beams <= config.max_beams:
            raise ValueError(
                f"beams must be between 1 and max_beams ({config.max_beams}); got {options.beams}"
            )
        self.translator = load_and_warm_up(self.archive.model_dir, config)
        self.glossary = NO_GLOSSARY
        if config.glossary_file is not None:  # the deployment's TSV, shipped in the archive
            self.glossary = load_tsv(self.archive.model_dir / config.glossary_file, config.max_glossary_chars)
        self.identity = self.archive.identity(self.translator.decoder.name)
        self.config = config
        self.policy = DecodePolicy.of(config, self.translator)
        model_tag = f"{self.identity['model']}/{self.identity['version']}/{config.variant}"
        scheduler = scheduler_for(self.translator, config)
        cache = SentenceCache(config.sentence_cache_entries, config.sentence_cache_bytes)
        self.decoding = SentenceDecoding[Decoded](self.translator, cache, model_tag, InlineDriver(scheduler))

    def translate(self, units: Sequence[Unit]) -> list[UnitResult]:
        """Each unit's translation (or its error), in the order given.

        Each unit is planned alone (a refusal fails that unit only), then units of one format and
        options decode as the texts of one request: SentenceDecoding decodes a sentence repeated
        anywhere among them once, as it does within a request, and the sentence cache answers it in
        later calls.
        """
        results: dict[tuple[int, int], UnitResult] = {}
        groups: dict[tuple[DocumentFormat, int | None], list[tuple[Unit, PlannedRequest]]] = {}
        # Shortest first: the scheduler admits in submission order, so a step's rows hold similar lengths.
        for unit in sorted(units, key=lambda unit: len(unit.text)):
            try:
                planned = plan_request(self._request(unit), self.translator, self.policy, self.glossary)
            except Refused as refusal:
                results[(unit.file, unit.index)] = UnitResult(unit.file, unit.index, None, error=str(refusal))
                continue
            groups.setdefault((unit.text_format, unit.forced_tokens), []).append((unit, planned))
        together = {key: _together([planned for _, planned in group]) for key, group in groups.items()}
        for key, planned in together.items():
            self.decoding.open(key, Decoded(planned=planned))
        self.decoding.collect(lambda: False, math.inf)
        for key, group in groups.items():
            self.decoding.close(key)
            for unit, result in zip(
                (unit for unit, _ in group), self._render(together[key], group), strict=True
            ):
                results[(unit.file, unit.index)] = result
        return [results[(unit.file, unit.index)] for unit in units]

    def _render(self, together: PlannedRequest, group: list[tuple[Unit, PlannedRequest]]) -> list[UnitResult]:
        budget = self.config.text_budget_ms / 1000
        try:
            answers = render(together, budget * len(group))
        except Refused:  # one text past the text budget: render each alone to fail that one only
            return [self._render_alone(unit, planned, budget) for unit, planned in group]
        return [
            UnitResult(
                unit.file, unit.index, answer.translation, tuple(answer.alternatives or ()), planned.count
            )
            for (unit, planned), answer in zip(group, answers, strict=True)
        ]

    @staticmethod
    def _render_alone(unit: Unit, planned: PlannedRequest, budget: float) -> UnitResult:
        try:
            answer = render(planned, budget)[0]
        except Refused as refusal:
            return UnitResult(unit.file, unit.index, None, error=str(refusal))
        return UnitResult(
            unit.file, unit.index, answer.translation, tuple(answer.alternatives or ()), planned.count
        )

    def _request(self, unit: Unit) -> TranslationRequest:
        options = GenerationOptions(num_beams=self.options.beams, alternatives=self.options.alternatives)
        if unit.forced_tokens is not None:
            options = GenerationOptions(
                self.options.beams, unit.forced_tokens, unit.forced_tokens, self.options.alternatives
            )
        return TranslationRequest(
            (unit.text,), False, options, unit.text_format, glossary=self.options.glossary
        )


def _together(plans: Sequence[PlannedRequest]) -> PlannedRequest:
    """Planned one-text requests of one format and options as one request of many texts."""
    first = plans[0].request
    texts = tuple(text for planned in plans for text in planned.request.texts)
    request = dataclasses.replace(first, texts=texts, as_list=True)
    return PlannedRequest(request, [text for planned in plans for text in planned.texts], plans[0].policy)
