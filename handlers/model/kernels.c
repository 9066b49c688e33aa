/* Our C kernels, each standing for a few torch calls on the decoder's hot path and giving their
   results exactly (handlers/model/native.py builds this file and loads it; without a compiler the
   torch calls run instead).

   map_rows, restore_rows: the element-wise work around every per-row int8 matmul
   (handlers/model/row_int8.py), ten torch calls per layer (amin, amax, sub, clamp, sub, div before
   fbgemm; mul, add, addcmul after it), here one pass each side. Every element goes through the
   same IEEE operations in the same order as those calls, with a fused multiply-add only where
   addcmul_ has one (built with -ffp-contract=off): the same bits (tests/unit/test_row_int8_kernels.py).

   top_k_rows: a beam's per-row top-k over the vocabulary, torch.topk's answer where no values tie,
   and a "not mine" for a row where they might (tests/unit/test_top_k.py). */

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* GCC's vector extension: eight floats, compiled to whatever -march=native offers (AVX2, AVX-512). */
typedef float floats8 __attribute__((vector_size(32)));
typedef int32_t ints8 __attribute__((vector_size(32)));

static inline floats8 pick(ints8 mask, floats8 yes, floats8 no) {
    return (floats8)(((ints8)yes & mask) | ((ints8)no & ~mask));
}

/* Row r of x (rows x cols, contiguous): low[r] = min, span[r] = max(max - min, FLT_MIN),
   unit = (x - low) / span. A NaN anywhere in a row makes its low and span NaN, as amin/amax do. */
void map_rows(const float *x, int64_t rows, int64_t cols, float *unit, float *low, float *span) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        float *out = unit + r * cols;
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
        for (; c < cols; c++) {
            float v = row[c];
            any_nan |= v != v;
            l = v < l ? v : l;
            h = v > h ? v : h;
        }
        if (any_nan) {
            l = h = __builtin_nanf("");
        }
        float s = h - l;
        if (!(s != s) && s < FLT_MIN) {
            s = FLT_MIN;
        }
        low[r] = l;
        span[r] = s;
        for (c = 0; c < cols; c++) {
            out[c] = (row[c] - l) / s;
        }
    }
}

/* out = low * row_sums (+ bias) + product * span, per row, in that order (bias may be NULL); the last
   step is one fused multiply-add, as torch's addcmul_ does it on AVX2 and AVX-512. */
void restore_rows(const float *product, int64_t rows, int64_t cols, const float *low, const float *span,
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
   gives equal values is its own, so the caller asks torch.topk for those rows. Returns how many. */
int64_t top_k_rows(const float *values, int64_t rows, int64_t cols, int64_t k, float *top, int64_t *columns,
                   uint8_t *undecided_rows) {
    int64_t count = 0;
    for (int64_t r = 0; r < rows; r++) {
        int undecided = 0;
        const float *row = values + r * cols;
        float *t = top + r * k;
        int64_t *c = columns + r * k, filled = 0, i = 0;
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
        undecided_rows[r] = (uint8_t)undecided;
        count += undecided;
    }
    return count;
}
