/* Our C kernels, each standing for a few torch calls on the decoder's hot path and giving their
   results exactly. handlers/model/native.py compiles this one file once per instruction-set path
   (generic x86-64 or any other CPU, AVX2+FMA, AVX-VNNI, AVX-512 VNNI), ahead of time, into one
   library whose functions carry the path's name (map_rows_avx2, ...), and picks a path from CPUID
   at run time; without the library the torch calls run instead.

   map_rows, restore_rows: the element-wise work around every per-row int8 matmul
   (handlers/model/row_int8.py), ten torch calls per layer (amin, amax, sub, clamp, sub, div before
   fbgemm; mul, add, addcmul after it), here one pass each side. Every element goes through the
   same IEEE operations in the same order as those calls, with a fused multiply-add only where
   addcmul_ has one (built with -ffp-contract=off): the same bits on every path
   (tests/unit/test_row_int8_kernels.py).

   top_k_rows: a beam's per-row top-k over the vocabulary, torch.topk's answer where no values tie,
   and a "not mine" for a row where they might (tests/unit/test_top_k.py). log_softmax_top_k_rows:
   torch's log_softmax of each row, in place, then the same top-k (tests/unit/test_log_softmax.py).
   beam_extend: a beam search's step for a cohort's sentences (tests/unit/test_beam_extend.py).
   move_rows: its reorder of the self-attention cache (tests/unit/test_self_attention_cache.py).
   attend: every attention call, in an order of our own (tests/unit/test_attention.py). */

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Every exported function is NAME_PATH, PATH being this object's instruction-set path (-DKERNEL_PATH). */
#ifndef KERNEL_PATH
#define KERNEL_PATH generic
#endif
#define JOIN_(name, path) name##_##path
#define JOIN(name, path) JOIN_(name, path)
#define EXPORT(name) JOIN(name, KERNEL_PATH)

/* GCC's vector extension: eight floats, compiled to what the path's flags offer (SSE2 up to AVX-512). */
typedef float floats8 __attribute__((vector_size(32)));
typedef int32_t ints8 __attribute__((vector_size(32)));

static inline floats8 pick(ints8 mask, floats8 yes, floats8 no) {
    return (floats8)(((ints8)yes & mask) | ((ints8)no & ~mask));
}

/* The columns c..cols-1 a vector did not take, into the least, the greatest and the NaN flag. */
static void range_tail(const float *row, int64_t c, int64_t cols, float *l, float *h, int *any_nan) {
    for (; c < cols; c++) {
        float v = row[c];
        *any_nan |= v != v;
        *l = v < *l ? v : *l;
        *h = v > *h ? v : *h;
    }
}

/* low = the least and span = max(greatest - least, FLT_MIN); both NaN where the row held a NaN. */
static void store_range(float l, float h, int any_nan, float *low, float *span) {
    if (any_nan) {
        l = h = __builtin_nanf("");
    }
    float s = h - l;
    if (!(s != s) && s < FLT_MIN) {
        s = FLT_MIN;
    }
    *low = l;
    *span = s;
}

/* row_range's reference: one accumulator of eight lanes, each lane keeping the first of equal
   values it meets, the lanes then taken in order: one chain of dependent compares. row_range below
   runs four chains and gives these bits. */
static void row_range_one_chain(const float *row, int64_t cols, float *low, float *span) {
    floats8 lo, hi;
    ints8 nan = {0};
    for (int j = 0; j < 8; j++) {
        lo[j] = hi[j] = row[0];
    }
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
        floats8 v;
        memcpy(&v, row + c, sizeof v);
        nan |= v != v;
        lo = pick(v < lo, v, lo);
        hi = pick(v > hi, v, hi);
    }
    float l = lo[0], h = hi[0];
    int any_nan = 0;
    for (int j = 0; j < 8; j++) {
        l = lo[j] < l ? lo[j] : l;
        h = hi[j] > h ? hi[j] : h;
        any_nan |= nan[j];
    }
    range_tail(row, c, cols, &l, &h, &any_nan);
    store_range(l, h, any_nan, low, span);
}

/* One row's low = min and span = max(max - min, FLT_MIN); a NaN anywhere makes both NaN, as amin/amax do.
   Four accumulators, so that four compares are in flight (1.4% of a beam-4 step went to the one
   chain). Equal floats have the same bits but for zeros, so the minimum and maximum found in any
   order are row_range_one_chain's, except a zero of either sign: that row is taken again by it. */
static void row_range(const float *row, int64_t cols, float *low, float *span) {
    if (cols < 32) {
        row_range_one_chain(row, cols, low, span);
        return;
    }
    floats8 lo[4], hi[4];
    ints8 nan = {0};
    for (int a = 0; a < 4; a++) {
        memcpy(&lo[a], row + 8 * a, sizeof lo[a]);
        hi[a] = lo[a];
    }
    int64_t c = 0;
    for (; c + 32 <= cols; c += 32) {
        for (int a = 0; a < 4; a++) {
            floats8 v;
            memcpy(&v, row + c + 8 * a, sizeof v);
            nan |= v != v;
            lo[a] = pick(v < lo[a], v, lo[a]);
            hi[a] = pick(v > hi[a], v, hi[a]);
        }
    }
    float l = lo[0][0], h = hi[0][0];
    int any_nan = 0;
    for (int j = 0; j < 8; j++) {
        any_nan |= nan[j];
    }
    for (int a = 0; a < 4; a++) {
        for (int j = 0; j < 8; j++) {
            l = lo[a][j] < l ? lo[a][j] : l;
            h = hi[a][j] > h ? hi[a][j] : h;
        }
    }
    range_tail(row, c, cols, &l, &h, &any_nan);
    if (!any_nan && (l == 0.0f || h == 0.0f)) {
        row_range_one_chain(row, cols, low, span);
        return;
    }
    store_range(l, h, any_nan, low, span);
}

/* Row r of x (rows x cols, contiguous): low[r] and span[r] (row_range), unit = (x - low) / span. */
void EXPORT(map_rows)(const float *x, int64_t rows, int64_t cols, float *unit, float *low, float *span) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        float *out = unit + r * cols;
        row_range(row, cols, low + r, span + r);
        const float l = low[r], s = span[r];
        for (int64_t c = 0; c < cols; c++) {
            out[c] = (row[c] - l) / s;
        }
    }
}

/* out = low * row_sums (+ bias) + product * span, per row, in that order (bias may be NULL); the last
   step is one fused multiply-add, as torch's addcmul_ does it on AVX2 and AVX-512. */
void EXPORT(restore_rows)(const float *product, int64_t rows, int64_t cols, const float *low, const float *span,
                  const float *row_sums, const float *bias, float *out) {
    for (int64_t r = 0; r < rows; r++) {
        const float *p = product + r * cols;
        float *o = out + r * cols;
        const float l = low[r], s = span[r];
        if (bias) {
            for (int64_t c = 0; c < cols; c++) {
                float v = l * row_sums[c];
                v = v + bias[c];
                o[c] = fmaf(p[c], s, v);
            }
        } else {
            for (int64_t c = 0; c < cols; c++) {
                float v = l * row_sums[c];
                o[c] = fmaf(p[c], s, v);
            }
        }
    }
}

/* Insert (v, column) into the descending list top[0..*filled) of at most k; returns 1 if v equals an
   entry already there (the order of equal values is torch.topk's to decide, not ours). */
static int insert(float *top, int64_t *columns, int64_t *filled, int64_t k, float v, int64_t column) {
    int64_t at = *filled < k ? *filled : k - 1;
    int tie = 0;
    while (at > 0 && !(top[at - 1] > v)) {
        tie |= top[at - 1] == v;
        if (at < k) {
            top[at] = top[at - 1];
            columns[at] = columns[at - 1];
        }
        at--;
    }
    tie |= at > 0 && top[at - 1] == v;
    top[at] = v;
    columns[at] = column;
    if (*filled < k) {
        (*filled)++;
    }
    return tie;
}

/* Per row of values (rows x cols, contiguous, k <= cols): its k largest, best first, and their
   columns, as torch.topk(largest=True, sorted=True) gives them when no two of the values it
   compares are equal. A row that holds a NaN, two equal values among its k best, one equal to its
   k-th best, or a k-th best of -inf (a forced eos) is marked in `undecided`: the order torch.topk
   gives equal values is its own, so the caller asks torch.topk for those rows. Returns how many.
   top_k_row is one row's scan: 1 where the row is undecided. */
static int top_k_row(const float *row, int64_t cols, int64_t k, float *t, int64_t *c) {
    int undecided = 0;
    int64_t filled = 0, i = 0;
    for (; i < k; i++) {
        undecided |= row[i] != row[i];
        undecided |= insert(t, c, &filled, k, row[i], i);
    }
    float least = t[k - 1];
    floats8 bar;
    for (int j = 0; j < 8; j++) {
        bar[j] = least;
    }
    for (; i + 8 <= cols; i += 8) {
        floats8 v;
        memcpy(&v, row + i, sizeof v);
        ints8 hit = (v >= bar) | (v != v); /* better, as good (a tie) or NaN: rare once filled */
        int64_t lanes[4];
        memcpy(lanes, &hit, sizeof lanes);
        if (!(lanes[0] | lanes[1] | lanes[2] | lanes[3])) {
            continue;
        }
        for (int j = 0; j < 8; j++) {
            float x = v[j];
            if (x != x || x == least) {
                undecided = 1;
            } else if (x > least) {
                undecided |= insert(t, c, &filled, k, x, i + j);
                least = t[k - 1];
            }
        }
        for (int j = 0; j < 8; j++) {
            bar[j] = least;
        }
    }
    for (; i < cols; i++) {
        float x = row[i];
        if (x != x || x == least) {
            undecided = 1;
        } else if (x > least) {
            undecided |= insert(t, c, &filled, k, x, i);
            least = t[k - 1];
        }
    }
    undecided |= least == -__builtin_inff();
    return undecided;
}

int64_t EXPORT(top_k_rows)(const float *values, int64_t rows, int64_t cols, int64_t k, float *top, int64_t *columns,
                           uint8_t *undecided_rows) {
    int64_t count = 0;
    for (int64_t r = 0; r < rows; r++) {
        undecided_rows[r] = (uint8_t)top_k_row(values + r * cols, cols, k, top + r * k, columns + r * k);
        count += undecided_rows[r];
    }
    return count;
}

/* top_k_row's scan, fed a vector at a time by a pass that has the values in registers
   (log_softmax_row's last): the caller compares each vector with scan_bar and hands over only the
   lanes at or above it or NaN (_CMP_NLT_UQ); scan_hits looks at each with top_k_row's rules (the
   first k taken as they come, then ties and NaNs mark the row undecided), so the answer and the
   undecided rows are top_k_row's. Handing it a lane below the bar changes nothing. */
typedef struct {
    float *top;
    int64_t *columns, filled, k;
    int undecided;
} scan;

static float scan_bar(const scan *s) { return s->filled < s->k ? -__builtin_inff() : s->top[s->k - 1]; }

/* Lanes `hits` (bit j: values[j], column first + j). */
static void scan_hits(scan *s, const float *values, int64_t first, uint32_t hits) {
    for (; hits; hits &= hits - 1) {
        const int j = __builtin_ctz(hits);
        const float x = values[j];
        if (x != x || (s->filled == s->k && x == s->top[s->k - 1])) {
            s->undecided = 1;
        } else if (s->filled < s->k || x > s->top[s->k - 1]) {
            s->undecided |= insert(s->top, s->columns, &s->filled, s->k, x, first + j);
        }
    }
}

/* 1 where the row is undecided: a NaN, a tie, or a k-th best of -inf (a forced eos). */
static int scan_end(const scan *s) {
    return s->undecided || s->filled < s->k || s->top[s->k - 1] == -__builtin_inff();
}

/* ---- move_rows: a beam search's reorder of one self-attention cache buffer, in place ----

   Row destinations[i] takes the filled part of row sources[i] (n pairs, destinations distinct). A row
   is `segments` runs of `length` floats, `stride` floats apart (keys transposed: a run per head and
   dim; values: a run per head). torch's way (index_select, then index_copy_) copied every moved row
   twice and whole, to the buffer's capacity; here a source that is also a destination is first
   copied aside into `scratch` (n x segments x length floats), and every other source, which no pair
   writes, is copied once, straight to its destination. */
static int overwritten(int64_t row, const int64_t *destinations, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        if (destinations[j] == row) {
            return 1;
        }
    }
    return 0;
}

static void copy_runs(float *to, int64_t to_stride, const float *from, int64_t from_stride, int64_t segments,
                      int64_t length) {
    for (int64_t r = 0; r < segments; r++) {
        memcpy(to + r * to_stride, from + r * from_stride, (size_t)length * sizeof(float));
    }
}

void EXPORT(move_rows)(float *buffer, int64_t segments, int64_t stride, int64_t length, const int64_t *destinations,
                       const int64_t *sources, int64_t n, float *scratch) {
    const int64_t row = segments * stride, aside = segments * length;
    for (int64_t i = 0; i < n; i++) {
        if (overwritten(sources[i], destinations, n)) {
            copy_runs(scratch + i * aside, length, buffer + sources[i] * row, stride, segments, length);
        }
    }
    for (int64_t i = 0; i < n; i++) {
        float *to = buffer + destinations[i] * row;
        if (overwritten(sources[i], destinations, n)) {
            copy_runs(to, stride, scratch + i * aside, length, segments, length);
        } else {
            copy_runs(to, stride, buffer + sources[i] * row, stride, segments, length);
        }
    }
}

/* ---- beam_extend: one beam-search step for a cohort's sentences (handlers/model/search.py) ----

   BeamCohort._extend as one pass per sentence, where torch took three topk calls and some thirty
   small operators per cohort and step (a quarter of the batch job's time went to its bookkeeping).
   Every float comes from the operation torch makes, in its order: a sum of two floats, a division
   by the length penalty's power (Python's pow, rounded to float as torch rounds a Python scalar),
   and the "never pick this" penalties added as torch adds a bool times -1e9, which is -0.0f where
   the bool is false (that keeps the sign of a zero). Where equal values would let torch.topk's own
   order decide something that counts, it returns 1 and the caller runs torch's operators for the
   step; nothing it wrote is kept (tests/unit/test_beam_extend.py). */

#define NEVER (-1.0e9f) /* search.py's NEG */
#define MOST_BEAMS 32

typedef struct {
    float value;
    int64_t index;
} ranked;

/* Best first (insertion sort: a sentence has at most 2 x beams x beams entries). */
static void rank(ranked *entries, int64_t n) {
    for (int64_t i = 1; i < n; i++) {
        ranked e = entries[i];
        int64_t j = i;
        for (; j > 0 && e.value > entries[j - 1].value; j--) {
            entries[j] = entries[j - 1];
        }
        entries[j] = e;
    }
}

/* Whether ranked entries' first k are torch.topk's whatever order it gives equal values: no NaN,
   and every value among the first k + 1 that equals a neighbour is one whose entries are all
   `free` (their identity counts for nothing) and of one bit pattern. `free` may be NULL (none is). */
static int decided(const ranked *entries, int64_t n, int64_t k, const uint8_t *free) {
    for (int64_t i = 0; i < n; i++) {
        if (entries[i].value != entries[i].value) {
            return 0;
        }
    }
    for (int64_t i = 1; i < n && i <= k; i++) {
        const float v = entries[i].value;
        if (entries[i - 1].value > v) {
            continue;
        }
        for (int64_t j = 0; j < n; j++) {
            if (entries[j].value == v && (!free || !free[entries[j].index] || memcmp(&entries[j].value, &v, sizeof v))) {
                return 0;
            }
        }
    }
    return 1;
}

/* Per sentence: `rows` (1 or beams) rows of its best 2 x beams log-probabilities and their columns,
   its running beams (generated ids each) and their scores, its cap, and its finished hypotheses
   (width ids each, -1 after the end); writes the step's running beams (generated + 1 ids), their
   scores and origin beams, the finished hypotheses, and whether the sentence can still improve
   and whether all its candidates ended. */
int64_t EXPORT(beam_extend)(int64_t sentences, int64_t beams, int64_t rows, const float *row_scores,
                            const int64_t *row_columns, const int64_t *ids, int64_t eos, int64_t generated,
                            const int64_t *running, const float *running_scores, const int64_t *caps,
                            double length_penalty, int64_t penalty_by_cap, int64_t stop_when_full, int64_t width,
                            const int64_t *finished, const float *finished_scores, const uint8_t *is_finished,
                            const uint8_t *improvable, int64_t *out_running, float *out_running_scores,
                            int64_t *out_origins, int64_t *out_finished, float *out_finished_scores,
                            uint8_t *out_is_finished, uint8_t *out_improvable, uint8_t *out_all_hit) {
    const int64_t wide = 2 * beams, length = generated + 1;
    if (beams > MOST_BEAMS || length > width) {
        return 1;
    }
    const float divisor = (float)pow((double)length, length_penalty);
    for (int64_t s = 0; s < sentences; s++) {
        ranked candidates[2 * MOST_BEAMS * MOST_BEAMS], chosen[2 * MOST_BEAMS], merged[3 * MOST_BEAMS];
        int64_t token[2 * MOST_BEAMS], origin[2 * MOST_BEAMS];
        uint8_t hit[2 * MOST_BEAMS], unfinished[3 * MOST_BEAMS], every_hit = 1;
        for (int64_t b = 0; b < beams; b++) {
            const float *row = row_scores + (s * rows + (rows > 1 ? b : 0)) * wide;
            for (int64_t c = 0; c < wide; c++) {
                candidates[b * wide + c] = (ranked){row[c] + running_scores[s * beams + b], b * wide + c};
            }
        }
        rank(candidates, beams * wide);
        /* At its cap every candidate ends and so does the sentence: its running beams are dropped,
           and only the first `beams` candidates (its new finished ones) count. */
        const int capped = caps[s] <= length;
        if (!decided(candidates, beams * wide, capped ? beams : wide, NULL)) {
            return 1;
        }
        for (int64_t i = 0; i < wide; i++) {
            const int64_t at = candidates[i].index;
            origin[i] = at / wide;
            token[i] = ids[row_columns[(s * rows + (rows > 1 ? origin[i] : 0)) * wide + at % wide]];
            hit[i] = token[i] == eos || capped;
            every_hit &= hit[i];
            chosen[i] = (ranked){candidates[i].value + (hit[i] ? NEVER : -0.0f), i};
        }
        rank(chosen, wide);
        if (!capped && !decided(chosen, wide, beams, NULL)) {
            return 1;
        }
        for (int64_t b = 0; b < beams; b++) {
            const int64_t i = chosen[b].index, at = s * beams + b;
            memcpy(out_running + at * length, running + (s * beams + origin[i]) * generated,
                   (size_t)generated * sizeof *running);
            out_running[at * length + generated] = token[i];
            out_running_scores[at] = chosen[b].value;
            out_origins[at] = origin[i];
        }
        /* The finished hypotheses so far, then this step's candidates scored by their length. */
        int all_finished = 1;
        for (int64_t b = 0; b < beams; b++) {
            all_finished &= is_finished[s * beams + b] != 0;
            merged[b] = (ranked){finished_scores[s * beams + b], b};
            unfinished[b] = !is_finished[s * beams + b];
        }
        const float full = all_finished && stop_when_full ? NEVER : -0.0f;
        const float stuck = improvable[s] ? -0.0f : NEVER;
        for (int64_t i = 0; i < wide; i++) {
            const int just = hit[i] && i < beams;
            const float score = candidates[i].value / divisor + full + stuck + (just ? -0.0f : NEVER);
            merged[beams + i] = (ranked){score, beams + i};
            unfinished[beams + i] = !just;
        }
        rank(merged, 3 * beams);
        if (!decided(merged, 3 * beams, beams, unfinished)) {
            return 1;
        }
        float worst = INFINITY;
        for (int64_t b = 0; b < beams; b++) {
            const int64_t j = merged[b].index, at = s * beams + b;
            int64_t *to = out_finished + at * width;
            if (j < beams) {
                memcpy(to, finished + (s * beams + j) * width, (size_t)width * sizeof *to);
            } else {
                const int64_t i = j - beams;
                memcpy(to, running + (s * beams + origin[i]) * generated, (size_t)generated * sizeof *to);
                to[generated] = token[i];
                for (int64_t p = length; p < width; p++) {
                    to[p] = -1;
                }
            }
            out_finished_scores[at] = merged[b].value;
            out_is_finished[at] = !unfinished[j];
            worst = merged[b].value < worst ? merged[b].value : worst;
        }
        /* generate()'s early stop: can the best running beam still beat the worst finished one? */
        const float by = penalty_by_cap ? (float)pow((double)caps[s], length_penalty) : divisor;
        const float best_possible = out_running_scores[s * beams] / by;
        int better = 0;
        for (int64_t b = 0; b < beams; b++) {
            better |= best_possible > (out_is_finished[s * beams + b] ? worst : NEVER);
        }
        out_improvable[s] = improvable[s] && better;
        out_all_hit[s] = every_hit;
    }
    return 0;
}

/* ---- int8_linear: a whole per-row int8 layer in one call, fbgemm's bits without fbgemm ----

   fbgemm's matmul, told that every row spans [0, 1] (scale 1/127, zero point 0), does three things
   to a mapped row u: it quantizes it, q = nearbyint(u * (1.0f / scale)), 0..127 since u <= 1; it
   multiplies q by the int8 weights, exactly, in int32; and it dequantizes each sum with one float
   product, p = (float)sum * (scale * weight scale). int8_linear does the same, with map_rows before
   it and restore_rows after it fused in, so no float `unit` or `product` matrix is written and read
   back. The int32 sums are exact in any order (q <= 127 and |w| <= 128 keep vpmaddubsw's 16-bit
   pair sums from saturating), and every float operation is the one torch's path makes, in its
   order: the same bits (tests/unit/test_int8_linear.py compares them with fbgemm's).

   Weights are in pack order: blocks of 16 output columns, in each the 16 columns' 4 consecutive
   inputs side by side ([N/16][K/4][16][4] int8), so a block is read as one stream, 8 columns of
   4 inputs are one 32-byte vector and all 16 one 64-byte vector. N must be a multiple of 16 and K
   of 4 (the caller checks).

   The paths differ only in how they form the exact int32 sums: AVX2's vpmaddubsw + vpmaddwd pair
   (32 multiply-adds), AVX-VNNI's vpdpbusd on 256 bits (32 in one instruction), AVX-512 VNNI's on
   512 bits (64) and AMX's tdpbusd on 16 x 64 x 16 tiles. Every float operation after the sums is
   finish8's on every path: the same bits. */

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* The weight tiles ask for their lines this far ahead (into the next 16-column blocks): a decode step
   streams 37 MB of int8 weights, more than L3, and perf put a third of the tile loop's samples on
   the first vpdpbusd after each weight load. Prefetches never fault past the end and change no sum.
   8 KB ahead: greedy batches of 16 1.11x, beam 4 1.06x (AMD EPYC Zen 4, 2026-11-29, docs/INT8.md).
   A second request 32 KB ahead into L2 keeps memory busy while a block's later row tiles reread it
   from L1: greedy batches of 16 1.10-1.12x more, beam 4 1.09x (Zen 4, 2026-12-07, docs/INT8.md). */
#define PREFETCH_BYTES 8192
#define PREFETCH_L2_BYTES 32768

/* Rows of x mapped as map_rows maps them, then quantized as fbgemm quantizes: q = nearbyint(u * inverse),
   clamped to 0..255 (a NaN row gives 0s: its low and span are NaN, so its outputs are NaN anyway). */
static void map_quantize(const float *x, int64_t rows, int64_t cols, float inverse, uint8_t *q, float *low,
                         float *span) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        uint8_t *out = q + r * cols;
        row_range(row, cols, low + r, span + r);
        const float l = low[r], s = span[r];
        for (int64_t c = 0; c < cols; c++) {
            float t = nearbyintf(((row[c] - l) / s) * inverse);
            out[c] = (uint8_t)(t >= 0.0f ? (t <= 255.0f ? t : 255.0f) : 0.0f);
        }
    }
}

/* 8 columns of the epilogue: p = (float)sum * multiplier; v = low * row_sums (+ bias); out = fma(p, span, v),
   the operations restore_rows makes on fbgemm's p, in its order; then (+ after), the separate add a
   caller would make on the layer's output (the output layer's final_logits_bias), rounded as that. */
static inline void finish8(__m256i sum, const float *multiplier, const float *row_sums, const float *bias,
                           const float *after, float l, float s, float *out) {
    __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(sum), _mm256_loadu_ps(multiplier));
    __m256 v = _mm256_mul_ps(_mm256_set1_ps(l), _mm256_loadu_ps(row_sums));
    if (bias) {
        v = _mm256_add_ps(v, _mm256_loadu_ps(bias));
    }
    __m256 result = _mm256_fmadd_ps(p, _mm256_set1_ps(s), v);
    if (after) {
        result = _mm256_add_ps(result, _mm256_loadu_ps(after));
    }
    _mm256_storeu_ps(out, result);
}

/* Four quantized inputs of a row, as one 32-bit lane to broadcast. */
static inline int32_t quad(const uint8_t *q) {
    int32_t four;
    memcpy(&four, q, sizeof four);
    return four;
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define ROWS_PER_TILE 8

/* acc += the four u8 x s8 products of each 32-bit lane of x and weights, in place. The intrinsic
   (_mm512_dpbusd_epi32) made gcc 12 copy every accumulator out and back around each vpdpbusd: 16
   register moves per 8 vpdpbusd in the tile's loop (AMD EPYC Zen 4, 2026-11-29, perf annotate); in
   place, one layer at 16 rows ran 1.2-1.5x as fast. The same instruction, so the same sums. */
static inline __attribute__((always_inline)) __m512i dpbusd(__m512i acc, __m512i x, __m512i weights) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(weights));
    return acc;
}

/* Rows r0..r0+R-1 (R <= 8) x all 16 columns of a block: one vpdpbusd per row and 4 inputs, then the
   epilogue straight from the registers. (Handing the sums out through an array made gcc 12 clear
   that array with `rep stos` before every tile, 4% of the tile's samples: perf annotate, 2026-12-07.) */
static inline __attribute__((always_inline)) void tile(int R, const uint8_t *q, int64_t r0, int64_t cols,
                                                       const int8_t *w, int64_t n, int64_t c, const float *m,
                                                       const float *rs, const float *b, const float *a,
                                                       const float *low, const float *span, float *out) {
    __m512i acc[ROWS_PER_TILE];
    for (int i = 0; i < R; i++) {
        acc[i] = _mm512_setzero_si512();
    }
    const int64_t quads = cols / 4;
    for (int64_t k = 0; k < quads; k++) {
        __m512i weights = _mm512_loadu_si512((const void *)(w + 64 * k));
        _mm_prefetch((const char *)(w + 64 * k + PREFETCH_BYTES), _MM_HINT_T0);
        _mm_prefetch((const char *)(w + 64 * k + PREFETCH_L2_BYTES), _MM_HINT_T1);
        for (int i = 0; i < R; i++) {
            acc[i] = dpbusd(acc[i], _mm512_set1_epi32(quad(q + (r0 + i) * cols + 4 * k)), weights);
        }
    }
    for (int i = 0; i < R; i++) {
        float *o = out + (r0 + i) * n + c;
        finish8(_mm512_castsi512_si256(acc[i]), m, rs, b, a, low[r0 + i], span[r0 + i], o);
        finish8(_mm512_extracti64x4_epi64(acc[i], 1), m + 8, rs + 8, b ? b + 8 : NULL, a ? a + 8 : NULL,
                low[r0 + i], span[r0 + i], o + 8);
    }
}

static void block(const uint8_t *q, int64_t rows, int64_t cols, const int8_t *w, int64_t n, int64_t c,
                  const float *m, const float *rs, const float *b, const float *a, const float *low, const float *span,
                  float *out) {
    for (int64_t r = 0; r < rows; r += ROWS_PER_TILE) {
        int64_t left = rows - r;
        switch (left >= ROWS_PER_TILE ? ROWS_PER_TILE : (int)left) {
        case 8: tile(8, q, r, cols, w, n, c, m, rs, b, a, low, span, out); break;
        case 7: tile(7, q, r, cols, w, n, c, m, rs, b, a, low, span, out); break;
        case 6: tile(6, q, r, cols, w, n, c, m, rs, b, a, low, span, out); break;
        case 5: tile(5, q, r, cols, w, n, c, m, rs, b, a, low, span, out); break;
        case 4: tile(4, q, r, cols, w, n, c, m, rs, b, a, low, span, out); break;
        case 3: tile(3, q, r, cols, w, n, c, m, rs, b, a, low, span, out); break;
        case 2: tile(2, q, r, cols, w, n, c, m, rs, b, a, low, span, out); break;
        default: tile(1, q, r, cols, w, n, c, m, rs, b, a, low, span, out); break;
        }
    }
}

#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
/* AMX: tdpbusd multiplies a tile of up to 16 rows x 64 quantized inputs (u8) by 64 inputs x 16
   columns of weights (s8, in groups of 4 inputs per column) into 16 x 16 int32 sums. Our pack order
   is already that weight tile: a block's 16 consecutive quads (64 inputs) are 16 rows of 64 bytes,
   1 KB in a row. The same exact int32 sums as every other path, then finish8's floats. Linux hands
   out the tile registers only to a process that asks (arch_prctl), so prepare() asks first. */
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define AMX_PREPARE 1

int EXPORT(prepare)(void) { return (int)syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); }

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* tmm0: R x 16 int32 sums; tmm1: R rows x 64 inputs; tmm2: 16 quads x 16 columns x 4 inputs. */
static void configure(int R) {
    tile_config config;
    memset(&config, 0, sizeof config);
    config.palette = 1;
    config.rows[0] = config.rows[1] = (uint8_t)R;
    config.rows[2] = 16;
    config.colsb[0] = config.colsb[1] = config.colsb[2] = 64;
    _tile_loadconfig(&config);
}

/* Every block for rows r0..r0+R-1 (cols a multiple of 64), one tile configuration for them all. */
static void rows_amx(const uint8_t *q, int64_t r0, int R, int64_t cols, const int8_t *packed, int64_t n,
                     const float *m, const float *rs, const float *b, const float *a, const float *low,
                     const float *span, float *out) {
    int32_t sums[16 * 16] __attribute__((aligned(64)));
    configure(R);
    for (int64_t block = 0; block < n / 16; block++) {
        const int8_t *w = packed + block * 16 * cols;
        const int64_t c = block * 16;
        _tile_zero(0);
        for (int64_t k = 0; k < cols; k += 64) {
            _tile_loadd(1, q + r0 * cols + k, cols);
            _tile_loadd(2, w + 16 * k, 64);
            _tile_dpbusd(0, 1, 2);
        }
        _tile_stored(0, sums, 64);
        for (int i = 0; i < R; i++) {
            float *o = out + (r0 + i) * n + c;
            const float l = low[r0 + i], s = span[r0 + i];
            finish8(_mm256_load_si256((const __m256i *)(sums + 16 * i)), m + c, rs + c, b ? b + c : NULL,
                    a ? a + c : NULL, l, s, o);
            finish8(_mm256_load_si256((const __m256i *)(sums + 16 * i + 8)), m + c + 8, rs + c + 8,
                    b ? b + c + 8 : NULL, a ? a + c + 8 : NULL, l, s, o + 8);
        }
    }
    _tile_release();
}
#endif
#else
/* Rows a tile holds: 2 x ROWS_PER_TILE sums (16 columns each row) in registers, beside the two weight
   vectors, the broadcast row and AVX2's ones (14 of 16 ymm registers). 5 against 4 and 6: the
   fastest or within noise of it at every decoder shape, 1 to 64 rows (AMD EPYC Zen 3, 2026-11-28,
   bench/results/kernels-2026-11-28/tile-study/results.md). */
#ifndef ROWS_PER_TILE
#define ROWS_PER_TILE 5
#endif

/* One 4-input step of 8 columns' exact int32 sums: vpdpbusd where AVX-VNNI has it, else AVX2's pair
   (q <= 127 and |w| <= 128 keep vpmaddubsw's 16-bit pair sums from saturating). */
static inline __m256i dot4(__m256i acc, __m256i x, __m256i weights) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, x, weights);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(x, weights), _mm256_set1_epi16(1)));
#endif
}

/* Rows r0..r0+R-1 x all 16 columns of a block: each weight line is read once per tile and each
   broadcast row serves both halves (always_inline and a constant R keep every sum in a register). */
static inline __attribute__((always_inline)) void tile(int R, const uint8_t *q, int64_t r0, int64_t cols,
                                                       const int8_t *w, __m256i *low_half, __m256i *high_half) {
    __m256i lo[ROWS_PER_TILE], hi[ROWS_PER_TILE];
    for (int i = 0; i < R; i++) {
        lo[i] = hi[i] = _mm256_setzero_si256();
    }
    const int64_t quads = cols / 4;
    for (int64_t k = 0; k < quads; k++) {
        __m256i w0 = _mm256_loadu_si256((const __m256i *)(w + 64 * k));
        __m256i w1 = _mm256_loadu_si256((const __m256i *)(w + 64 * k + 32));
        _mm_prefetch((const char *)(w + 64 * k + PREFETCH_BYTES), _MM_HINT_T0);
        _mm_prefetch((const char *)(w + 64 * k + PREFETCH_L2_BYTES), _MM_HINT_T1);
        for (int i = 0; i < R; i++) {
            __m256i x = _mm256_set1_epi32(quad(q + (r0 + i) * cols + 4 * k));
            lo[i] = dot4(lo[i], x, w0);
            hi[i] = dot4(hi[i], x, w1);
        }
    }
    for (int i = 0; i < R; i++) {
        low_half[i] = lo[i];
        high_half[i] = hi[i];
    }
}

static void block(const uint8_t *q, int64_t rows, int64_t cols, const int8_t *w, int64_t n, int64_t c,
                  const float *m, const float *rs, const float *b, const float *a, const float *low, const float *span,
                  float *out) {
    for (int64_t r = 0; r < rows;) {
        __m256i lo[ROWS_PER_TILE], hi[ROWS_PER_TILE];
        int64_t left = rows - r;
        int R = left >= ROWS_PER_TILE ? ROWS_PER_TILE : (int)left;
        switch (R) {
#if ROWS_PER_TILE >= 6
        case 6: tile(6, q, r, cols, w, lo, hi); break;
#endif
#if ROWS_PER_TILE >= 5
        case 5: tile(5, q, r, cols, w, lo, hi); break;
#endif
        case 4: tile(4, q, r, cols, w, lo, hi); break;
        case 3: tile(3, q, r, cols, w, lo, hi); break;
        case 2: tile(2, q, r, cols, w, lo, hi); break;
        default: tile(1, q, r, cols, w, lo, hi); break;
        }
        for (int i = 0; i < R; i++) {
            float *o = out + (r + i) * n + c;
            finish8(lo[i], m, rs, b, a, low[r + i], span[r + i], o);
            finish8(hi[i], m + 8, rs + 8, b ? b + 8 : NULL, a ? a + 8 : NULL, low[r + i], span[r + i], o + 8);
        }
        r += R;
    }
}
#endif

int EXPORT(int8_linear_built)(void) { return 1; }

/* out (rows x n) = the per-row int8 layer of x (rows x cols), plus `after`: see the comment above. `q`
   (rows x cols bytes) and `low`, `span` (rows floats each) are scratch; `multiplier` has n floats (scale x
   each column's weight scale, as fbgemm makes it); `bias` and `after` (n floats each) may be NULL. */
void EXPORT(int8_linear)(const float *x, int64_t rows, int64_t cols, const int8_t *packed, int64_t n,
                         const float *multiplier, const float *row_sums, const float *bias, const float *after,
                         float inverse, uint8_t *q, float *low, float *span, float *out) {
    map_quantize(x, rows, cols, inverse, q, low, span);
#ifdef AMX_PREPARE
    if (cols % 64 == 0) { /* else AVX-512 VNNI's blocks below: a tile takes 64 inputs at a time */
        for (int64_t r = 0; r < rows; r += 16) {
            rows_amx(q, r, rows - r >= 16 ? 16 : (int)(rows - r), cols, packed, n, multiplier, row_sums, bias, after,
                     low, span, out);
        }
        return;
    }
#endif
    for (int64_t b = 0; b < n / 16; b++) {
        const int64_t c = b * 16;
        block(q, rows, cols, packed + b * 16 * cols, n, c, multiplier + c, row_sums + c, bias ? bias + c : NULL,
              after ? after + c : NULL, low, span, out);
    }
}
#else
/* No AVX2 and FMA in this path: RowInt8Linear keeps fbgemm (handlers.model.int8_linear), never calls this. */
int EXPORT(int8_linear_built)(void) { return 0; }
void EXPORT(int8_linear)(const float *x, int64_t rows, int64_t cols, const int8_t *packed, int64_t n,
                         const float *multiplier, const float *row_sums, const float *bias, const float *after,
                         float inverse, uint8_t *q, float *low, float *span, float *out) {}
#endif

#ifndef AMX_PREPARE
/* What a process must do before this path's first call: nothing, but for AMX (above). 0: ready. */
int EXPORT(prepare)(void) { return 0; }
#endif

/* ---- log_softmax_top_k_rows: a beam step's log-softmax, in place, then each row's top-k ----

   torch's log_softmax over a row (ATen's serial_vec_log_softmax_lastdim_range, torch 2.13) takes the
   row's max (vec::reduce_all with vec::maximum), the sum of exp(x - max) (vec::map_reduce_all: one
   vector accumulator over the row, the tail blended in with Vec::set, then a fixed tree of
   shuffles), log of that sum, and writes (x - max) - log(sum). Done here in the same vector width
   as torch's own kernel on this CPU (16 floats where torch runs AVX-512, 8 where it runs AVX2: the
   caller passes only a matching width), in the same order, with torch's own Sleef exp and log (the
   caller passes their addresses in libtorch): the same bits, which tests/unit/test_log_softmax.py
   checks against torch. The pass that writes the log-probabilities also scans them for the top-k
   (scan_hits), one vector compare each, where torch's way wrote all 64 x 32,000 and read them back
   (and a separate top_k_row pass read them once more). `banned[r]` >= 0 is a column set to -inf
   after the log-softmax (min-new-tokens' eos ban), as the caller would set it. */
#if defined(__AVX512F__)
#define LOG_SOFTMAX_LANES 16
typedef __m512 (*vector_function)(__m512);

static inline __m512 maximum(__m512 a, __m512 b) { /* vec::maximum: NaN if either is (all-ones) */
    __m512 max = _mm512_max_ps(a, b);
    __mmask16 nan = _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(max), _mm512_maskz_set1_epi32(nan, -1)));
}

static inline __m512 load_part(const float *p, int64_t count) { /* Vec::loadu(p, count): zeros after */
    return _mm512_maskz_loadu_ps((__mmask16)((1u << count) - 1), p);
}

static inline __m512 set_part(__m512 a, __m512 b, int64_t count) { /* Vec::set: b's first `count` lanes */
    return _mm512_mask_mov_ps(a, (__mmask16)((1u << count) - 1), b);
}

#define REDUCE_ALL(fun, v)                                                                                      \
    do {                                                                                                        \
        v = fun(v, _mm512_shuffle_f32x4(v, v, 0x4E));                                                           \
        v = fun(v, _mm512_shuffle_f32x4(v, v, 0xB1));                                                           \
        v = fun(v, _mm512_shuffle_ps(v, v, 0x4E));                                                              \
        v = fun(v, _mm512_shuffle_ps(v, v, 0xB1));                                                              \
    } while (0)

static inline __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }

static int log_softmax_row(float *row, int64_t cols, vector_function exp, vector_function log, int64_t banned,
                           scan *best) {
    const int64_t whole = cols - cols % 16;
    __m512 acc = _mm512_loadu_ps(row);
    int64_t d = 16;
    for (; d < whole; d += 16) {
        acc = maximum(acc, _mm512_loadu_ps(row + d));
    }
    if (cols - d > 0) {
        acc = set_part(acc, maximum(acc, load_part(row + d, cols - d)), cols - d);
    }
    REDUCE_ALL(maximum, acc);
    const float max = _mm512_cvtss_f32(acc);
    const __m512 vmax = _mm512_set1_ps(max);
    __m512 sum = exp(_mm512_sub_ps(_mm512_loadu_ps(row), vmax));
    for (d = 16; d < whole; d += 16) {
        sum = _mm512_add_ps(sum, exp(_mm512_sub_ps(_mm512_loadu_ps(row + d), vmax)));
    }
    if (cols - d > 0) {
        __m512 tail = exp(_mm512_sub_ps(load_part(row + d, cols - d), vmax));
        sum = set_part(sum, _mm512_add_ps(sum, tail), cols - d);
    }
    REDUCE_ALL(add, sum);
    const __m512 vlog = _mm512_set1_ps(_mm512_cvtss_f32(log(_mm512_set1_ps(_mm512_cvtss_f32(sum)))));
    __m512 bar = _mm512_set1_ps(scan_bar(best));
    for (d = 0; d < whole; d += 16) {
        __m512 out = _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(row + d), vmax), vlog);
        if (banned >= d && banned < d + 16) {
            out = _mm512_mask_mov_ps(out, (__mmask16)(1u << (banned - d)), _mm512_set1_ps(-__builtin_inff()));
        }
        _mm512_storeu_ps(row + d, out);
        const uint32_t hits = _mm512_cmp_ps_mask(out, bar, _CMP_NLT_UQ);
        if (hits) {
            scan_hits(best, row + d, d, hits);
            bar = _mm512_set1_ps(scan_bar(best));
        }
    }
    const float l = _mm512_cvtss_f32(vlog);
    for (; d < cols; d++) {
        row[d] = d == banned ? -__builtin_inff() : (row[d] - max) - l;
        scan_hits(best, row + d, d, 1);
    }
    return scan_end(best);
}
#elif defined(__AVX2__) && defined(__FMA__)
#define LOG_SOFTMAX_LANES 8
typedef __m256 (*vector_function)(__m256);

static inline __m256 maximum(__m256 a, __m256 b) { /* vec::maximum: NaN if either is (all-ones) */
    return _mm256_or_ps(_mm256_max_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}

static inline __m256i first_lanes(int64_t count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __m256 load_part(const float *p, int64_t count) { /* Vec::loadu(p, count): zeros after */
    return _mm256_maskload_ps(p, first_lanes(count));
}

static inline __m256 set_part(__m256 a, __m256 b, int64_t count) { /* Vec::set: b's first `count` lanes */
    return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(first_lanes(count)));
}

#define REDUCE_ALL(fun, v)                                                                                      \
    do {                                                                                                        \
        v = fun(v, _mm256_permute2f128_ps(v, v, 0x1));                                                          \
        v = fun(v, _mm256_shuffle_ps(v, v, 0x4E));                                                              \
        v = fun(v, _mm256_shuffle_ps(v, v, 0xB1));                                                              \
    } while (0)

static inline __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }

static int log_softmax_row(float *row, int64_t cols, vector_function exp, vector_function log, int64_t banned,
                           scan *best) {
    const int64_t whole = cols - cols % 8;
    __m256 acc = _mm256_loadu_ps(row);
    int64_t d = 8;
    for (; d < whole; d += 8) {
        acc = maximum(acc, _mm256_loadu_ps(row + d));
    }
    if (cols - d > 0) {
        acc = set_part(acc, maximum(acc, load_part(row + d, cols - d)), cols - d);
    }
    REDUCE_ALL(maximum, acc);
    const float max = _mm256_cvtss_f32(acc);
    const __m256 vmax = _mm256_set1_ps(max);
    __m256 sum = exp(_mm256_sub_ps(_mm256_loadu_ps(row), vmax));
    for (d = 8; d < whole; d += 8) {
        sum = _mm256_add_ps(sum, exp(_mm256_sub_ps(_mm256_loadu_ps(row + d), vmax)));
    }
    if (cols - d > 0) {
        __m256 tail = exp(_mm256_sub_ps(load_part(row + d, cols - d), vmax));
        sum = set_part(sum, _mm256_add_ps(sum, tail), cols - d);
    }
    REDUCE_ALL(add, sum);
    const __m256 vlog = _mm256_set1_ps(_mm256_cvtss_f32(log(_mm256_set1_ps(_mm256_cvtss_f32(sum)))));
    __m256 bar = _mm256_set1_ps(scan_bar(best));
    for (d = 0; d < whole; d += 8) {
        __m256 out = _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(row + d), vmax), vlog);
        if (banned >= d && banned < d + 8) {
            out = _mm256_blendv_ps(out, _mm256_set1_ps(-__builtin_inff()),
                                    _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_set1_epi32((int)(banned - d)),
                                                                           _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))));
        }
        _mm256_storeu_ps(row + d, out);
        const uint32_t hits = (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(out, bar, _CMP_NLT_UQ));
        if (hits) {
            scan_hits(best, row + d, d, hits);
            bar = _mm256_set1_ps(scan_bar(best));
        }
    }
    const float l = _mm256_cvtss_f32(vlog);
    for (; d < cols; d++) {
        row[d] = d == banned ? -__builtin_inff() : (row[d] - max) - l;
        scan_hits(best, row + d, d, 1);
    }
    return scan_end(best);
}
#endif

#ifdef LOG_SOFTMAX_LANES
int EXPORT(log_softmax_lanes)(void) { return LOG_SOFTMAX_LANES; }

/* values (rows x cols, cols >= the lanes, k <= cols): each row log-softmaxed in place, `banned` set,
   then top_k_rows' answer for it; returns how many rows are undecided. */
int64_t EXPORT(log_softmax_top_k_rows)(float *values, int64_t rows, int64_t cols, int64_t k, const int64_t *banned,
                                       void *exp, void *log, float *top, int64_t *columns, uint8_t *undecided_rows) {
    int64_t count = 0;
    for (int64_t r = 0; r < rows; r++) {
        float *row = values + r * cols;
        scan best = {top + r * k, columns + r * k, 0, k, 0};
        undecided_rows[r] = (uint8_t)log_softmax_row(row, cols, (vector_function)exp, (vector_function)log, banned[r], &best);
        count += undecided_rows[r];
    }
    return count;
}
#else
/* No vector width here that torch's log_softmax runs: the caller keeps torch's. */
int EXPORT(log_softmax_lanes)(void) { return 0; }
int64_t EXPORT(log_softmax_top_k_rows)(float *values, int64_t rows, int64_t cols, int64_t k, const int64_t *banned,
                                       void *exp, void *log, float *top, int64_t *columns, uint8_t *undecided_rows) {
    return -1;
}
#endif

/* ---- attend: attention in one order of float operations of our own, the same on every path ----

   torch's scaled_dot_product_attention gives bits that depend on the BLAS under it (MKL picks its
   kernels per CPU), and on CPU it calls that BLAS once per sentence and head: for a decoder step's
   one-position queries that is most of its time. Here one call does a whole layer's attention, and
   every number is defined by this order, which handlers/model/attention.py's attend_in_torch follows
   operation for operation (the fallback without this library, and the tests' twin):
   - score[j] = (((0 + q[0] * k[j][0]) + q[1] * k[j][1]) + ...) * scale, then + mask[j] where given;
   - max = the largest score (NaN if any is NaN, as torch.amax);
   - e[j] = exp(score[j] - max) by exp_lanes below, 0 under -87;
   - total: 16 partial sums, partial[l] = ((0 + e[l]) + e[l + 16]) + ..., then halved: partial[l] +
     partial[l + 8], then + 4, + 2, + 1 (zeros added past the last key change nothing);
   - out[d] = (((0 + e[0] * v[0][d]) + e[1] * v[1][d]) + ...) / total.
   Each lane of a vector is one key (scores) or one value column (out): no sum crosses lanes, so any
   vector width gives the same bits (tests/unit/test_attention.py checks every path against the twin).
   Keys come transposed (set, head, dim, key), so that a vector holds consecutive keys. */
/* The vector width is the path's own (each lane is one key or one value column: no sum crosses lanes,
   so every width gives the same bits); key rows are padded to ATTEND_PAD, a multiple of all of them. */
#if defined(__AVX512F__)
#define ATTEND_LANES 16
#elif defined(__AVX2__)
#define ATTEND_LANES 8
#else
#define ATTEND_LANES 4
#endif
#define ATTEND_PAD 16
typedef float lane_floats __attribute__((vector_size(4 * ATTEND_LANES)));
typedef int32_t lane_ints __attribute__((vector_size(4 * ATTEND_LANES)));
typedef float lane_floats_u __attribute__((vector_size(4 * ATTEND_LANES), aligned(4)));
#define EXP_CUTOFF -87.0f
#define EXP_ROUNDER 12582912.0f /* 1.5 * 2^23: x + it - it rounds x to an integer, ties to even */

static inline lane_floats load_lanes(const float *p) { return *(const lane_floats_u *)p; }
static inline void store_lanes(float *p, lane_floats v) { *(lane_floats_u *)p = v; }

/* exp in a fixed order (Cody-Waite reduction by ln 2, Cephes' expf polynomial), 0 below EXP_CUTOFF. */
static inline lane_floats exp_lanes(lane_floats x) {
    const lane_floats shifted = x * 1.44269504088896341f + EXP_ROUNDER;
    const lane_floats n = shifted - EXP_ROUNDER;
    lane_floats r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    const lane_floats z = r * r;
    lane_floats y = r * 1.9875691500e-4f + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * z + r;
    y = y + 1.0f;
    const lane_ints below = x < EXP_CUTOFF;
    const lane_ints exponent = (((lane_ints)shifted - 0x4B400000) + 127) << 23;
    const lane_floats two_n = (lane_floats)(exponent & ~below);
    return (lane_floats)((lane_ints)(y * two_n) & ~below);
}

#define ATTEND_CHAINS 8 /* independent dot products interleaved: each sum stays in order, the adds overlap */

/* e[c][j] = (sum over d, in order, of q_c[d] * kt_c[d][j]) * scale for n <= ATTEND_CHAINS chains;
   kt_c's rows are readable to `keys` rounded up to ATTEND_PAD. */
static void scores(int n, const float *const *q, const float *const *kt, int64_t k_dim, int64_t keys,
                   int64_t dim, float scale, float *const *e) {
    for (int64_t j = 0; j < keys; j += ATTEND_LANES) {
        lane_floats acc[ATTEND_CHAINS] = {};
        if (n == ATTEND_CHAINS) {
            for (int64_t d = 0; d < dim; d++) {
                for (int c = 0; c < ATTEND_CHAINS; c++) {
                    acc[c] = acc[c] + q[c][d] * load_lanes(kt[c] + d * k_dim + j);
                }
            }
        } else {
            for (int64_t d = 0; d < dim; d++) {
                for (int c = 0; c < n; c++) {
                    acc[c] = acc[c] + q[c][d] * load_lanes(kt[c] + d * k_dim + j);
                }
            }
        }
        for (int c = 0; c < n; c++) {
            store_lanes(e[c] + j, acc[c] * scale);
        }
    }
}

/* out = (sum over j, in order, of e[j] * v[j]) / total, each of the dim lanes on its own. */
static void weighted_values(const float *e, const float *v, int64_t v_key, int64_t keys, int64_t dim,
                            float total, float *out) {
    if (dim == 64) {
        enum { PARTS = 64 / ATTEND_LANES };
        lane_floats acc[PARTS] = {};
        for (int64_t j = 0; j < keys; j++) {
            const float *row = v + j * v_key;
            for (int p = 0; p < PARTS; p++) {
                acc[p] = acc[p] + e[j] * load_lanes(row + p * ATTEND_LANES);
            }
        }
        for (int p = 0; p < PARTS; p++) {
            store_lanes(out + p * ATTEND_LANES, acc[p] / total);
        }
        return;
    }
    for (int64_t d = 0; d < dim; d++) {
        float acc = 0.0f;
        for (int64_t j = 0; j < keys; j++) {
            acc = acc + e[j] * v[j * v_key + d];
        }
        out[d] = acc / total;
    }
}

/* A chain's scores, masked, to its softmax's numerators (in place); returns their sum. */
static float numerators(float *e, const float *mask, int64_t keys) {
    if (mask) {
        for (int64_t j = 0; j < keys; j++) {
            e[j] = e[j] + mask[j];
        }
    }
    const int64_t padded = (keys + ATTEND_PAD - 1) / ATTEND_PAD * ATTEND_PAD;
    for (int64_t j = keys; j < padded; j++) {
        e[j] = -__builtin_inff();
    }
    /* The max is exact in any order; NaN if any score is (as torch.amax). */
    lane_floats top = load_lanes(e);
    lane_ints nan = {};
    for (int64_t j = 0; j < padded; j += ATTEND_LANES) {
        const lane_floats x = load_lanes(e + j);
        const lane_ints above = x > top;
        top = (lane_floats)(((lane_ints)x & above) | ((lane_ints)top & ~above));
        nan |= x != x;
    }
    float max = -__builtin_inff();
    int any_nan = 0;
    for (int l = 0; l < ATTEND_LANES; l++) {
        max = top[l] > max ? top[l] : max;
        any_nan |= nan[l] != 0;
    }
    max = any_nan ? __builtin_nanf("") : max;
    for (int64_t j = 0; j < padded; j += ATTEND_LANES) {
        store_lanes(e + j, exp_lanes(load_lanes(e + j) - max));
    }
    /* The total: ATTEND_PAD partial sums (partial[l] = ((0 + e[l]) + e[l + 16]) + ...), then halved
       (partial[l] + partial[l + 8], then + 4, + 2, + 1); the padding adds exact zeros. */
    enum { VECTORS = ATTEND_PAD / ATTEND_LANES };
    lane_floats sums[VECTORS] = {};
    for (int64_t j = 0; j < padded; j += ATTEND_PAD) {
        for (int v = 0; v < VECTORS; v++) {
            sums[v] = sums[v] + load_lanes(e + j + v * ATTEND_LANES);
        }
    }
    float partial[ATTEND_PAD];
    for (int v = 0; v < VECTORS; v++) {
        store_lanes(partial + v * ATTEND_LANES, sums[v]);
    }
    for (int width = ATTEND_PAD / 2; width >= 1; width /= 2) {
        for (int l = 0; l < width; l++) {
            partial[l] = partial[l] + partial[l + width];
        }
    }
    return partial[0];
}

/* shape: sets, heads, queries, keys, dim. strides (floats): q set/head/query, kt set/head/dim,
   v set/head/key, mask set/query, out set/head/query; each one's last axis is contiguous, and kt's rows
   are readable to `keys` rounded up to ATTEND_PAD. mask: additive, one per set and query (all heads),
   or NULL. */
void EXPORT(attend)(const float *q, const float *kt, const float *v, const float *mask, float *out,
                    const int64_t *shape, const int64_t *strides, float scale) {
    const int64_t sets = shape[0], heads = shape[1], queries = shape[2], keys = shape[3], dim = shape[4];
    const int64_t padded = (keys + ATTEND_PAD - 1) / ATTEND_PAD * ATTEND_PAD;
    float buffer[ATTEND_CHAINS][padded];
    float *e[ATTEND_CHAINS];
    for (int c = 0; c < ATTEND_CHAINS; c++) {
        e[c] = buffer[c];
    }
    const int64_t pairs = heads * queries;
    for (int64_t s = 0; s < sets; s++) {
        for (int64_t first = 0; first < pairs; first += ATTEND_CHAINS) {
            const int n = (int)(pairs - first < ATTEND_CHAINS ? pairs - first : ATTEND_CHAINS);
            const float *qs[ATTEND_CHAINS], *kts[ATTEND_CHAINS];
            for (int c = 0; c < n; c++) {
                const int64_t h = (first + c) / queries, i = (first + c) % queries;
                qs[c] = q + s * strides[0] + h * strides[1] + i * strides[2];
                kts[c] = kt + s * strides[3] + h * strides[4];
            }
            scores(n, qs, kts, strides[5], keys, dim, scale, e);
            for (int c = 0; c < n; c++) {
                const int64_t h = (first + c) / queries, i = (first + c) % queries;
                const float total = numerators(e[c], mask ? mask + s * strides[9] + i * strides[10] : 0, keys);
                weighted_values(e[c], v + s * strides[6] + h * strides[7], strides[8], keys, dim, total,
                                out + s * strides[11] + h * strides[12] + i * strides[13]);
            }
        }
    }
}

#ifdef KERNEL_COMMON
/* Once per library (in the generic object): what the CPU and the OS offer, from CPUID and XGETBV
   (libgcc's __builtin_cpu_supports), one bit each in handlers/model/native.py's CPU_FEATURES order. */
int64_t cpu_features(void) {
    __builtin_cpu_init();
    const int have[] = {
        __builtin_cpu_supports("avx2"),       __builtin_cpu_supports("fma"),
        __builtin_cpu_supports("avx512f"),    __builtin_cpu_supports("avx512bw"),
        __builtin_cpu_supports("avx512vl"),   __builtin_cpu_supports("avx512vnni"),
        __builtin_cpu_supports("avxvnni"),    __builtin_cpu_supports("amx-tile"),
        __builtin_cpu_supports("amx-int8"),
    };
    int64_t bits = 0;
    for (int64_t i = 0; i < (int64_t)(sizeof have / sizeof have[0]); i++) {
        bits |= (int64_t)(have[i] != 0) << i;
    }
    return bits;
}

/* The hash of the kernels.c this library was built from (native.py refuses a stale library). */
const char *kernels_source(void) { return KERNELS_SOURCE; }
#endif
