/* Indexer scoring and top-k on the CPU. Scores follow the reference's BF16
 * einsum / relu / weight product / head sum; top-k breaks ties toward the
 * LOWER position (tide's rule; torch.topk's tie order is unspecified). */
#include <stdlib.h>

#include "backend/cpu/cpu_internal.h"

void tide_cpu_index_scores(const tide_ops *self, const float *q, int heads, int64_t d, const float *w,
                           const float *keys, int64_t n, float *score) {
    (void)self; /* the CPU ops have no state */
    for (int64_t t = 0; t < n; t++) {
        const float *k = keys + t * d;
        float s = 0;
        for (int h = 0; h < heads; h++) {
            float qk = tide_round_bf16(tide_cpu_dot(q + h * d, k, d));
            if (qk < 0) qk = 0;
            s += tide_round_bf16(qk * w[h]);
        }
        score[t] = tide_round_bf16(s);
    }
}

/* higher score first; equal scores (including -inf) lower position first */
static int better(const float *s, int32_t a, int32_t b) {
    if (s[a] != s[b]) return s[a] > s[b];
    return a < b;
}

static void sift_down(const float *s, int32_t *heap, int n, int i) {
    /* min-heap on "better": the root is the WORST of the kept entries */
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && better(s, heap[m], heap[l])) m = l;
        if (r < n && better(s, heap[m], heap[r])) m = r;
        if (m == i) return;
        int32_t t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int tide_cpu_topk_sorted(const tide_ops *self, const float *score, int64_t n, int k, int32_t *out, int32_t *scratch) {
    (void)self; /* the CPU ops have no state */
    (void)scratch;
    if (k > n) k = (int)n;
    if (k <= 0) return 0;
    for (int i = 0; i < k; i++) out[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(score, out, k, i);
    for (int64_t t = k; t < n; t++)
        if (better(score, (int32_t)t, out[0])) {
            out[0] = (int32_t)t;
            sift_down(score, out, k, 0);
        }
    qsort(out, (size_t)k, sizeof *out, cmp_i32);
    return k;
}
