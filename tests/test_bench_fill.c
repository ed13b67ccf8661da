/* The synthetic decode context (src/bench/ctx_fill.h) on synth:tiny, loaded
 * through the benchmark's own --model synth:SHAPE path (bench/model_spec.h):
 *   - every filled value is a fixed point of the simulation real values go
 *     through (FP8 window, FP4 latents and keys) and not trivially zero;
 *   - counts: pos, token history (in the vocabulary, never the image token),
 *     compressed positions per KV source, reserved blocks, the published
 *     keys, the partial ratio-2 group of an odd context;
 *   - the same seed gives the same contents, another seed others;
 *   - decode steps run on it and give finite logits;
 *   - a cache that is not fresh, and a KV pool too small, fail cleanly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/ctx_fill.h"
#include "bench/model_spec.h"
#include "model/forward.h"
#include "num/num.h"
#include "testutil.h"

typedef struct fixture {
    tide_model *m;
    uint64_t seed;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    tide_status st = {0};
    if (!f || tide_bench_load_model("synth:tiny", 2, &f->m, &st) != 0) {
        fprintf(stderr, "setup: %s\n", st.msg);
        free(f);
        return -1;
    }
    f->seed = tu_seed();
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    tide_model_free(f->m);
    free(f);
    return 0;
}

static tide_fwd_ctx *ctx(const tide_model *m, int64_t max_blocks) {
    tide_fwd_opts o = tide_fwd_default_opts();
    o.kv_block = 4;
    o.kv_max_blocks = max_blocks;
    tide_fwd_ctx *fx;
    tide_status st = {0};
    assert_int_equal(tide_fwd_ctx_create(m, tide_cpu_ops(), 2, &o, &fx, &st), 0);
    return fx;
}

/* x is unchanged by the simulation sim(x, n, block) and not all zero. */
/* A packed entry (kv_pack.h) of format `which` (0 window, 1 latent, 2 key):
 * its values are on the format's grid (a fixed point of the simulation) and
 * mostly non-zero. */
static void assert_fixed(const uint8_t *e, int64_t n, int which) {
    tide_kv_fmt f = which == 0 ? TIDE_KV_WINDOW : which == 1 ? TIDE_KV_LATENT : TIDE_KV_KEY;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    tide_kv_unpack(f, e, n, x);
    memcpy(y, x, (size_t)n * sizeof *y);
    if (which == 0) tide_sim_fp8_act(y, (size_t)n, 32);
    else if (which == 1) tide_sim_fp4_e4m3(y, (size_t)n, 16);
    else tide_sim_fp4_e8m0(y, (size_t)n, 32);
    assert_memory_equal(x, y, (size_t)n * sizeof *y);
    int nonzero = 0;
    for (int64_t i = 0; i < n; i++) nonzero += x[i] != 0.0f && isfinite(x[i]);
    assert_true(nonzero > n / 4);
    free(x);
    free(y);
}

static void test_contents(void **state) {
    fixture *f = *state;
    const tide_model *m = f->m;
    tide_fwd_ctx *fx = ctx(m, 4096);
    tide_kv_pool *kv = tide_fwd_kv(fx);
    tide_status st = {0};
    tide_seq_cache c;
    int64_t n = 37 + (int64_t)(f->seed % 20) * 2; /* odd: a ratio-2 group is pending */
    assert_int_equal(tide_fwd_seq_init(fx, &c, &st), 0);
    assert_int_equal(tide_bench_fill_context(fx, &c, n, f->seed, &st), 0);
    assert_int_equal(c.pos, n);
    for (int64_t i = 0; i < n; i++) {
        assert_true(c.tokens[i] >= 3 && c.tokens[i] < m->cfg.text.vocab_size);
        assert_true(c.tokens[i] != m->cfg.image_token_id);
    }
    for (int l = 0; l < c.n_layers; l++)
        for (int64_t p = n - c.window; p < n; p++) assert_fixed(tide_seq_ring(&c, l, p), c.head_dim, 0);
    for (int k = 0; k < m->n_kv_src; k++) {
        const tide_layer_role *r = &m->cfg.roles[m->kv_src_layer[k]];
        int64_t nc = n / r->compress_ratio;
        assert_int_equal(c.n_comp[k], nc);
        assert_true(c.tables[k].n * kv->block_len >= nc);
        for (int64_t j = 0; j < nc; j++) {
            assert_fixed(tide_kv_latent(kv, &c.tables[k], j), kv->latent_dim, 1);
            assert_fixed(tide_kv_key(kv, &c.tables[k], j), kv->key_dim, 2);
        }
        if (r->compress_ratio == 2) { /* slot 0 holds the pending group's first token */
            const float *g = c.cmp_kv + (int64_t)k * c.max_ratio * c.head_dim;
            int nonzero = 0;
            for (int64_t i = 0; i < c.head_dim; i++) nonzero += g[i] != 0.0f;
            assert_true(nonzero > 0);
        }
    }
    /* tiny's KV sources are 2, 4, 6, each an indexer owning its keys: 6 published last */
    assert_int_equal(c.published, 6);
    /* decode steps on it */
    float *lg = malloc((size_t)m->cfg.text.vocab_size * sizeof *lg);
    for (int s = 0; s < 3; s++) {
        int32_t tok = 100 + s;
        tide_step_seq q = {&c, &tok, 1, TIDE_LOGITS_LAST};
        tide_step_out out = {lg, NULL};
        if (tide_forward(fx, &q, 1, &out, &st) != 0) fail_msg("%s", st.msg);
        for (int64_t i = 0; i < m->cfg.text.vocab_size; i++) assert_true(isfinite(lg[i]));
    }
    assert_int_equal(c.pos, n + 3);
    free(lg);
    /* not fresh any more */
    assert_int_equal(tide_bench_fill_context(fx, &c, 5, f->seed, &st), -1);
    assert_non_null(strstr(st.msg, "fresh"));
    tide_fwd_seq_free(fx, &c);
    assert_int_equal(tide_kv_used(kv), 0);
    tide_fwd_ctx_free(fx);
}

static void test_reproducible(void **state) {
    fixture *f = *state;
    tide_fwd_ctx *fx = ctx(f->m, 4096);
    tide_kv_pool *kv = tide_fwd_kv(fx);
    tide_status st = {0};
    tide_seq_cache a, b, c;
    assert_int_equal(tide_fwd_seq_init(fx, &a, &st), 0);
    assert_int_equal(tide_fwd_seq_init(fx, &b, &st), 0);
    assert_int_equal(tide_fwd_seq_init(fx, &c, &st), 0);
    assert_int_equal(tide_bench_fill_context(fx, &a, 30, f->seed, &st), 0);
    assert_int_equal(tide_bench_fill_context(fx, &b, 30, f->seed, &st), 0);
    assert_int_equal(tide_bench_fill_context(fx, &c, 30, f->seed + 1, &st), 0);
    size_t ring = (size_t)a.n_layers * (size_t)a.window * a.ring_bytes;
    assert_memory_equal(a.tokens, b.tokens, 30 * sizeof(int32_t));
    assert_memory_equal(a.rings, b.rings, ring);
    assert_memory_not_equal(a.rings, c.rings, ring);
    assert_memory_equal(tide_kv_latent(kv, &a.tables[0], 7), tide_kv_latent(kv, &b.tables[0], 7),
                        kv->lat_bytes);
    assert_memory_not_equal(tide_kv_key(kv, &a.tables[2], 20), tide_kv_key(kv, &c.tables[2], 20),
                            kv->key_bytes);
    tide_fwd_seq_free(fx, &a);
    tide_fwd_seq_free(fx, &b);
    tide_fwd_seq_free(fx, &c);
    /* context 0: an empty but valid cache */
    assert_int_equal(tide_fwd_seq_init(fx, &a, &st), 0);
    assert_int_equal(tide_bench_fill_context(fx, &a, 0, f->seed, &st), 0);
    assert_int_equal(a.pos, 0);
    assert_int_equal(a.published, -1);
    tide_fwd_seq_free(fx, &a);
    assert_int_equal(tide_kv_used(kv), 0);
    tide_fwd_ctx_free(fx);
}

static void test_pool_exhausted(void **state) {
    fixture *f = *state;
    tide_fwd_ctx *fx = ctx(f->m, 8); /* 8 blocks of 4 positions */
    tide_status st = {0};
    tide_seq_cache c;
    assert_int_equal(tide_fwd_seq_init(fx, &c, &st), 0);
    assert_int_equal(tide_bench_fill_context(fx, &c, 200, f->seed, &st), -1);
    assert_non_null(strstr(st.msg, "context fill of 200 tokens"));
    tide_fwd_seq_free(fx, &c);
    assert_int_equal(tide_kv_used(tide_fwd_kv(fx)), 0);
    assert_int_equal(tide_fwd_seq_init(fx, &c, &st), 0);
    assert_int_equal(tide_bench_fill_context(fx, &c, -1, f->seed, &st), -1);
    tide_fwd_seq_free(fx, &c);
    tide_fwd_ctx_free(fx);
    /* --model: a missing directory and an unknown shape */
    tide_model *m = NULL;
    assert_int_equal(tide_bench_load_model("synth:huge", 1, &m, &st), -1);
    assert_non_null(strstr(st.msg, "huge"));
    assert_int_equal(tide_bench_load_model("/nonexistent/tide-model", 1, &m, &st), -1);
    assert_null(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contents),
        cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_pool_exhausted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
