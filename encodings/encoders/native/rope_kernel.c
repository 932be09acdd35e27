/* RoPE on interleaved pairs: x[r, h, 2i], x[r, h, 2i+1] rotated by the angle of row r, written to
 * y, which may be x itself (in place: each vector is read before it is written).
 *
 * table: (rows_in_table, dim), per position cos(m θ_i) then sin(m θ_i), i < dim / 2. Row r of x uses
 * table row r % rows_in_table (positions shared over the batch, or one table row per token). With
 * C = (c0, c0, c1, c1, ...) and S = (-s0, s0, -s1, s1, ...), y = x * C + swap(x) * S where swap
 * exchanges each pair; C and S are made in registers from one load of cos and one of sin, so the
 * table is half the bytes of C and S stored. One pass over x: each element read once and written
 * once (the loop order below depends on where x lies); vectors through GCC/Clang vector extensions
 * (the compiler picks AVX2, AVX-512 or NEON), a scalar loop for the rest of a head. */
#include <stdint.h>

/* SWAP exchanges each pair; LOW and HIGH repeat each lane of a vector's first and second half. */
#if defined(__clang__)
#define SWAP8(v) __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6)
#define LOW8(v) __builtin_shufflevector(v, v, 0, 0, 1, 1, 2, 2, 3, 3)
#define HIGH8(v) __builtin_shufflevector(v, v, 4, 4, 5, 5, 6, 6, 7, 7)
#define SWAP4(v) __builtin_shufflevector(v, v, 1, 0, 3, 2)
#define LOW4(v) __builtin_shufflevector(v, v, 0, 0, 1, 1)
#define HIGH4(v) __builtin_shufflevector(v, v, 2, 2, 3, 3)
#else
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef int64_t i64x4 __attribute__((vector_size(32)));
#define SWAP8(v) __builtin_shuffle(v, (i32x8){1, 0, 3, 2, 5, 4, 7, 6})
#define LOW8(v) __builtin_shuffle(v, (i32x8){0, 0, 1, 1, 2, 2, 3, 3})
#define HIGH8(v) __builtin_shuffle(v, (i32x8){4, 4, 5, 5, 6, 6, 7, 7})
#define SWAP4(v) __builtin_shuffle(v, (i64x4){1, 0, 3, 2})
#define LOW4(v) __builtin_shuffle(v, (i64x4){0, 0, 1, 1})
#define HIGH4(v) __builtin_shuffle(v, (i64x4){2, 2, 3, 3})
#endif

/* x above streamed_above bytes (a quarter of the last-level cache, caches.py) streams from memory:
 * its heads are taken in order, one vector at a time, an access the hardware's prefetchers follow.
 * Smaller ones are read from cache, where loads are what costs: the coefficients of a cache line
 * are loaded once per row and held in registers over the heads. */
typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));

/* C and S for the 2 * LANES elements from j: one load of cos and one of sin. */
#define COEFFICIENTS(VEC, LOW, HIGH)                                                                \
    VEC cv, sv;                                                                                    \
    __builtin_memcpy(&cv, cs + j / 2, sizeof cv);                                                  \
    __builtin_memcpy(&sv, sn + j / 2, sizeof sv);                                                  \
    const VEC c0 = LOW(cv), c1 = HIGH(cv), s0 = LOW(sv) * sign, s1 = HIGH(sv) * sign;

/* Two vectors of head h from j, rotated. */
#define ROTATE_TWO(VEC, SWAP, LANES)                                                               \
    {                                                                                              \
        VEC a0, a1;                                                                                \
        __builtin_memcpy(&a0, in + h * dim + j, sizeof a0);                                        \
        __builtin_memcpy(&a1, in + h * dim + j + LANES, sizeof a1);                                \
        a0 = a0 * c0 + SWAP(a0) * s0;                                                              \
        a1 = a1 * c1 + SWAP(a1) * s1;                                                              \
        __builtin_memcpy(out + h * dim + j, &a0, sizeof a0);                                       \
        __builtin_memcpy(out + h * dim + j + LANES, &a1, sizeof a1);                               \
    }

#define ROPE(NAME, T, VEC, LANES, SWAP, LOW, HIGH, SIGN)                                            \
    void NAME(const T *x, T *y, const T *table, int64_t table_rows, int64_t rows, int64_t heads,   \
              int64_t dim, int threads, int64_t streamed_above) {                                  \
        const int64_t width = heads * dim, block = 2 * LANES, vectorised = dim / block * block;    \
        const int streamed = rows * width * (int64_t)sizeof(T) > streamed_above;                   \
        const VEC sign = SIGN;                                                                     \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if(threads > 1 && rows * width >= 32768)") \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const T *cs = table + (r % table_rows) * dim, *sn = cs + dim / 2;                      \
            const T *in = x + r * width;                                                           \
            T *out = y + r * width;                                                                \
            if (streamed) { /* heads in order, so the hardware's prefetchers run ahead */          \
                for (int64_t h = 0; h < heads; h++)                                                \
                    for (int64_t j = 0; j < vectorised; j += block) {                              \
                        COEFFICIENTS(VEC, LOW, HIGH)                                               \
                        ROTATE_TWO(VEC, SWAP, LANES)                                               \
                    }                                                                              \
            } else /* from cache: a block's coefficients held in registers over the heads */       \
                for (int64_t j = 0; j < vectorised; j += block) {                                  \
                    COEFFICIENTS(VEC, LOW, HIGH)                                                   \
                    for (int64_t h = 0; h < heads; h++)                                            \
                        ROTATE_TWO(VEC, SWAP, LANES)                                               \
                }                                                                                  \
            for (int64_t h = 0; h < heads; h++) {                                                  \
                for (int64_t p = vectorised; p < dim; p += 2) {                                    \
                    const T a0 = in[h * dim + p], a1 = in[h * dim + p + 1];                        \
                    const T c = cs[p / 2], s = sn[p / 2];                                          \
                    out[h * dim + p] = a0 * c - a1 * s;                                            \
                    out[h * dim + p + 1] = a1 * c + a0 * s;                                        \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

ROPE(rope_f32, float, f32x8, 8, SWAP8, LOW8, HIGH8, ((f32x8){-1, 1, -1, 1, -1, 1, -1, 1}))
ROPE(rope_f64, double, f64x4, 4, SWAP4, LOW4, HIGH4, ((f64x4){-1, 1, -1, 1}))
