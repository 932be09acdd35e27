/* RoPE on interleaved pairs: x[r, h, 2i], x[r, h, 2i+1] rotated by the angle of row r, written to
 * y, which may be x itself (in place: each vector is read before it is written).
 *
 * table: (rows_in_table, 2 * dim), per position the coefficients C then S, C = (c0, c0, c1, c1, ...),
 * S = (-s0, s0, -s1, s1, ...), so y = x * C + swap(x) * S where swap exchanges each pair. Row r of x
 * uses table row r % rows_in_table (positions shared over the batch, or one table row per token).
 * One pass over x: read once, written where it was read. Vectors through GCC/Clang vector
 * extensions (the compiler picks AVX2, AVX-512 or NEON), a scalar loop for the tail. */
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

typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));

#define ROPE(NAME, T, VEC, LANES, SWAP)                                                             \
    void NAME(const T *x, T *y, const T *table, int64_t table_rows, int64_t rows, int64_t heads,   \
              int64_t dim, int threads) {                                                          \
        const int64_t width = heads * dim;                                                         \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if(threads > 1 && rows * width >= 32768)") \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const T *C = table + (r % table_rows) * 2 * dim, *S = C + dim;                         \
            for (int64_t h = 0; h < heads; h++) {                                                  \
                const T *v = x + r * width + h * dim;                                              \
                T *w = y + r * width + h * dim;                                                    \
                int64_t j = 0;                                                                     \
                for (; j + LANES <= dim; j += LANES) {                                             \
                    VEC a, c, s;                                                                   \
                    __builtin_memcpy(&a, v + j, sizeof a);                                         \
                    __builtin_memcpy(&c, C + j, sizeof c);                                         \
                    __builtin_memcpy(&s, S + j, sizeof s);                                         \
                    a = a * c + SWAP(a) * s;                                                       \
                    __builtin_memcpy(w + j, &a, sizeof a);                                         \
                }                                                                                  \
                for (; j < dim; j += 2) {                                                          \
                    T a0 = v[j], a1 = v[j + 1];                                                    \
                    w[j] = a0 * C[j] + a1 * S[j];                                                  \
                    w[j + 1] = a1 * C[j + 1] + a0 * S[j + 1];                                      \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

ROPE(rope_f32, float, f32x8, 8, SWAP8)
ROPE(rope_f64, double, f64x4, 4, SWAP4)
