/* The reference-counted KV pool: private blocks behave as before counts
 * existed; shared blocks survive until their last holder lets go; the
 * free-block accounting stays exact; bad calls change nothing. Finishes with
 * random operations against a model of the counts. */
#include <stdlib.h>
#include <string.h>

#include "cache/kv_pool.h"
#include "num/num.h"
#include "testutil.h"

/* Position j of table t gets latent {0, j+1, 0..} and key {-j-1, 0..},
 * packed (dims <= 16). */
static void put_pos(const tide_kv_pool *p, const tide_block_table *t, int64_t j) {
    float l[16] = {0}, k[16] = {0};
    l[1] = (float)(j + 1);
    k[0] = (float)(-j - 1);
    tide_kv_put_latent(p, t, j, l);
    tide_kv_put_key(p, t, j, k);
}

/* Does position j hold what put_pos(j) stored (the simulated values)? */
static int has_pos(const tide_kv_pool *p, const tide_block_table *t, int64_t j) {
    float l[16] = {0}, k[16] = {0}, gl[16], gk[16];
    l[1] = (float)(j + 1);
    k[0] = (float)(-j - 1);
    tide_sim_fp4_e4m3(l, (size_t)p->latent_dim, 16);
    tide_sim_fp4_e8m0(k, (size_t)p->key_dim, 32);
    tide_kv_get_latent(p, t, j, gl);
    tide_kv_get_key(p, t, j, gk);
    return !memcmp(l, gl, (size_t)p->latent_dim * sizeof(float)) && !memcmp(k, gk, (size_t)p->key_dim * sizeof(float)) &&
           gl[1] != 0 && gk[0] != 0;
}

static void check_accounting(const tide_kv_pool *p) {
    int64_t zero = 0;
    for (int64_t b = 0; b < p->n_blocks; b++) {
        assert_true(p->ref[b] >= 0);
        if (p->ref[b] == 0) zero++;
    }
    assert_int_equal(zero, p->n_free);
    /* every free-list entry is a distinct block with no reference */
    char *seen = calloc((size_t)(p->n_blocks ? p->n_blocks : 1), 1);
    for (int64_t i = 0; i < p->n_free; i++) {
        int32_t b = p->free_list[i];
        assert_true(b >= 0 && b < p->n_blocks);
        assert_int_equal(p->ref[b], 0);
        assert_false(seen[b]);
        seen[b] = 1;
    }
    free(seen);
    assert_int_equal(tide_kv_used(p) + p->n_free, p->n_blocks);
    assert_int_equal(tide_kv_available(p), p->max_blocks - tide_kv_used(p));
}

static void test_private(void **state) {
    (void)state;
    tide_status st = {0};
    tide_kv_pool p;
    assert_int_equal(tide_kv_pool_init(&p, 2, 4, 3, 6, &st), 0);
    tide_block_table a = {0}, b = {0};
    assert_int_equal(tide_kv_reserve(&p, &a, 5, &st), 0); /* 3 blocks */
    assert_int_equal(a.n, 3);
    for (int64_t i = 0; i < a.n; i++) assert_int_equal(tide_kv_block_refs(&p, a.blocks[i]), 1);
    assert_int_equal(tide_kv_used(&p), 3);
    assert_int_equal(tide_kv_available(&p), 3);
    assert_int_equal(tide_kv_reserve(&p, &b, 6, &st), 0);
    assert_int_equal(tide_kv_available(&p), 0);
    assert_int_equal(tide_kv_reserve(&p, &b, 7, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_NOMEM);
    assert_int_equal(b.n, 3);
    check_accounting(&p);
    tide_kv_release(&p, &a);
    assert_int_equal(a.n, 0);
    assert_null(a.blocks);
    assert_int_equal(tide_kv_available(&p), 3);
    check_accounting(&p);
    tide_kv_release(&p, &b);
    assert_int_equal(tide_kv_used(&p), 0);
    check_accounting(&p);
    tide_kv_pool_free(&p);
}

static void test_share(void **state) {
    (void)state;
    tide_status st = {0};
    tide_kv_pool p;
    assert_int_equal(tide_kv_pool_init(&p, 2, 3, 2, 8, &st), 0);
    tide_block_table a = {0}, b = {0};
    assert_int_equal(tide_kv_reserve(&p, &a, 8, &st), 0); /* 4 blocks */
    for (int64_t j = 0; j < 8; j++) put_pos(&p, &a, j);
    /* b shares a's first three blocks and adds one private block */
    assert_int_equal(tide_kv_share(&p, &b, a.blocks, 3, &st), 0);
    assert_int_equal(b.n, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(tide_kv_block_refs(&p, a.blocks[i]), 2);
    assert_int_equal(tide_kv_block_refs(&p, a.blocks[3]), 1);
    assert_int_equal(tide_kv_used(&p), 4);
    assert_int_equal(tide_kv_reserve(&p, &b, 8, &st), 0);
    assert_int_equal(b.n, 4);
    assert_int_not_equal(b.blocks[3], a.blocks[3]);
    assert_int_equal(tide_kv_used(&p), 5);
    for (int64_t j = 0; j < 6; j++) assert_true(has_pos(&p, &b, j));
    /* a third holder that is not a table (the prefix cache) */
    int32_t held[2] = {a.blocks[0], a.blocks[1]};
    assert_int_equal(tide_kv_ref(&p, held, 2, &st), 0);
    assert_int_equal(tide_kv_block_refs(&p, held[0]), 3);
    check_accounting(&p);

    /* a lets go: its private last block is freed, the shared ones stay */
    int32_t a3 = a.blocks[3], a2 = a.blocks[2];
    tide_kv_release(&p, &a);
    assert_int_equal(tide_kv_block_refs(&p, a3), 0);
    assert_int_equal(tide_kv_block_refs(&p, a2), 1);
    assert_int_equal(tide_kv_block_refs(&p, held[0]), 2);
    assert_int_equal(tide_kv_used(&p), 4);
    for (int64_t j = 0; j < 6; j++) assert_true(has_pos(&p, &b, j));
    check_accounting(&p);
    /* b lets go: only the cache's blocks remain */
    tide_kv_release(&p, &b);
    assert_int_equal(tide_kv_used(&p), 2);
    assert_int_equal(tide_kv_block_refs(&p, a2), 0);
    check_accounting(&p);
    /* a new sequence can share the held blocks again, with their contents */
    tide_block_table c = {0};
    assert_int_equal(tide_kv_share(&p, &c, held, 2, &st), 0);
    for (int64_t j = 0; j < 4; j++) assert_true(has_pos(&p, &c, j));
    assert_int_equal(tide_kv_unref(&p, held, 2, &st), 0); /* the cache evicts */
    assert_int_equal(tide_kv_used(&p), 2);                  /* c still holds them */
    tide_kv_release(&p, &c);
    assert_int_equal(tide_kv_used(&p), 0);
    check_accounting(&p);
    tide_kv_pool_free(&p);
}

static void test_bad_calls(void **state) {
    (void)state;
    tide_status st = {0};
    tide_kv_pool p;
    assert_int_equal(tide_kv_pool_init(&p, 1, 2, 1, 4, &st), 0);
    tide_block_table a = {0}, b = {0};
    assert_int_equal(tide_kv_reserve(&p, &a, 2, &st), 0);
    int32_t blk[3] = {a.blocks[0], a.blocks[1], 999};
    memset(&st, 0, sizeof st);
    assert_int_equal(tide_kv_share(&p, &b, blk, 3, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_INVALID);
    assert_non_null(strstr(st.msg, "outside the pool"));
    assert_int_equal(b.n, 0); /* all-or-nothing */
    assert_int_equal(tide_kv_block_refs(&p, blk[0]), 1);
    assert_int_equal(tide_kv_block_refs(&p, 999), -1);
    assert_int_equal(tide_kv_block_refs(&p, -1), -1);
    /* a free block cannot be shared (the pool grew 4 blocks, 2 are free) */
    int32_t free_blk = p.free_list[0];
    assert_int_equal(tide_kv_share(&p, &b, &free_blk, 1, &st), -1);
    assert_non_null(strstr(st.msg, "free"));
    assert_int_equal(tide_kv_ref(&p, &free_blk, 1, &st), -1);
    assert_int_equal(tide_kv_share(&p, &b, NULL, 1, &st), -1);
    assert_int_equal(tide_kv_ref(&p, blk, -1, &st), -1);
    /* unref more often than referenced: nothing changes */
    int32_t twice[2] = {a.blocks[0], a.blocks[0]};
    assert_int_equal(tide_kv_unref(&p, twice, 2, &st), -1);
    assert_non_null(strstr(st.msg, "more often"));
    assert_int_equal(tide_kv_block_refs(&p, a.blocks[0]), 1);
    check_accounting(&p);
    /* with two references, twice is fine, and the block is freed once */
    assert_int_equal(tide_kv_ref(&p, twice, 1, &st), 0);
    assert_int_equal(tide_kv_unref(&p, twice, 2, &st), 0);
    assert_int_equal(tide_kv_block_refs(&p, twice[0]), 0);
    check_accounting(&p);
    a.blocks[0] = a.blocks[1]; /* the table must not free block 0 again */
    a.n = 1;
    tide_kv_release(&p, &a);
    check_accounting(&p);
    assert_int_equal(tide_kv_used(&p), 0);
    /* zero-length calls are no-ops */
    assert_int_equal(tide_kv_share(&p, &b, NULL, 0, &st), 0);
    assert_int_equal(tide_kv_unref(&p, NULL, 0, &st), 0);
    tide_kv_release(&p, &b);
    tide_kv_pool_free(&p);
    assert_int_equal(tide_kv_pool_init(&p, 0, 2, 1, 4, &st), -1);
    tide_kv_pool_free(&p);
}

/* Random reserve / share / ref / unref / release against a model count. */
static void test_random(void **state) {
    (void)state;
    tu_rng r = {tu_seed()};
    enum { NT = 6, MAXB = 40 };
    for (int round = 0; round < 20; round++) {
        tide_status st = {0};
        tide_kv_pool p;
        assert_int_equal(tide_kv_pool_init(&p, 1 + (int)(tu_next(&r) % 3), 2, 1, MAXB, &st), 0);
        tide_block_table t[NT];
        memset(t, 0, sizeof t);
        int32_t model[MAXB] = {0};
        int32_t held[4 * MAXB];
        int n_held = 0;
        for (int op = 0; op < 400; op++) {
            int k = (int)(tu_next(&r) % NT);
            switch (tu_next(&r) % 5) {
            case 0: { /* reserve more positions */
                int64_t n_pos = (int64_t)(tu_next(&r) % 12);
                int64_t before = t[k].n;
                if (tide_kv_reserve(&p, &t[k], n_pos, &st) == 0 || st.code == TIDE_ERR_NOMEM)
                    for (int64_t i = before; i < t[k].n; i++) {
                        assert_int_equal(model[t[k].blocks[i]], 0);
                        model[t[k].blocks[i]] = 1;
                    }
                else
                    fail_msg("%s", st.msg);
                break;
            }
            case 1: { /* share some of another table's blocks */
                int src = (int)(tu_next(&r) % NT);
                if (t[src].n == 0 || src == k) break;
                /* tables grow past MAXB entries by sharing: copy at most MAXB */
                int64_t avail = t[src].n < MAXB ? t[src].n : MAXB;
                int64_t n = 1 + (int64_t)(tu_next(&r) % (uint64_t)avail);
                int32_t tmp[MAXB];
                memcpy(tmp, t[src].blocks, (size_t)n * sizeof *tmp);
                if (tide_kv_share(&p, &t[k], tmp, n, &st) != 0) fail_msg("share: %s", st.msg);
                for (int64_t i = 0; i < n; i++) model[tmp[i]]++;
                break;
            }
            case 2: /* the cache takes a reference */
                if (t[k].n && n_held < 4 * MAXB) {
                    int32_t b = t[k].blocks[tu_next(&r) % (uint64_t)t[k].n];
                    assert_int_equal(tide_kv_ref(&p, &b, 1, &st), 0);
                    held[n_held++] = b;
                    model[b]++;
                }
                break;
            case 3: /* the cache drops one */
                if (n_held) {
                    int i = (int)(tu_next(&r) % (uint64_t)n_held);
                    assert_int_equal(tide_kv_unref(&p, &held[i], 1, &st), 0);
                    model[held[i]]--;
                    held[i] = held[--n_held];
                }
                break;
            default:
                for (int64_t i = 0; i < t[k].n; i++) model[t[k].blocks[i]]--;
                tide_kv_release(&p, &t[k]);
            }
            for (int b = 0; b < p.n_blocks; b++) assert_int_equal(tide_kv_block_refs(&p, b), model[b]);
            check_accounting(&p);
        }
        for (int k = 0; k < NT; k++) tide_kv_release(&p, &t[k]);
        assert_int_equal(tide_kv_unref(&p, held, n_held, &st), 0);
        assert_int_equal(tide_kv_used(&p), 0);
        check_accounting(&p);
        tide_kv_pool_free(&p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_private),
        cmocka_unit_test(test_share),
        cmocka_unit_test(test_bad_calls),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
