/* parley's native decode step: a whole forward pass of a Llama-family decoder for a batch of
 * decoding sequences (one new token each) over the paged KV cache, in one call.
 *
 * Built by build.py with the machine's C compiler (-O3 -march=native -fopenmp), loaded with
 * ctypes, and handed raw pointers to the tensors the PyTorch model holds (int8, w8a8, int4's
 * own nibble layout, which the model keeps beside PyTorch's), and to fp32's matrices copied
 * with their rows in fours (FP32_GROUP below).
 *
 * Why: at one to a few sequences a step is a chain of matrix-vector products; eager PyTorch
 * spends ~4,000 op calls a forward on it and oneDNN's packed products do not stream the
 * weights at memory speed (docs/ENGINE_PROFILE.md). Here one OpenMP region runs the whole step
 * and each product streams its weight rows once for the whole batch.
 *
 * Every output (row b, weight row o) is summed by the same code in the same order whatever
 * the batch (two 16-lane accumulators, a fixed reduction): a sequence's tokens never depend on what
 * it was batched with. Input sizes must be multiples of 32 (int4's group).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h> /* the AVX-512 / AVX2 paths; other CPUs take the plain C ones */
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef float vf __attribute__((vector_size(64), aligned(4)));
typedef uint8_t vu __attribute__((vector_size(16), aligned(1)));
typedef int32_t vi __attribute__((vector_size(64)));

/* 16 bytes to 16 floats: one widening and one conversion (GCC's generic vectors would go
 * element by element for int8) */
static inline vf from_i8(const int8_t *p) {
#if defined(__AVX512F__)
    return (vf)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
#elif defined(__AVX2__)
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
    vf r;
    memcpy(&r, &lo, 32), memcpy((char *)&r + 32, &hi, 32);
    return r;
#else
    vf r;
    for (int i = 0; i < 16; i++) r[i] = p[i];
    return r;
#endif
}

static inline vf from_u8(vu v) {
#if defined(__AVX512F__)
    return (vf)_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32((__m128i)v));
#elif defined(__AVX2__)
    __m128i b = (__m128i)v;
    __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
    __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
    vf r;
    memcpy(&r, &lo, 32), memcpy((char *)&r + 32, &hi, 32);
    return r;
#else
    return __builtin_convertvector(__builtin_convertvector(v, vi), vf);
#endif
}

enum { KIND_FP32 = 0, KIND_INT8 = 1, KIND_INT4 = 2, KIND_W8A8 = 3 };
#define INT4_GROUP 32

typedef struct {
    int32_t kind, rows, cols, pad;
    const void *w;      /* fp32 [rows/4, cols/32, 4, 32] (rows in fours: FP32_GROUP) | int8 [rows, cols]
                         * | uint8 nibbles [rows, cols/2] */
    const float *scale; /* int8, w8a8: [rows]; int4: [rows, cols/32] */
    const float *min;   /* int4: [rows, cols/32] (w = q * scale + min) */
    const int32_t *wsum; /* w8a8: [rows], each row's sum of q */
} Mat;

/* what a w8a8 product needs besides its operands: the inputs rounded to 8 bits (shared by
 * the threads: [n, cols] bytes and [n] scales) */
typedef struct {
    uint8_t *xq;
    float *xs;
} Scratch;

typedef struct {
    Mat qkv, o, gate_up, down;
    const float *attn_norm, *mlp_norm;
} Layer;

typedef struct {
    int32_t hidden, inter, heads, kv_heads, head_dim, vocab, num_layers, block_size, threads, pad;
    float eps, pad2;
    const float *embed;   /* [vocab, hidden] */
    const float *norm;    /* [hidden] */
    const float *rope;    /* [max_pos, head_dim/2, 2]: cos, sin */
    const Layer *layers;  /* [num_layers] */
    Mat lm_head;
} Model;

typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));

/* the 16 lanes' sum, as a tree (a fixed order: the same sum in every call) */
static inline float hsum(vf a) {
    v8 b = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7) +
           __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
    v4 c = __builtin_shufflevector(b, b, 0, 1, 2, 3) + __builtin_shufflevector(b, b, 4, 5, 6, 7);
    return (c[0] + c[2]) + (c[1] + c[3]);
}

/* Every sum below is the same arithmetic whatever the batch: one accumulator for the even
 * 16-column chunks, one for the odd, added, then summed lane by lane (hsum). */

/* columns k .. k+31 of row r as floats (k a multiple of 32): int8 as q (its row scale is
 * applied to the sum), int4 as q * scale + min of its group */
static inline __attribute__((always_inline)) void load_pair(const Mat *m, int kind, int r, int k, vf *w0, vf *w1) {
    if (kind == KIND_INT8) {
        const int8_t *q = (const int8_t *)m->w + (size_t)r * m->cols + k;
        *w0 = from_i8(q), *w1 = from_i8(q + 16);
    } else {
        size_t g = (size_t)r * (m->cols / INT4_GROUP) + k / INT4_GROUP;
        vu bytes = *(const vu *)((const uint8_t *)m->w + g * 16);
        float sc = m->scale[g], mn = m->min[g];
        *w0 = from_u8(bytes & 15) * sc + mn, *w1 = from_u8(bytes >> 4) * sc + mn;
    }
}

/* out[j] = row r of m . x[j] for `count` (1 to 4, a constant where it is inlined) inputs
 * `cols` apart: the row read and converted once for all of them, streamed one row at a time
 * (int8/int4: their rows side by side, from separate streams, were slower here; fp32 reads its
 * rows in fours from one stream: rows_KIND_FP32) */
static inline __attribute__((always_inline)) void dot_rows(const Mat *m, int kind, int r, const float *x, int count, float *out) {
    vf a[4][2] = {{{0}}};
    int cols = m->cols;
    for (int k = 0; k < cols; k += 32) {
        vf w0, w1;
        load_pair(m, kind, r, k, &w0, &w1);
        for (int j = 0; j < count; j++) {
            a[j][0] += w0 * *(const vf *)(x + (size_t)j * cols + k);
            a[j][1] += w1 * *(const vf *)(x + (size_t)j * cols + k + 16);
        }
    }
    for (int j = 0; j < count; j++) out[j] = hsum(a[j][0] + a[j][1]);
}

/* the same for two consecutive rows and four inputs (16 accumulators): each input chunk
 * loaded once for both rows, which halves what many inputs read from the cache */
static inline __attribute__((always_inline)) void dot_rows2(const Mat *m, int kind, int r, const float *x, float out[2][4]) {
    vf a[2][4][2] = {{{{0}}}};
    int cols = m->cols;
    for (int k = 0; k < cols; k += 32) {
        vf w00, w01, w10, w11;
        load_pair(m, kind, r, k, &w00, &w01);
        load_pair(m, kind, r + 1, k, &w10, &w11);
        for (int j = 0; j < 4; j++) {
            vf x0 = *(const vf *)(x + (size_t)j * cols + k), x1 = *(const vf *)(x + (size_t)j * cols + k + 16);
            a[0][j][0] += w00 * x0, a[0][j][1] += w01 * x1;
            a[1][j][0] += w10 * x0, a[1][j][1] += w11 * x1;
        }
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) out[i][j] = hsum(a[i][j][0] + a[i][j][1]);
}

static inline __attribute__((always_inline)) float finish(const Mat *m, int kind, int r, float sum) {
    return kind == KIND_INT8 ? sum * m->scale[r] : sum;
}

/* y[b, r] for rows r .. r + count - 1 (1 or 2) and every input b, in fours of inputs */
static inline __attribute__((always_inline)) void rows_at(const Mat *m, int kind, int r, int count, const float *x, int n, float *y) {
    int rows = m->rows, cols = m->cols, b = 0;
    if (count == 2)
        for (; b + 4 <= n; b += 4) {
            float out[2][4];
            dot_rows2(m, kind, r, x + (size_t)b * cols, out);
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 4; j++) y[(size_t)(b + j) * rows + r + i] = finish(m, kind, r + i, out[i][j]);
        }
    for (int i = 0; i < count; i++)
        for (int c = b; c < n; c += 4) {
            float out[4] = {0};
            const float *xc = x + (size_t)c * cols;
            switch (n - c) {
                case 1: dot_rows(m, kind, r + i, xc, 1, out); break;
                case 2: dot_rows(m, kind, r + i, xc, 2, out); break;
                case 3: dot_rows(m, kind, r + i, xc, 3, out); break;
                default: dot_rows(m, kind, r + i, xc, 4, out); break;
            }
            for (int j = 0; j < 4 && c + j < n; j++) y[(size_t)(c + j) * rows + r + i] = finish(m, kind, r + i, out[j]);
        }
}

/* int8's or int4's product, inside the parallel region: rows split among the threads, in
 * pairs from PAIR_FROM inputs up (under it one row at a time streams their weights best) */
#define PAIR_FROM 8
static inline __attribute__((always_inline)) void rows_of(const Mat *m, int kind, const float *x, int n, float *y) {
    int rows = m->rows;
    if (n < PAIR_FROM) {
#pragma omp for schedule(static)
        for (int r = 0; r < rows; r++) rows_at(m, kind, r, 1, x, n, y);
        return;
    }
#pragma omp for schedule(static)
    for (int p = 0; p < (rows + 1) / 2; p++) rows_at(m, kind, 2 * p, 2 * p + 1 < rows ? 2 : 1, x, n, y);
}

/* fp32 rows are held in fours, each 32-column chunk of the four together ([rows/4, cols/32,
 * 4, 32], decoder.py): one stream through memory, and each input chunk loaded once for four
 * rows. Loading the input beside every weight chunk, as a row at a time does, cost ~20 % over
 * reading the weights alone (docs/ENGINE_PROFILE.md); this reads them at memory speed. The
 * sums are the same as dot_rows': per output, even and odd 16-column chunks, then hsum. */
#define FP32_GROUP 4
static inline __attribute__((always_inline)) void dot_group(const float *g, const float *x, int cols, int count, float out[2][FP32_GROUP]) {
    vf a[2][FP32_GROUP][2] = {{{{0}}}};
    for (int k = 0; k < cols; k += 32) {
        const float *w = g + (size_t)k * FP32_GROUP;
        for (int j = 0; j < count; j++) {
            vf x0 = *(const vf *)(x + (size_t)j * cols + k), x1 = *(const vf *)(x + (size_t)j * cols + k + 16);
            for (int i = 0; i < FP32_GROUP; i++)
                a[j][i][0] += *(const vf *)(w + 32 * i) * x0, a[j][i][1] += *(const vf *)(w + 32 * i + 16) * x1;
        }
    }
    for (int j = 0; j < count; j++)
        for (int i = 0; i < FP32_GROUP; i++) out[j][i] = hsum(a[j][i][0] + a[j][i][1]);
}

/* y[b, r] for every row and input: each group of four rows for two inputs at a time (the
 * group, 4 x cols floats, is in L1 again for the next two) */
static void rows_KIND_FP32(const Mat *m, const float *x, int n, float *y) {
    int rows = m->rows, cols = m->cols, groups = (rows + FP32_GROUP - 1) / FP32_GROUP;
#pragma omp for schedule(static)
    for (int gi = 0; gi < groups; gi++) {
        const float *g = (const float *)m->w + (size_t)gi * FP32_GROUP * cols;
        int r0 = gi * FP32_GROUP, live = rows - r0 < FP32_GROUP ? rows - r0 : FP32_GROUP;
        for (int b = 0; b < n; b += 2) {
            float out[2][FP32_GROUP];
            if (b + 1 < n) dot_group(g, x + (size_t)b * cols, cols, 2, out);
            else dot_group(g, x + (size_t)b * cols, cols, 1, out);
            for (int j = 0; j < 2 && b + j < n; j++)
                for (int i = 0; i < live; i++) y[(size_t)(b + j) * rows + r0 + i] = out[j][i];
        }
    }
}
static void rows_KIND_INT8(const Mat *m, const float *x, int n, float *y) { rows_of(m, KIND_INT8, x, n, y); }
static void rows_KIND_INT4(const Mat *m, const float *x, int n, float *y) { rows_of(m, KIND_INT4, x, n, y); }

/* w8a8: input row x rounded to int8 as PyTorch's path does (scale = max |x| / 127, round half
 * to even), held as uint8 with its zero at 128 (q + 128); its scale to xs */
static void quantize_row(const float *x, int cols, uint8_t *q, float *xs) {
    float top = 0.0f;
    for (int i = 0; i < cols; i++) top = fmaxf(top, fabsf(x[i]));
    float scale = fmaxf(top, 1e-12f) / 127.0f;
    for (int i = 0; i < cols; i++) q[i] = (uint8_t)((int)nearbyintf(x[i] / scale) + 128);
    *xs = scale;
}

/* sum of (q[i] - 128) * w[i]: exact integers, so any order gives the same sum */
static inline int32_t dot_u8s8(const uint8_t *q, const int8_t *w, int cols, int32_t wsum) {
    int32_t total = 0;
    int k = 0;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    __m512i acc = _mm512_setzero_si512();
    for (; k + 64 <= cols; k += 64)
        acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(q + k), _mm512_loadu_si512(w + k));
    total = _mm512_reduce_add_epi32(acc);
#elif defined(__AVX2__)
    __m256i acc = _mm256_setzero_si256(), ones = _mm256_set1_epi16(1), bias = _mm256_set1_epi8((char)128);
    for (; k + 32 <= cols; k += 32) { /* signed x = q - 128; |w| * sign(x by w): no saturation */
        __m256i x = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(q + k)), bias);
        __m256i v = _mm256_loadu_si256((const __m256i *)(w + k));
        __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(x, v));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
    }
    int32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, acc);
    for (int i = 0; i < 8; i++) total += lanes[i];
    for (; k < cols; k++) total += ((int32_t)q[k] - 128) * w[k];
    return total;
#endif
    for (; k < cols; k++) total += (int32_t)q[k] * w[k];
    return total - 128 * wsum;
}

static void matmul_w8a8(const Mat *m, const float *x, int n, float *y, const Scratch *s) {
    int rows = m->rows, cols = m->cols;
#pragma omp for schedule(static)
    for (int b = 0; b < n; b++) quantize_row(x + (size_t)b * cols, cols, s->xq + (size_t)b * cols, s->xs + b);
    const int8_t *w = (const int8_t *)m->w;
#pragma omp for schedule(static)
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < n; b++) {
            int32_t sum = dot_u8s8(s->xq + (size_t)b * cols, w + (size_t)r * cols, cols, m->wsum[r]);
            y[(size_t)b * rows + r] = (float)sum * m->scale[r] * s->xs[b];
        }
}

/* y[b, :] = m . x[b, :] for b < n, inside the parallel region: rows split among the threads */
static void matmul(const Mat *m, const float *x, int n, float *y, const Scratch *s) {
    switch (m->kind) {
        case KIND_FP32: rows_KIND_FP32(m, x, n, y); break;
        case KIND_INT8: rows_KIND_INT8(m, x, n, y); break;
        case KIND_INT4: rows_KIND_INT4(m, x, n, y); break;
        default: matmul_w8a8(m, x, n, y, s); break;
    }
}

static void rms_norm(const float *x, const float *w, int n, float eps, float *out) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
}

/* rotate each adjacent pair of the first `heads` heads of row `v` by position `pos` */
static void rope(const Model *m, float *v, int heads, int64_t pos) {
    int half = m->head_dim / 2;
    const float *rot = m->rope + (size_t)pos * half * 2;
    for (int h = 0; h < heads; h++) {
        float *p = v + (size_t)h * m->head_dim;
        for (int j = 0; j < half; j++) {
            float a = p[2 * j], b = p[2 * j + 1], c = rot[2 * j], s = rot[2 * j + 1];
            p[2 * j] = a * c - b * s;
            p[2 * j + 1] = a * s + b * c;
        }
    }
}

static inline float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* one query head of one row over its sequence's positions 0 .. ctx-1 */
static void attend(const Model *m, const float *cache, const int64_t *table, int64_t ctx, int head,
                   const float *q, float *out, float *scores) {
    int d = m->head_dim, kvh = m->kv_heads, g = head / (m->heads / kvh), bs = m->block_size;
    size_t slot_width = (size_t)2 * kvh * d;
    float scale = 1.0f / sqrtf((float)d), best = -INFINITY, total = 0.0f;
    for (int64_t t = 0; t < ctx; t++) {
        const float *k = cache + ((size_t)table[t / bs] * bs + t % bs) * slot_width + (size_t)g * d;
        scores[t] = dot(q, k, d) * scale;
        if (scores[t] > best) best = scores[t];
    }
    for (int i = 0; i < d; i++) out[i] = 0.0f;
    for (int64_t t = 0; t < ctx; t++) {
        float p = expf(scores[t] - best);
        total += p;
        const float *v = cache + ((size_t)table[t / bs] * bs + t % bs) * slot_width + (size_t)(kvh + g) * d;
        for (int i = 0; i < d; i++) out[i] += p * v[i];
    }
    for (int i = 0; i < d; i++) out[i] /= total;
}

static size_t max_cols(const Model *m) {
    int c = m->hidden > m->inter ? m->hidden : m->inter;
    return (size_t)(c > m->heads * m->head_dim ? c : m->heads * m->head_dim);
}

/* The logits [n, vocab] of n decoding rows: row b is token tokens[b] at position positions[b]
 * of a sequence whose blocks are tables[b, :width]; its K/V go to cache slot slots[b].
 * caches: one [num_blocks, block_size, 2 * kv_heads, head_dim] float tensor a layer.
 * Returns 0, or -1 when scratch memory could not be had. */
int parley_decode(const Model *m, int n, const int64_t *tokens, const int64_t *positions,
                  const int64_t *slots, const int64_t *tables, int width, float *const *caches,
                  float *logits) {
    int H = m->hidden, I = m->inter, D = m->head_dim, heads = m->heads, kvh = m->kv_heads;
    int qkv_w = (heads + 2 * kvh) * D, threads = m->threads > 0 ? m->threads : 1;
    size_t ctx_cap = (size_t)width * m->block_size, mc = max_cols(m);
    size_t need = (size_t)n * (2 * H + qkv_w + heads * D + 2 * I + I + H + 1) + threads * ctx_cap
                  + ((size_t)n * mc + 3) / 4;
    float *mem = aligned_alloc(64, ((need * sizeof(float)) + 63) / 64 * 64);
    if (!mem) return -1;
    float *x = mem, *h = x + (size_t)n * H, *qkv = h + (size_t)n * H, *att = qkv + (size_t)n * qkv_w;
    float *gu = att + (size_t)n * heads * D, *act = gu + (size_t)n * 2 * I, *y = act + (size_t)n * I;
    float *xs = y + (size_t)n * H, *per_thread = xs + n;
    uint8_t *xq = (uint8_t *)(per_thread + (size_t)threads * ctx_cap);
    size_t slot_width = (size_t)2 * kvh * D;

#pragma omp parallel num_threads(threads)
    {
        int me = 0;
#ifdef _OPENMP
        extern int omp_get_thread_num(void);
        me = omp_get_thread_num();
#endif
        float *scores = per_thread + (size_t)me * ctx_cap;
        Scratch scratch = {xq, xs};
#pragma omp for schedule(static)
        for (int b = 0; b < n; b++) memcpy(x + (size_t)b * H, m->embed + (size_t)tokens[b] * H, H * sizeof(float));
        for (int l = 0; l < m->num_layers; l++) {
            const Layer *L = &m->layers[l];
            float *cache = caches[l];
#pragma omp for schedule(static)
            for (int b = 0; b < n; b++) rms_norm(x + (size_t)b * H, L->attn_norm, H, m->eps, h + (size_t)b * H);
            matmul(&L->qkv, h, n, qkv, &scratch);
#pragma omp for schedule(static)
            for (int b = 0; b < n; b++) {
                float *row = qkv + (size_t)b * qkv_w;
                rope(m, row, heads + kvh, positions[b]);
                memcpy(cache + (size_t)slots[b] * slot_width, row + (size_t)heads * D, slot_width * sizeof(float));
            }
#pragma omp for schedule(static) collapse(2)
            for (int b = 0; b < n; b++)
                for (int hd = 0; hd < heads; hd++)
                    attend(m, cache, tables + (size_t)b * width, positions[b] + 1, hd,
                           qkv + (size_t)b * qkv_w + (size_t)hd * D, att + ((size_t)b * heads + hd) * D, scores);
            matmul(&L->o, att, n, y, &scratch);
#pragma omp for schedule(static)
            for (int b = 0; b < n; b++) {
                float *xb = x + (size_t)b * H, *yb = y + (size_t)b * H;
                for (int i = 0; i < H; i++) xb[i] += yb[i];
                rms_norm(xb, L->mlp_norm, H, m->eps, h + (size_t)b * H);
            }
            matmul(&L->gate_up, h, n, gu, &scratch);
#pragma omp for schedule(static)
            for (int b = 0; b < n; b++) {
                const float *gate = gu + (size_t)b * 2 * I, *up = gate + I;
                float *a = act + (size_t)b * I;
                for (int i = 0; i < I; i++) a[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
            }
            matmul(&L->down, act, n, y, &scratch);
#pragma omp for schedule(static)
            for (int b = 0; b < n; b++) {
                float *xb = x + (size_t)b * H, *yb = y + (size_t)b * H;
                for (int i = 0; i < H; i++) xb[i] += yb[i];
            }
        }
#pragma omp for schedule(static)
        for (int b = 0; b < n; b++) rms_norm(x + (size_t)b * H, m->norm, H, m->eps, h + (size_t)b * H);
        matmul(&m->lm_head, h, n, logits, &scratch);
    }
    free(mem);
    return 0;
}
