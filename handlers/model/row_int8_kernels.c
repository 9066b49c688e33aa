/* The element-wise work around every per-row int8 matmul (handlers/model/row_int8.py), one pass each.

   In torch it is ten operator calls per linear layer, each a pass over memory and a dispatch:
   amin, amax, sub, clamp, sub, div before fbgemm; mul, add, addcmul after it. Here each side is
   one call. Every element goes through the same IEEE operations in the same order as those
   calls (no fused multiply-add: built with -ffp-contract=off), so the results are the same bit
   for bit; tests/unit/test_row_int8_kernels.py checks it against the torch path.

   Built at first use by handlers/model/native_rows.py; torch's own calls stand in without a compiler. */

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
