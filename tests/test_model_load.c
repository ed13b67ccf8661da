/* Model loading and the small pieces under the forward pass: weight binding
 * (every layer role of the tiny shape bound, DSpark stages included), clear
 * errors for unusable checkpoints, the thread pool and the paged KV pool. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "cache/kv_pool.h"
#include "cache/seq_cache.h"
#include "model/model.h"
#include "num/num.h"
#include "test_ops_util.h"

static void test_load_tiny(void **state) {
    (void)state;
    char *dir = tu_mkdtemp("mload");
    assert_int_equal(tn_synth(dir, "tiny", tu_seed() % 1000 + 1), 0);
    tide_status st = {0};
    tide_model *m;
    if (tide_model_load(dir, &m, &st) != 0) fail_msg("%s", st.msg);
    assert_int_equal(m->n_backbone, m->cfg.text.num_hidden_layers);
    assert_true(m->has_dspark);
    int srcs = 0, idx = 0, cand = 0, eng = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const tide_layer *L = &m->layers[i];
        assert_non_null(L->attn.wq_a.data);
        assert_non_null(L->rope_freq);
        if (L->role->is_kv_source) {
            srcs++;
            assert_true(L->attn.has_compressor);
            assert_int_equal(m->kv_src_layer[m->kv_src_slot[i]], i);
        }
        if (L->role->is_index_source) idx++, assert_true(L->attn.has_indexer);
        cand += L->role->is_candidate_source;
        eng += L->has_engram;
        assert_int_equal(L->ffn.n_experts, L->role->n_routed_experts);
    }
    assert_int_equal(srcs, m->n_kv_src);
    assert_true(idx > 0 && cand == 1 && eng == m->cfg.text.n_engram_layer_ids);
    assert_non_null(m->layers[m->n_backbone].main_proj.data);
    assert_non_null(m->layers[m->n_layers - 1].conf_proj.data);
    tide_model_free(m);

    /* a checkpoint written with --layers cannot run: a clear error */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' synth --shape tiny --layers 2 --no-tokenizer -o '%s/part' >/dev/null 2>&1",
             TIDE_EXE, dir);
    assert_int_equal(tu_system(cmd, NULL), 0);
    snprintf(cmd, sizeof cmd, "%s/part", dir);
    assert_int_equal(tide_model_load(cmd, &m, &st), -1);
    assert_non_null(strstr(st.msg, "cannot run"));
    assert_int_equal(tide_model_load("/nonexistent/tide/model", &m, &st), -1);
    assert_non_null(strstr(st.msg, "/nonexistent/tide/model"));
    tu_rmtree(dir);
    free(dir);
}

typedef struct {
    int64_t *hits;
} pool_arg;

static void count_task(void *arg, int64_t task, int thread) {
    (void)thread;
    pool_arg *a = arg;
    __atomic_fetch_add(&a->hits[task], 1, __ATOMIC_RELAXED);
}

static void test_threadpool(void **state) {
    (void)state;
    tide_status st = {0};
    int sizes[] = {1, 2, 5};
    for (int k = 0; k < 3; k++) {
        tide_pool *p;
        assert_int_equal(tide_pool_create(sizes[k], &p, &st), 0);
        assert_int_equal(tide_pool_size(p), sizes[k]);
        for (int rep = 0; rep < 20; rep++) {
            int64_t n = 1 + (rep * 37) % 300;
            int64_t *hits = calloc((size_t)n, sizeof *hits);
            pool_arg a = {hits};
            tide_pool_for(p, n, count_task, &a);
            for (int64_t i = 0; i < n; i++) assert_int_equal(hits[i], 1);
            free(hits);
        }
        tide_pool_destroy(p);
    }
    int64_t h[3] = {0};
    pool_arg a = {h};
    tide_pool_for(NULL, 3, count_task, &a);
    assert_int_equal(h[2], 1);
    tide_pool *p;
    assert_int_equal(tide_pool_create(0, &p, &st), -1);
}

static void test_kv_pool(void **state) {
    (void)state;
    tide_status st = {0};
    tide_kv_pool pool;
    assert_int_equal(tide_kv_pool_init(&pool, 4, 8, 3, 5, &st), 0);
    tide_block_table a = {0}, b = {0};
    assert_int_equal(tide_kv_reserve(&pool, &a, 9, &st), 0); /* 3 blocks */
    assert_int_equal(tide_kv_reserve(&pool, &b, 8, &st), 0); /* 2 blocks: the pool is full */
    /* entries are packed (FP4): what comes back is the simulation of what went in */
    for (int64_t j = 0; j < 9; j++) {
        float l[8], k[3];
        for (int d = 0; d < 8; d++) l[d] = (float)(j * 100 + d);
        for (int d = 0; d < 3; d++) k[d] = (float)(-j * 100 - d);
        tide_kv_put_latent(&pool, &a, j, l);
        tide_kv_put_key(&pool, &a, j, k);
    }
    float neg[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    for (int64_t j = 0; j < 8; j++) tide_kv_put_latent(&pool, &b, j, neg);
    for (int64_t j = 0; j < 9; j++) {
        float l[8], k[3], gl[8], gk[3];
        for (int d = 0; d < 8; d++) l[d] = (float)(j * 100 + d);
        for (int d = 0; d < 3; d++) k[d] = (float)(-j * 100 - d);
        tide_sim_fp4_e4m3(l, 8, 16);
        tide_sim_fp4_e8m0(k, 3, 32);
        tide_kv_get_latent(&pool, &a, j, gl);
        tide_kv_get_key(&pool, &a, j, gk);
        assert_memory_equal(l, gl, sizeof l);
        assert_memory_equal(k, gk, sizeof k);
    }
    assert_int_equal(tide_kv_reserve(&pool, &a, 13, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_NOMEM);
    tide_kv_release(&pool, &b);
    assert_int_equal(tide_kv_reserve(&pool, &a, 13, &st), 0);
    tide_kv_release(&pool, &a);
    tide_kv_pool_free(&pool);

    tide_seq_cache c;
    assert_int_equal(tide_seq_cache_init(&c, 3, 8, 16, 2, 2, &st), 0);
    int32_t t[5] = {1, 2, 3, 4, 5};
    assert_int_equal(tide_seq_cache_push_tokens(&c, t, 5, &st), 0);
    assert_true(tide_seq_ring(&c, 2, 13) == c.rings + (2 * 8 + 5) * c.ring_bytes);
    assert_int_equal(c.ring_bytes, 16 + 1); /* FP8 codes + one UE8M0 scale */
    tide_seq_cache_free(&c, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_tiny),
        cmocka_unit_test(test_threadpool),
        cmocka_unit_test(test_kv_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
