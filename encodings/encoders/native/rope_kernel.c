/* RoPE on interleaved pairs: x[r, h, 2i], x[r, h, 2i+1] rotated by the angle of row r, written to
 * y, which may be x itself (in place: each vector is read before it is written).
 *
 * table: (rows_in_table, 2 * dim), per position the coefficients C then S, C = (c0, c0, c1, c1, ...),
 * S = (-s0, s0, -s1, s1, ...), so y = x * C + swap(x) * S where swap exchanges each pair. Row r of x
 * uses table row r % rows_in_table (positions shared over the batch, or one table row per token).
 * One pass over x: each element read once and written once (the loop order below depends on where
 * x lies); vectors through GCC/Clang vector extensions (the compiler picks AVX2, AVX-512 or NEON),
 * a scalar loop for the rest of a head. */
#include <stdint.h>

#if defined(__clang__)
#define SWAP8(v) __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6)
#define SWAP4(v) __builtin_shufflevector(v, v, 1, 0, 3, 2)
#else
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef int64_t i64x4 __attribute__((vector_size(32)));
#define SWAP8(v) __builtin_shuffle(v, (i32x8){1, 0, 3, 2, 5, 4, 7, 6})
#define SWAP4(v) __builtin_shuffle(v, (i64x4){1, 0, 3, 2})
#endif

/* x above streamed_above bytes (a quarter of the last-level cache, caches.py) streams from memory:
 * its heads are taken in order, one vector at a time, an access the hardware's prefetchers follow.
 * Smaller ones are read from cache, where loads are what costs: the coefficients of a cache line
 * are loaded once per row and held in registers over the heads. */
typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));

#define ROPE(NAME, T, VEC, LANES, SWAP)                                                             \
    void NAME(const T *x, T *y, const T *table, int64_t table_rows, int64_t rows, int64_t heads,   \
              int64_t dim, int threads, int64_t streamed_above) {                                  \
        const int64_t width = heads * dim;                                                         \
        const int streamed = rows * width * (int64_t)sizeof(T) > streamed_above;                   \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if(threads > 1 && rows * width >= 32768)") \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const T *C = table + (r % table_rows) * 2 * dim, *S = C + dim;                         \
            const T *in = x + r * width;                                                           \
            T *out = y + r * width;                                                                \
            int64_t j = 0;                                                                         \
            if (streamed) { /* heads in order, so the hardware's prefetchers run ahead */          \
                for (int64_t h = 0; h < heads; h++)                                                \
                    for (j = 0; j + LANES <= dim; j += LANES) {                                    \
                        VEC a, c, s;                                                               \
                        __builtin_memcpy(&a, in + h * dim + j, sizeof a);                          \
                        __builtin_memcpy(&c, C + j, sizeof c);                                     \
                        __builtin_memcpy(&s, S + j, sizeof s);                                     \
                        a = a * c + SWAP(a) * s;                                                   \
                        __builtin_memcpy(out + h * dim + j, &a, sizeof a);                         \
                    }                                                                              \
                j = dim / LANES * LANES; /* where every head's vectors stopped */                  \
            } else                                                                                 \
            for (; j + 2 * LANES <= dim; j += 2 * LANES) {                                         \
                VEC c0, s0, c1, s1;                                                                \
                __builtin_memcpy(&c0, C + j, sizeof c0);                                           \
                __builtin_memcpy(&s0, S + j, sizeof s0);                                           \
                __builtin_memcpy(&c1, C + j + LANES, sizeof c1);                                   \
                __builtin_memcpy(&s1, S + j + LANES, sizeof s1);                                   \
                for (int64_t h = 0; h < heads; h++) {                                              \
                    VEC a0, a1;                                                                    \
                    __builtin_memcpy(&a0, in + h * dim + j, sizeof a0);                            \
                    __builtin_memcpy(&a1, in + h * dim + j + LANES, sizeof a1);                    \
                    a0 = a0 * c0 + SWAP(a0) * s0;                                                  \
                    a1 = a1 * c1 + SWAP(a1) * s1;                                                  \
                    __builtin_memcpy(out + h * dim + j, &a0, sizeof a0);                           \
                    __builtin_memcpy(out + h * dim + j + LANES, &a1, sizeof a1);                   \
                }                                                                                  \
            }                                                                                      \
            for (int64_t h = 0; h < heads; h++) {                                                  \
                for (int64_t i = h * dim + j; i < (h + 1) * dim; i += 2) {                         \
                    const int64_t p = i - h * dim;                                                 \
                    const T a0 = in[i], a1 = in[i + 1];                                            \
                    out[i] = a0 * C[p] + a1 * S[p];                                                \
                    out[i + 1] = a1 * C[p + 1] + a0 * S[p + 1];                                    \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

ROPE(rope_f32, float, f32x8, 8, SWAP8)
ROPE(rope_f64, double, f64x4, 4, SWAP4)
