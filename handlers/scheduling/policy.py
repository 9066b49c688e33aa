"""What a request may decode in this deployment: its beams, its new-token caps and its cost bound.

The model loads, quantizes and steps (handlers.model); these rules are the deployment's (the
handler config) applied to a request's options, and travel with the planned request
(handlers.translation.plan) to the decoding that submits its sentences.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from handlers.errors import OverLimit
from handlers.handler_config import HandlerConfig
from handlers.model.options import GenerationOptions
from handlers.model.search import RowLimits
from handlers.model.translator import Translator


@dataclass(frozen=True)
class DecodePolicy:
    config: HandlerConfig
    model_beams: int  # the model's own generation_config.num_beams (4 for opus-mt-zh-en)

    @classmethod
    def of(cls, config: HandlerConfig, translator: Translator) -> DecodePolicy:
        """The deployment's rules over the loaded model's own beam count."""
        return cls(config, translator.model.generation_config.num_beams or 1)

    def beams_for(self, options: GenerationOptions) -> int:
        """Request, then model-config yaml, then the model's generation_config."""
        return options.num_beams or self.config.num_beams or self.model_beams

    def new_token_cap(self, options: GenerationOptions, input_tokens: int) -> int:
        """The request's max_new_tokens, else the runaway guard: ratio x input + slack, capped."""
        if options.max_new_tokens is not None:
            return options.max_new_tokens
        guard = math.ceil(self.config.new_tokens_ratio * input_tokens) + self.config.new_tokens_slack
        return min(self.config.max_new_tokens, guard)

    def row_limits(self, options: GenerationOptions, input_tokens: int) -> RowLimits:
        """A text's own bounds on new tokens, as every decoder and scheduler applies them."""
        return RowLimits(self.new_token_cap(options, input_tokens), options.min_new_tokens or 0)

    def decode_settings(self, options: GenerationOptions) -> tuple[object, ...]:
        """The options after defaults: two requests that decode alike share sentence-cache entries."""
        return (self.beams_for(options), options.max_new_tokens, options.min_new_tokens)

    def check_cost(self, ids: Sequence[Sequence[int]], options: GenerationOptions) -> None:
        """Beams x new-token cap summed over a request's texts: the work it may ask for, bounded."""
        beams = self.beams_for(options)
        cost = sum(beams * self.new_token_cap(options, len(row)) for row in ids)
        limit = self.config.max_decode_tokens_per_request
        if cost > limit:
            raise OverLimit(
                f"request asks for {cost} decode steps (beams x max new tokens, summed over texts) "
                f"> max_decode_tokens_per_request ({limit}); send fewer texts, beams or max_new_tokens"
            )
