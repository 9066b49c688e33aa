"""Decoders: token ids in, generated token ids out. One is picked at load time (`decoder:` in the yaml).

- `GenerateDecoder` calls transformers' `generate()`: the reference, kept to compare against.
- `FastDecoder` runs our own greedy and beam-search loops over the MarianMT modules and gives
  the ids `generate()` gives (with the output restricted to the target-side vocabulary), doing
  less work: it scores only the ~32k target-side rows of the output layer, drops sentences as
  they finish, keeps the encoder output and cross-attention keys/values once per sentence (the
  beams of a sentence attend to them together, as extra query positions) instead of once per
  beam, and reorders only the self-attention cache, which differs per beam. Every row keeps its
  own min/max new tokens, so a sentence decodes as it would alone.

The searches live in handlers.model.search (one state object per cohort of sentences that started
together); FastDecoder encodes sentences into a cohort and steps any number of cohorts at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from handlers.model.attention import attend, transposed_keys
from handlers.model.batching import padded_width
from handlers.model.cross_attention import CrossMemory, WidthGroup
from handlers.model.encoding import PackedEncoder, Packing
from handlers.model.layer_step import LayerStep
from handlers.model.model_config import DecoderName
from handlers.model.projections import Projections
from handlers.model.row_int8 import RowInt8Linear
from handlers.model.search import (
    BeamCohort,
    Cohort,
    Finished,
    GreedyCohort,
    RowLimits,
    RunningCohort,
    SearchRules,
    Vocabulary,
)
from handlers.model.self_attention_cache import LayerCache
from handlers.model.vocabulary import TargetOutputLayer, target_token_ids

__all__ = [
    "Decoder",
    "FastDecoder",
    "GenerateDecoder",
    "Released",
    "RowLimits",
    "SearchRules",
    "make_decoder",
    "release_copied_layers",
]


class Decoder(Protocol):
    name: str

    def start(
        self,
        owners: Sequence[Any],
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        limits: Sequence[RowLimits],
        beams: int,
    ) -> RunningCohort:
        """Sentences that start decoding together (the step scheduler's unit of admission)."""
        ...

    def step(self, cohorts: Sequence[Any]) -> Sequence[torch.Tensor]:
        """One step of every cohort this decoder started; each cohort's logits for its `advance`."""
        ...


class GeneratedCohort:
    """Sentences generate() decoded at admission, handed back at the scheduler's next step."""

    def __init__(self, finished: Finished) -> None:
        self.finished = finished

    @property
    def sentences(self) -> int:
        return len(self.finished)

    def advance(self, logits: torch.Tensor) -> Finished:
        done, self.finished = self.finished, []
        return done


class GenerateDecoder:
    """transformers' generate() on the padded unit: one max/min for all rows, each row then cut to its cap."""

    name = "generate"

    def __init__(self, model: Any, rules: SearchRules) -> None:
        self.model = model
        self.rules = rules

    def start(
        self,
        owners: Sequence[Any],
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        limits: Sequence[RowLimits],
        beams: int,
    ) -> GeneratedCohort:
        """generate() runs whole at admission: the cohort it gives ends at its first step."""
        ranked = self.generate(input_ids, attention_mask, limits, beams, beams)
        return GeneratedCohort(list(zip(owners, ranked, strict=True)))

    def step(self, cohorts: Sequence[GeneratedCohort]) -> Sequence[torch.Tensor]:
        return [torch.empty(0) for _ in cohorts]

    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        limits: Sequence[RowLimits],
        beams: int,
        returned: int,
    ) -> list[list[list[int]]]:
        """Per row, generate()'s `returned` best hypotheses, best first: the reference tests compare with."""
        kwargs = {"max_new_tokens": max(limit.max_new_tokens for limit in limits), "num_beams": beams}
        if (minimum := min(limit.min_new_tokens for limit in limits)) > 0:
            kwargs["min_new_tokens"] = minimum
        if returned > 1:
            kwargs["num_return_sequences"] = returned
        with torch.inference_mode():
            output = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        rows = output.view(len(limits), returned, -1)
        return [
            [self._cut(hypothesis[1:].tolist(), limit) for hypothesis in ranked]
            for ranked, limit in zip(rows, limits, strict=True)
        ]

    def _cut(self, ids: list[int], limit: RowLimits) -> list[int]:
        """Up to the first eos; a row that ran past its own cap ends there, with the eos forced there."""
        if self.rules.eos in ids:
            ids = ids[: ids.index(self.rules.eos) + 1]
        if len(ids) > limit.max_new_tokens:
            ids = ids[: limit.max_new_tokens]
            if self.rules.forced_eos:
                ids[-1] = self.rules.eos
        return ids


class FastDecoder:
    name = "fast"

    def __init__(self, model: Any, output: TargetOutputLayer, rules: SearchRules) -> None:
        marian = model.model
        self.encoder = PackedEncoder(marian.encoder)
        self.layers: list[Any] = list(marian.decoder.layers)
        self.embed_tokens = marian.decoder.embed_tokens
        self.embed_scale = marian.decoder.embed_scale
        self.positions = marian.decoder.embed_positions.weight
        self.heads = self.layers[0].self_attn.num_heads
        attentions = [(layer.self_attn, layer.encoder_attn) for layer in self.layers]
        self.self_qkv = [Projections([a.q_proj, a.k_proj, a.v_proj]) for a, _ in attentions]
        self.steps = [LayerStep.of(layer, qkv) for layer, qkv in zip(self.layers, self.self_qkv, strict=True)]
        # Every layer's cross-attention keys and values come from the same encoder output.
        self.cross_kv = Projections([p for _, a in attentions for p in (a.k_proj, a.v_proj)])
        self.output = output
        self.rules = rules
        self.vocabulary = Vocabulary(output.ids, int((output.ids == rules.eos).nonzero()[0, 0]), rules)

    def start(
        self,
        owners: Sequence[Any],
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        limits: Sequence[RowLimits],
        beams: int,
    ) -> Cohort:
        """Encode sentences (their tokens packed, one pass for all) into a cohort whose cross-attention
        memory is grouped by padded width."""
        lengths = [int(n) for n in attention_mask.sum(dim=1)]
        widths = [padded_width(n) for n in lengths]
        if max(widths) > input_ids.shape[1]:
            raise ValueError(f"inputs must be padded to {max(widths)} columns: use translator.pad_batch")
        order = sorted(range(len(widths)), key=widths.__getitem__)
        packing = Packing.of([lengths[i] for i in order], [widths[i] for i in order])
        tokens = torch.cat([input_ids[i, : lengths[i]] for i in order])
        cross = CrossMemory(self._cross_memory(self.encoder(tokens, packing), packing))
        ordered_owners, ordered_limits = [owners[i] for i in order], [limits[i] for i in order]
        if beams == 1:
            return GreedyCohort(self.vocabulary, ordered_owners, cross, ordered_limits)
        return BeamCohort(self.vocabulary, ordered_owners, cross, ordered_limits, beams)

    def _cross_memory(self, encoded: torch.Tensor, packing: Packing) -> list[WidthGroup]:
        """Every layer's cross-attention keys and values of the packed encoder output, per width group."""
        groups = []
        for block, mask in zip(
            packing.blocks(self.cross_kv.side_by_side(encoded)), packing.masks, strict=True
        ):
            sentences, width, _ = block.shape
            heads = [
                p.view(sentences, width, self.heads, -1).transpose(1, 2) for p in self.cross_kv.split(block)
            ]
            keys = [transposed_keys(k) for k in heads[0::2]]
            groups.append(WidthGroup(keys, [v.contiguous() for v in heads[1::2]], mask))
        return groups

    def step(self, cohorts: Sequence[Cohort]) -> Sequence[torch.Tensor]:
        """One decoder position for every row of every cohort; returns each cohort's target-side logits.

        The linear layers see all rows at once (per-row int8 keeps a row's result independent of
        the others); self-attention runs per cohort over its own cache, to which this position's
        keys/values are appended, and cross-attention per cohort over its own encoder memory.
        """
        sizes = [int(cohort.tokens.shape[0]) for cohort in cohorts]
        tokens = _joined([cohort.tokens for cohort in cohorts])
        if len(cohorts) == 1:
            position_embedding = self.positions[cohorts[0].generated : cohorts[0].generated + 1]
        else:
            positions = torch.cat(
                [torch.full((n,), c.generated) for n, c in zip(sizes, cohorts, strict=True)]
            )
            position_embedding = self.positions[positions][:, None]
        hidden = self.embed_tokens(tokens[:, None]) * self.embed_scale + position_embedding
        for index, layer in enumerate(self.steps):
            shape = (len(tokens), 1, self.heads, -1)
            query, key, value = (
                _split(p.reshape(shape).transpose(1, 2), sizes) for p in layer.self_qkv(hidden)
            )
            attended = _joined(
                [
                    _self_attend(cohort, index, *qkv, scale=layer.self_scale)
                    for cohort, *qkv in zip(cohorts, query, key, value, strict=True)
                ]
            )
            attended = attended.reshape(len(tokens), 1, -1)
            hidden = layer.self_norm(hidden + layer.self_out(attended))

            # Cross-attention: a sentence's beams are query positions over its one copy of the keys.
            queries = _split(layer.cross_query(hidden), sizes)
            attended = _joined(
                [
                    cohort.cross.attend(
                        index, _by_sentence(query, cohort, self.heads), layer.cross_scale
                    ).reshape(len(query), 1, -1)
                    for cohort, query in zip(cohorts, queries, strict=True)
                ]
            )
            hidden = layer.cross_norm(hidden + layer.cross_out(attended))

            hidden = layer.final_norm(hidden + layer.fc2(layer.activation(layer.fc1(hidden))))
        logits: torch.Tensor = self.output(hidden)[:, 0].float()
        return _split(logits, sizes)


def _self_attend(
    cohort: Cohort, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, scale: float
) -> torch.Tensor:
    if not cohort.generated:
        cohort.cache.append(LayerCache(value))
    return attend(query, *cohort.cache[layer].append(key, value), None, scale)


def _by_sentence(query: torch.Tensor, cohort: Cohort, heads: int) -> torch.Tensor:
    """(rows, 1, d) -> (sentences, heads, beams, head dim): a sentence's beams as query positions."""
    beams = query.shape[0] // cohort.sentences
    return query.view(cohort.sentences, beams, heads, -1).transpose(1, 2)


def _split(tensor: torch.Tensor, sizes: Sequence[int]) -> Sequence[torch.Tensor]:
    return [tensor] if len(sizes) == 1 else torch.split(tensor, list(sizes))


def _joined(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(list(parts))


def _fast(model: Any, tokenizer: Any) -> FastDecoder:
    bad_words = [i for ids in (model.generation_config.bad_words_ids or []) for i in ids]
    ids = target_token_ids(tokenizer, excluded=[tokenizer.pad_token_id, *bad_words])
    output = TargetOutputLayer(model.lm_head, model.final_logits_bias, ids)
    return FastDecoder(model, output, SearchRules.of(model.generation_config))


def _generate(model: Any, tokenizer: Any) -> GenerateDecoder:
    return GenerateDecoder(model, SearchRules.of(model.generation_config))


# The registry: one builder per name the yaml's `decoder:` accepts (handler_config.DECODER_NAMES).
DECODERS: dict[DecoderName, Callable[[Any, Any], Decoder]] = {"fast": _fast, "generate": _generate}


def make_decoder(name: DecoderName, model: Any, tokenizer: Any) -> Decoder:
    """The one place the decoder is chosen (at load time, from the yaml's `decoder:`).

    The model is left whole: a fast decoder over int8 layers holds copies of some of them, and
    only release_copied_layers() (the server's load) frees the originals.
    """
    if name not in DECODERS:
        raise ValueError(f"unknown decoder {name!r}: use one of {list(DECODERS)}")
    return DECODERS[name](model, tokenizer)


def release_copied_layers(model: Any, decoder: Decoder) -> int:
    """Free the int8 layers a fast decoder holds its own copies of; return how many were released.

    The target-side output layer and the fused projections are new int8 tensors, so keeping the
    originals would hold those weights twice. fp32 layers are shared, not copied: nothing to free.
    Afterwards the model cannot run generate() or forward() (a Released layer says why).
    """
    if not isinstance(decoder, FastDecoder) or not isinstance(model.lm_head, RowInt8Linear):
        return 0
    model.lm_head = Released("the full int8 output layer")
    released = 1
    for layer in model.model.encoder.layers:  # PackedEncoder's fused q/k/v
        for name in ("q_proj", "k_proj", "v_proj"):
            setattr(layer.self_attn, name, Released(f"the encoder's int8 {name}"))
            released += 1
    for layer in decoder.layers:
        for attention, names in (
            (layer.self_attn, ("q_proj", "k_proj", "v_proj")),
            (layer.encoder_attn, ("k_proj", "v_proj")),
        ):
            for name in names:
                setattr(attention, name, Released(f"the decoder's int8 {name}"))
                released += 1
    return released


class Released(nn.Module):
    """Stands where an int8 layer was that FastDecoder replaced with its own copy (decoder: fast)."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        raise RuntimeError(
            f"{self.what} was released at load (decoder: fast); "
            "load with decoder: generate to call model.generate() or model()"
        )
