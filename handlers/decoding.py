"""Decoders: token ids in, generated token ids out. One is picked at load time (`decoder:` in the yaml).

- `GenerateDecoder` calls transformers' `generate()`: the reference, kept to compare against.
- `FastDecoder` runs our own greedy and beam-search loops over the MarianMT modules and gives
  the ids `generate()` gives (with the output restricted to the target-side vocabulary), doing
  less work: it scores only the ~32k target-side rows of the output layer, drops sentences as
  they finish, keeps the encoder output and cross-attention keys/values once per sentence (the
  beams of a sentence attend to them together, as extra query positions) instead of once per
  beam, and reorders only the self-attention cache, which differs per beam. Every row keeps its
  own min/max new tokens, so a sentence decodes as it would alone.

The search follows `generate()`'s rules step for step: log-softmax, then min-new-tokens (eos
banned) and forced eos at the last position; top 2 x beams candidates; finished hypotheses
scored by length penalty; early stopping as `generation_config.early_stopping` says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from handlers.batching import padded_width
from handlers.cross_attention import CrossMemory, WidthGroup
from handlers.projections import Projections
from handlers.row_int8 import RowInt8Linear
from handlers.vocabulary import TargetOutputLayer, target_token_ids

NEG = -1.0e9  # generate()'s "never pick this" score, added the same way so sums round the same
KeyValues = tuple[torch.Tensor, torch.Tensor]
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


class Decoder(Protocol):
    name: str

    def decode(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, limits: Sequence[RowLimits], beams: int
    ) -> list[list[int]]:
        """Generated ids per row: decoder start left out, eos kept where one was produced."""
        ...


class GenerateDecoder:
    """transformers' generate() on the padded unit: one max/min for all rows, each row then cut to its cap."""

    name = "generate"

    def __init__(self, model: Any, rules: SearchRules) -> None:
        self.model = model
        self.rules = rules

    def decode(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, limits: Sequence[RowLimits], beams: int
    ) -> list[list[int]]:
        kwargs = {"max_new_tokens": max(limit.max_new_tokens for limit in limits), "num_beams": beams}
        if (minimum := min(limit.min_new_tokens for limit in limits)) > 0:
            kwargs["min_new_tokens"] = minimum
        with torch.inference_mode():
            output = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        return [self._cut(row[1:].tolist(), limit) for row, limit in zip(output, limits, strict=True)]

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
        self.encoder = marian.encoder
        self.layers: list[Any] = list(marian.decoder.layers)
        self.embed_tokens = marian.decoder.embed_tokens
        self.embed_scale = marian.decoder.embed_scale
        self.positions = marian.decoder.embed_positions.weight
        self.heads = self.layers[0].self_attn.num_heads
        attentions = [(layer.self_attn, layer.encoder_attn) for layer in self.layers]
        self.self_qkv = [Projections([a.q_proj, a.k_proj, a.v_proj]) for a, _ in attentions]
        # Every layer's cross-attention keys and values come from the same encoder output.
        self.cross_kv = Projections([p for _, a in attentions for p in (a.k_proj, a.v_proj)])
        self.output = output
        self.rules = rules
        self.eos_column = int((output.ids == rules.eos).nonzero()[0, 0])

    @torch.inference_mode()
    def decode(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, limits: Sequence[RowLimits], beams: int
    ) -> list[list[int]]:
        """Sentences are encoded and attended in groups of one padded width, then put back in order."""
        widths = [padded_width(int(n)) for n in attention_mask.sum(dim=1)]
        if max(widths) > input_ids.shape[1]:
            raise ValueError(f"inputs must be padded to {max(widths)} columns: use translator.pad_batch")
        order = sorted(range(len(widths)), key=widths.__getitem__)
        groups = [
            self._encode(input_ids[members, :width], attention_mask[members, :width])
            for width, members in _runs(order, widths)
        ]
        caps = torch.tensor([limits[i].max_new_tokens for i in order])
        minimums = torch.tensor([limits[i].min_new_tokens for i in order])
        if beams == 1:
            decoded = self._greedy(CrossMemory(groups), caps, minimums)
        else:
            decoded = _BeamSearch(self, CrossMemory(groups), caps, minimums, beams).run()
        results: list[list[int]] = [[] for _ in order]
        for position, index in enumerate(order):
            results[index] = decoded[position]
        return results

    def _encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> WidthGroup:
        encoded = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        sentences, width, _ = encoded.shape
        heads = [p.reshape(sentences, width, self.heads, -1).transpose(1, 2) for p in self.cross_kv(encoded)]
        return WidthGroup(heads[0::2], heads[1::2], attention_mask.bool()[:, None, None, :])

    def step(
        self, tokens: torch.Tensor, position: int, cache: list[KeyValues], cross: CrossMemory
    ) -> torch.Tensor:
        """One decoder position for every row; rows are sentence-major (a sentence's beams adjacent).

        Appends this position's self-attention keys/values to `cache`; returns target-side logits.
        """
        rows = tokens.shape[0]
        beams = rows // cross.sentences
        position_embedding = self.positions[position : position + 1]
        hidden = self.embed_tokens(tokens[:, None]) * self.embed_scale + position_embedding
        for index, layer in enumerate(self.layers):
            attention, shape = layer.self_attn, (rows, 1, self.heads, -1)
            query, key, value = (p.reshape(shape).transpose(1, 2) for p in self.self_qkv[index](hidden))
            if position:
                key = torch.cat([cache[index][0], key], dim=-2)
                value = torch.cat([cache[index][1], value], dim=-2)
                cache[index] = (key, value)
            else:
                cache.append((key, value))
            attended = F.scaled_dot_product_attention(query, key, value, scale=attention.scaling)
            attended = attended.transpose(1, 2).contiguous().reshape(rows, 1, -1)
            hidden = layer.self_attn_layer_norm(hidden + attention.out_proj(attended))

            # Cross-attention: a sentence's beams are query positions over its one copy of the keys.
            attention = layer.encoder_attn
            query = attention.q_proj(hidden).view(-1, beams, self.heads, attention.head_dim).transpose(1, 2)
            attended = cross.attend(index, query, attention.scaling)
            attended = attended.transpose(1, 2).reshape(rows, 1, -1)
            hidden = layer.encoder_attn_layer_norm(hidden + attention.out_proj(attended))

            feed_forward = layer.fc2(layer.activation_fn(layer.fc1(hidden)))
            hidden = layer.final_layer_norm(hidden + feed_forward)
        logits: torch.Tensor = self.output(hidden)[:, 0].float()
        return logits

    def constrain(
        self, scores: torch.Tensor, generated: int, caps: torch.Tensor, minimums: torch.Tensor
    ) -> None:
        """generate()'s logits processors, in its order, per row: min new tokens, then forced eos."""
        banned = generated < minimums
        if bool(banned.any()):
            scores[banned, self.eos_column] = -math.inf
        if self.rules.forced_eos:
            forced = caps - 1 == generated
            if bool(forced.any()):
                scores[forced] = -math.inf
                scores[forced, self.eos_column] = 0.0

    def _greedy(self, cross: CrossMemory, caps: torch.Tensor, minimums: torch.Tensor) -> list[list[int]]:
        results: list[list[int]] = [[] for _ in range(len(caps))]
        alive = torch.arange(len(caps))
        tokens = torch.full((len(caps),), self.rules.decoder_start, dtype=torch.long)
        cache: list[KeyValues] = []
        generated = 0
        while alive.numel():
            scores = self.step(tokens, generated, cache, cross)
            self.constrain(scores, generated, caps[alive], minimums[alive])
            tokens = self.output.ids[scores.argmax(-1)]
            for row, token in zip(alive.tolist(), tokens.tolist(), strict=True):
                results[row].append(token)
            generated += 1
            finished = (tokens == self.rules.eos) | (caps[alive] <= generated)
            if bool(finished.any()):
                keep = (~finished).nonzero().flatten()
                alive, tokens, cross = alive[keep], tokens[keep], cross.keep(keep)
                cache[:] = [(k.index_select(0, keep), v.index_select(0, keep)) for k, v in cache]
        return results


class _BeamSearch:
    """Beam search over a unit of sentences, each decoded as generate() decodes it alone."""

    def __init__(
        self, decoder: FastDecoder, cross: CrossMemory, caps: torch.Tensor, minimums: torch.Tensor, beams: int
    ) -> None:
        self.decoder, self.cross, self.beams = decoder, cross, beams
        self.rules = decoder.rules
        count, longest = len(caps), int(caps.max())
        self.alive = torch.arange(count)  # original index of each live sentence
        self.caps, self.minimums = caps, minimums
        self.running = torch.empty((count, beams, 0), dtype=torch.long)
        self.running_scores = torch.full((count, beams), NEG)
        self.running_scores[:, 0] = 0.0
        self.finished = torch.full((count, beams, longest), -1, dtype=torch.long)
        self.finished_scores = torch.full((count, beams), NEG)
        self.is_finished = torch.zeros((count, beams), dtype=torch.bool)
        self.improvable = torch.ones(count, dtype=torch.bool)
        self.all_hit = torch.zeros(count, dtype=torch.bool)  # every candidate of the step ended
        self.top_beams = torch.arange(2 * beams) < beams
        self.results: list[list[int]] = [[] for _ in range(count)]

    def run(self) -> list[list[int]]:
        # Position 0: every beam holds the same start token, so one row per sentence is computed.
        tokens = torch.full((len(self.alive),), self.rules.decoder_start, dtype=torch.long)
        cache: list[KeyValues] = []
        generated = 0
        while self.alive.numel():
            scores = self.decoder.step(tokens, generated, cache, self.cross)
            log_probs = F.log_softmax(scores, dim=-1)
            rows_per_sentence = log_probs.shape[0] // len(self.alive)
            caps, minimums = (
                x[self.alive].repeat_interleave(rows_per_sentence) for x in (self.caps, self.minimums)
            )
            self.decoder.constrain(log_probs, generated, caps, minimums)
            log_probs = log_probs.view(len(self.alive), rows_per_sentence, -1)
            origins = self._advance(log_probs.expand(-1, self.beams, -1), generated)
            generated += 1
            keep = self._finish_sentences()
            rows = (keep[:, None] * rows_per_sentence + origins[keep] * (rows_per_sentence > 1)).flatten()
            cache[:] = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in cache]
            tokens = self.running[:, :, -1].flatten()
        return self.results

    def _advance(self, log_probs: torch.Tensor, generated: int) -> torch.Tensor:
        """One step for every live sentence; returns each new running beam's origin beam."""
        sentences, beams, vocab = log_probs.shape
        candidates = (log_probs + self.running_scores[:, :, None]).reshape(sentences, -1)
        top_scores, top_index = torch.topk(candidates, k=2 * beams)
        origin, columns = top_index // vocab, top_index % vocab
        tokens = self.decoder.output.ids[columns]
        sequences = torch.cat([_gather(self.running, origin), tokens[:, :, None]], dim=2)
        hits = (tokens == self.rules.eos) | (self.caps[self.alive] <= generated + 1)[:, None]

        running_scores = top_scores + hits.to(torch.float32) * NEG
        chosen = torch.topk(running_scores, k=beams)[1]
        self.running = _gather(sequences, chosen)
        self.running_scores = _gather(running_scores, chosen)

        scored = top_scores / ((generated + 1) ** self.rules.length_penalty)
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

        self._update_improvable(generated + 1)
        self.all_hit = hits.all(dim=-1)
        return _gather(origin, chosen)

    def _update_improvable(self, generated: int) -> None:
        """generate()'s early-stop heuristic: can a running beam still beat the worst finished one?"""
        if self.rules.early_stopping == "never" and self.rules.length_penalty > 0.0:
            caps = self.caps[self.alive].tolist()
            lengths = torch.tensor([float(cap) ** self.rules.length_penalty for cap in caps])
            best_possible = self.running_scores[:, :1] / lengths[:, None]
        else:
            best_possible = self.running_scores[:, :1] / (generated**self.rules.length_penalty)
        worst_finished = torch.where(
            self.is_finished, torch.min(self.finished_scores, dim=1, keepdim=True)[0], NEG
        )
        self.improvable &= torch.any(best_possible > worst_finished, dim=-1)

    def _finish_sentences(self) -> torch.Tensor:
        """Store the best hypothesis of every sentence that is done; return the rows that go on."""
        done = ~self.improvable | self.all_hit
        if self.rules.early_stopping is True:
            done |= self.is_finished.all(dim=-1)
        for row in done.nonzero().flatten().tolist():
            best = self.finished[row, 0]
            self.results[int(self.alive[row])] = best[best >= 0].tolist()
        keep = (~done).nonzero().flatten()
        if len(keep) < len(self.alive):
            self.alive = self.alive[keep]
            self.cross = self.cross.keep(keep)
            for name in _PER_SENTENCE:
                setattr(self, name, getattr(self, name)[keep])
        return keep


def _runs(order: Sequence[int], widths: Sequence[int]) -> list[tuple[int, list[int]]]:
    """`order` (indices sorted by width) cut into runs of one width: (width, member indices)."""
    runs: list[tuple[int, list[int]]] = []
    for index in order:
        if runs and runs[-1][0] == widths[index]:
            runs[-1][1].append(index)
        else:
            runs.append((widths[index], [index]))
    return runs


def _gather(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """tensor[s, index[s, j], ...] for every sentence s: picks beams (dim 1) per sentence."""
    expanded = index.reshape(*index.shape, *([1] * (tensor.dim() - 2)))
    return torch.take_along_dim(tensor, expanded, dim=1)


def make_decoder(name: str, model: Any, tokenizer: Any) -> Decoder:
    """The one place the decoder is chosen (at load time, from the yaml's `decoder:`)."""
    rules = SearchRules.of(model.generation_config)
    if name == "generate":
        return GenerateDecoder(model, rules)
    if name != "fast":
        raise ValueError(f"unknown decoder {name!r}: use 'fast' or 'generate'")
    bad_words = [i for ids in (model.generation_config.bad_words_ids or []) for i in ids]
    ids = target_token_ids(tokenizer, excluded=[tokenizer.pad_token_id, *bad_words])
    output = TargetOutputLayer(model.lm_head, model.final_logits_bias, ids)
    decoder = FastDecoder(model, output, rules)
    if isinstance(model.lm_head, RowInt8Linear):
        # int8 layers the decoder now holds its own copies of (the target-side head, fused
        # projections) are released, so no weight is kept twice. fp32 ones are shared, not copied.
        model.lm_head = Released("the full int8 output layer")
        for layer in decoder.layers:
            for attention, names in (
                (layer.self_attn, ("q_proj", "k_proj", "v_proj")),
                (layer.encoder_attn, ("k_proj", "v_proj")),
            ):
                for name in names:
                    setattr(attention, name, Released(f"the decoder's int8 {name}"))
    return decoder


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
