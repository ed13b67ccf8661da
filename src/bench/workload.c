/* Generated workloads (workload.h). */
#include "bench/workload.h"

#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"

#define TOKEN_STREAM 0x746f6b6eu /* "tokn" */

int32_t tide_bench_token(uint64_t seed, uint64_t index, int64_t vocab, int64_t image_token) {
    uint64_t w[2];
    tide_rng_words(seed, index, TOKEN_STREAM, 0, w);
    int64_t id = 3 + (int64_t)(w[0] % (uint64_t)(vocab - 3));
    return (int32_t)(id == image_token ? id - 1 : id);
}

/* Allocates n prompt slots over `total` tokens. */
static int alloc_workload(tide_workload *w, int64_t n, int64_t total, int64_t gen, tide_status *st) {
    memset(w, 0, sizeof *w);
    w->prompt = calloc((size_t)n, sizeof *w->prompt);
    w->n_prompt = calloc((size_t)n, sizeof *w->n_prompt);
    int32_t *ids = malloc((size_t)total * sizeof *ids);
    if (!w->prompt || !w->n_prompt || !ids) {
        free(ids);
        tide_workload_free(w);
        return tide_fail(st, TIDE_ERR_NOMEM, "workload: out of memory for %lld tokens", (long long)total);
    }
    w->prompt[0] = ids; /* the block; the other slots point into it */
    w->n = n;
    w->max_tokens = gen;
    w->total_prompt = total;
    return 0;
}

static int check(int64_t n, int64_t gen, int64_t vocab, tide_status *st) {
    if (n < 1 || n > 1000000) return tide_fail(st, TIDE_ERR_INVALID, "workload: %lld requests (1..1000000)", (long long)n);
    if (gen < 1) return tide_fail(st, TIDE_ERR_INVALID, "workload: generate at least 1 token (got %lld)", (long long)gen);
    if (vocab < 5) return tide_fail(st, TIDE_ERR_INVALID, "workload: vocabulary of %lld tokens", (long long)vocab);
    return 0;
}

int tide_workload_random(tide_workload *w, int64_t n, int64_t len_lo, int64_t len_hi, int64_t gen, int64_t vocab,
                         int64_t image_token, uint64_t seed, tide_status *st) {
    memset(w, 0, sizeof *w);
    if (check(n, gen, vocab, st) != 0) return -1;
    if (len_lo < 1 || len_hi < len_lo || len_hi > ((int64_t)1 << 24))
        return tide_fail(st, TIDE_ERR_INVALID, "workload: prompt lengths %lld-%lld (need 1 <= A <= B <= 2^24)",
                         (long long)len_lo, (long long)len_hi);
    int64_t *len = malloc((size_t)n * sizeof *len), total = 0;
    if (!len) return tide_fail(st, TIDE_ERR_NOMEM, "workload: out of memory");
    for (int64_t i = 0; i < n; i++) {
        uint64_t r[2];
        tide_rng_words(seed, (uint64_t)i, TOKEN_STREAM, 1, r);
        len[i] = len_lo + (int64_t)(r[0] % (uint64_t)(len_hi - len_lo + 1));
        total += len[i];
    }
    if (total > ((int64_t)1 << 31)) {
        free(len);
        return tide_fail(st, TIDE_ERR_INVALID, "workload: %lld prompt tokens in all is too many", (long long)total);
    }
    int rc = alloc_workload(w, n, total, gen, st);
    if (rc == 0) {
        int32_t *p = w->prompt[0];
        for (int64_t i = 0; i < n; i++) {
            w->prompt[i] = p;
            w->n_prompt[i] = len[i];
            for (int64_t t = 0; t < len[i]; t++) p[t] = tide_bench_token(seed, (uint64_t)(p - w->prompt[0] + t), vocab, image_token);
            p += len[i];
        }
    }
    free(len);
    return rc;
}

int tide_workload_shared_prefix(tide_workload *w, int64_t n, int64_t shared, int64_t suffix, int64_t gen,
                                int64_t vocab, int64_t image_token, uint64_t seed, tide_status *st) {
    memset(w, 0, sizeof *w);
    if (check(n, gen, vocab, st) != 0) return -1;
    if (shared < 0 || suffix < 0 || shared + suffix < 1 || shared + suffix > ((int64_t)1 << 24) ||
        n * (shared + suffix) > ((int64_t)1 << 31))
        return tide_fail(st, TIDE_ERR_INVALID, "workload: shared %lld + suffix %lld tokens x %lld requests",
                         (long long)shared, (long long)suffix, (long long)n);
    int64_t len = shared + suffix;
    if (alloc_workload(w, n, n * len, gen, st) != 0) return -1;
    int32_t *base = w->prompt[0];
    for (int64_t i = 0; i < n; i++) {
        int32_t *p = base + i * len;
        w->prompt[i] = p;
        w->n_prompt[i] = len;
        for (int64_t t = 0; t < shared; t++) p[t] = tide_bench_token(seed, (uint64_t)t, vocab, image_token);
        for (int64_t t = 0; t < suffix; t++)
            p[shared + t] = tide_bench_token(seed, (uint64_t)(shared + i * suffix + t), vocab, image_token);
    }
    return 0;
}

int tide_workload_cycle(tide_workload *w, const int32_t *const *prompts, const int64_t *n_prompts, int64_t count,
                        int64_t n, int64_t gen, tide_status *st) {
    memset(w, 0, sizeof *w);
    if (check(n, gen, 5, st) != 0) return -1;
    if (count < 1) return tide_fail(st, TIDE_ERR_INVALID, "workload: no prompts");
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t len = n_prompts[i % count];
        if (len < 1 || len > ((int64_t)1 << 24))
            return tide_fail(st, TIDE_ERR_INVALID, "workload: prompt %lld has %lld tokens", (long long)(i % count),
                             (long long)len);
        total += len;
    }
    if (alloc_workload(w, n, total, gen, st) != 0) return -1;
    int32_t *ids = w->prompt[0];
    for (int64_t i = 0, at = 0; i < n; i++) {
        int64_t k = i % count;
        memcpy(ids + at, prompts[k], (size_t)n_prompts[k] * sizeof *ids);
        w->prompt[i] = ids + at;
        w->n_prompt[i] = n_prompts[k];
        at += n_prompts[k];
    }
    return 0;
}

void tide_workload_free(tide_workload *w) {
    if (!w) return;
    if (w->prompt) free(w->prompt[0]);
    free(w->prompt);
    free(w->n_prompt);
    memset(w, 0, sizeof *w);
}
