/* The CPU GEMM: y = x W^T for every weight format (see backend/ops.h).
 *
 * Tiling: the output columns are cut into tiles of TILE rows of W; a task
 * decodes its tile of W once into f32 (e4m3/e2m1 code times its power-of-two
 * block scale: exact) and then runs every activation row against it. For the
 * quantised formats each activation row is first quantise-dequantised to FP8
 * per 32 (exact f32 values), and the dot product is accumulated block by
 * block: acc += dot32(a_b, w_b), in block order, as the reference's
 * per-block fp32 loop does. Output is rounded to BF16 for quantised weights,
 * and for F32/BF16 weights when asked. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"

#define TILE 16

typedef struct {
    const tide_weight *w;
    const float *x; /* activations as used: quantise-simulated for FP8/FP4 */
    int64_t rows;
    float *y;
    int round_out;
    float *scratch; /* per thread: TILE * in floats */
    uint16_t *s16;  /* per thread: in bf16 codes */
    float lut8[256];
    float lut4[16];
} lin_job;

static inline float bf16_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void decode_rows(const lin_job *j, int64_t o0, int64_t n, float *dst, uint16_t *h16) {
    const tide_weight *w = j->w;
    int64_t in = w->in;
    for (int64_t r = 0; r < n; r++) {
        int64_t o = o0 + r;
        float *d = dst + r * in;
        switch (w->type) {
        case TIDE_W_F32:
            memcpy(d, (const float *)w->data + o * in, (size_t)in * sizeof(float));
            break;
        case TIDE_W_BF16: {
            /* copy the row's codes (the mapping need not be aligned), then
             * widen: bf16 is the top half of an f32 */
            const uint8_t *s = (const uint8_t *)w->data + o * in * 2;
            memcpy(h16, s, (size_t)in * 2);
            for (int64_t i = 0; i < in; i++) d[i] = bf16_f32(h16[i]);
            break;
        }
        case TIDE_W_FP8: {
            const uint8_t *c = (const uint8_t *)w->data + o * in;
            int64_t nb = (in + 31) / 32;
            const uint8_t *sc = w->scale + (o / 32) * nb;
            for (int64_t b = 0; b < in; b += 32) {
                float s = tide_e8m0_to_f32(sc[b / 32]);
                for (int64_t i = b; i < b + 32 && i < in; i++) d[i] = j->lut8[c[i]] * s;
            }
            break;
        }
        case TIDE_W_FP4: {
            const uint8_t *c = (const uint8_t *)w->data + o * (in / 2);
            const uint8_t *sc = w->scale + o * (in / 32);
            for (int64_t b = 0; b < in; b += 32) {
                float s = tide_e8m0_to_f32(sc[b / 32]);
                for (int64_t i = b; i < b + 32; i += 2) {
                    d[i] = j->lut4[c[i / 2] & 15] * s;
                    d[i + 1] = j->lut4[c[i / 2] >> 4] * s;
                }
            }
            break;
        }
        }
    }
}

static void lin_task(void *arg, int64_t task, int thread) {
    lin_job *j = arg;
    const tide_weight *w = j->w;
    int64_t in = w->in, o0 = task * TILE;
    int64_t n = w->out - o0 < TILE ? w->out - o0 : TILE;
    float *wt = j->scratch + (int64_t)thread * TILE * in;
    decode_rows(j, o0, n, wt, j->s16 + (int64_t)thread * in);
    int blocked = w->type == TIDE_W_FP8 || w->type == TIDE_W_FP4;
    for (int64_t r = 0; r < j->rows; r++) {
        const float *xr = j->x + r * in;
        float *yr = j->y + r * w->out + o0;
        for (int64_t c = 0; c < n; c++) {
            const float *wr = wt + c * in;
            float acc;
            if (blocked) {
                acc = 0.0f;
                for (int64_t b = 0; b < in; b += 32)
                    acc += tide_cpu_dot(xr + b, wr + b, in - b < 32 ? in - b : 32);
            } else {
                acc = tide_cpu_dot(xr, wr, in);
            }
            yr[c] = j->round_out ? tide_round_bf16(acc) : acc;
        }
    }
}

void tide_cpu_linear(const tide_ops *self, tide_pool *pool, const tide_weight *w, const float *x, int64_t rows,
                     float *y, int flags) {
    (void)self; /* the CPU ops have no state */
    if (rows <= 0 || w->out <= 0) return;
    lin_job j;
    memset(&j, 0, sizeof j);
    j.w = w;
    j.rows = rows;
    j.y = y;
    int quant = w->type == TIDE_W_FP8 || w->type == TIDE_W_FP4;
    j.round_out = quant || (flags & TIDE_LIN_BF16_OUT);
    float *xq = NULL;
    if (quant) {
        /* the reference quantises the activation to FP8 per 32 before the GEMM */
        xq = malloc((size_t)(rows * w->in) * sizeof(float));
        if (!xq) abort(); /* out of memory in a kernel: nothing sensible to return */
        memcpy(xq, x, (size_t)(rows * w->in) * sizeof(float));
        for (int64_t r = 0; r < rows; r++) tide_sim_fp8_act(xq + r * w->in, (size_t)w->in, 32);
        j.x = xq;
    } else {
        j.x = x;
    }
    if (w->type == TIDE_W_FP8)
        for (int c = 0; c < 256; c++) j.lut8[c] = tide_e4m3_to_f32((uint8_t)c);
    if (w->type == TIDE_W_FP4)
        for (int c = 0; c < 16; c++) j.lut4[c] = tide_e2m1_to_f32((uint8_t)c);
    int nt = tide_pool_size(pool);
    j.scratch = malloc((size_t)nt * TILE * (size_t)w->in * sizeof(float));
    j.s16 = malloc((size_t)nt * (size_t)w->in * sizeof(uint16_t));
    if (!j.scratch || !j.s16) abort();
    tide_pool_for(pool, (w->out + TILE - 1) / TILE, lin_task, &j);
    free(j.scratch);
    free(j.s16);
    free(xq);
}
