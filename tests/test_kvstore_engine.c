/* End to end through the engine (docs/kvstore.md): a two-turn conversation
 * where the first turn's process writes its pages to a 12-node 10+2 store
 * and exits, and a new process answers the second turn from the store. Its
 * prefill computes only the bounded replay plus the new tokens (the
 * engine's statistics), and its tokens equal those of one engine answering
 * both turns with the in-memory prefix cache. A store of another model
 * (another fingerprint) is not used.
 *
 * Tiny checkpoint (window 8), pages of 8 tokens over blocks of 2, a replay
 * of 10 tokens, fresh random prompts per run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/kvstore_tiers.h"
#include "engine/engine.h"
#include "test_ops_util.h"
#include "tide.h"

typedef tn_model_fixture fixture;

enum { PAGE = 8, KVB = 2, REPLAY = 10, N1 = 29, GEN1 = 6, NEW2 = 5, GEN2 = 4, MAXT = 64 };

static int setup(void **state) { return tn_model_setup(state, "kvseng", 0, 11); }
static int teardown(void **state) { return tn_model_teardown(state); }

typedef struct {
    int32_t out[MAXT];
    int64_t n_out, tokens_fed, hit, replay, fetched, stored;
} turn;

static tide_engine_config cfg_for(const tide_kv_tier *tier) {
    tide_engine_config c = tide_engine_config_default();
    c.n_threads = 2;
    c.kv_block = KVB;
    c.page_tokens = PAGE;
    c.prefix_replay = REPLAY;
    c.max_step_tokens = 64;
    c.prefill_chunk = PAGE;
    c.kv_tier = tier;
    return c;
}

static void run_turn(tide_engine *e, const int32_t *prompt, int64_t n, int gen, turn *t) {
    tide_status st = {0};
    tide_request r = tide_request_default();
    r.prompt = prompt;
    r.n_prompt = n;
    r.sampling.temperature = 0;
    r.sampling.max_tokens = gen;
    tide_request_id id;
    tide_engine_stats before, after;
    tide_engine_get_stats(e, &before);
    if (tide_engine_submit(e, &r, &id, &st) != 0 || tide_engine_run(e, &st) != 0) fail_msg("%s", st.msg);
    tide_request_info info;
    if (tide_engine_get(e, id, &info, &st) != 0) fail_msg("%s", st.msg);
    t->n_out = info.n_output;
    memcpy(t->out, info.output, (size_t)info.n_output * sizeof *t->out);
    tide_engine_get_stats(e, &after);
    t->tokens_fed = after.tokens_fed - before.tokens_fed;
    t->hit = after.prefix_hit_tokens - before.prefix_hit_tokens;
    t->replay = after.prefix_replay_tokens - before.prefix_replay_tokens;
    t->fetched = after.kv_tier_fetched - before.kv_tier_fetched;
    t->stored = after.kv_tier_stored - before.kv_tier_stored;
    tide_engine_release(e, id);
}

typedef struct {
    char node[12][600];
    const char *nodes[12];
} nodes;

/* One process's turn with the store: open it, run, flush, close. */
static int store_turn(const fixture *f, const nodes *nd, uint64_t fp, const int32_t *prompt, int64_t n, int gen,
                      int overlap, turn *t) {
    tide_kvstore_cfg sc = {0};
    sc.nodes = nd->nodes;
    sc.n_nodes = 12;
    sc.fingerprint = fp;
    sc.no_sync = 1;
    tide_kvstore *s;
    tide_kvtiers *tiers;
    tide_engine *e;
    tide_status st = {0};
    if (tide_kvstore_open(&sc, &s, &st) != 0) return fprintf(stderr, "%s\n", st.msg), -1;
    tide_kvtiers_cfg tc = {0};
    tc.host_bytes = 1 << 20;
    tc.stores[0] = s;
    tc.n_stores = 1;
    tc.fingerprint = fp;
    if (tide_kvtiers_create(&tc, &tiers, &st) != 0) return fprintf(stderr, "%s\n", st.msg), -1;
    tide_engine_config c = cfg_for(tide_kvtiers_hooks(tiers));
    c.overlap = overlap;
    if (tide_engine_create_with_model(&c, f->m, &e, &st) != 0) return fprintf(stderr, "%s\n", st.msg), -1;
    run_turn(e, prompt, n, gen, t);
    tide_engine_destroy(e);
    tide_kvtiers_destroy(tiers); /* writes what is queued */
    tide_kvstore_close(s);
    return 0;
}

/* Runs store_turn in a child process; its result comes back through a pipe. */
static void in_child(const fixture *f, const nodes *nd, uint64_t fp, const int32_t *prompt, int64_t n, int gen,
                     int overlap, turn *t) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        turn r = {0};
        int rc = store_turn(f, nd, fp, prompt, n, gen, overlap, &r);
        _exit(rc == 0 && write(p[1], &r, sizeof r) == (ssize_t)sizeof r ? 0 : 1);
    }
    close(p[1]);
    ssize_t got = read(p[0], t, sizeof *t);
    close(p[0]);
    int ws;
    waitpid(pid, &ws, 0);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    assert_int_equal(got, sizeof *t);
}

static void test_second_turn_from_store(void **state) {
    fixture *f = *state;
    tu_rng r = {tu_seed() ^ 0x5157};
    int64_t V = f->m->cfg.text.vocab_size;
    int32_t p1[N1], p2[MAXT];
    for (int i = 0; i < N1; i++) {
        do p1[i] = (int32_t)(tu_next(&r) % (uint64_t)V);
        while (p1[i] == f->m->cfg.image_token_id);
    }
    char *dir = tu_mkdtemp("kvseng-store");
    nodes nd;
    for (int i = 0; i < 12; i++) {
        snprintf(nd.node[i], sizeof nd.node[i], "%s/node%02d", dir, i);
        nd.nodes[i] = nd.node[i];
    }
    int64_t params[] = {KVB, PAGE, 0, 1};
    uint64_t fp;
    tide_status st = {0};
    if (tide_kv_fingerprint(f->dir, params, 4, &fp, &st) != 0) fail_msg("%s", st.msg);

    /* process 1: the first turn */
    turn t1;
    in_child(f, &nd, fp, p1, N1, GEN1, 0, &t1);
    assert_int_equal(t1.n_out, GEN1);
    assert_int_equal(t1.fetched, 0);
    int64_t n2 = N1 + GEN1 + NEW2;
    memcpy(p2, p1, sizeof p1);
    memcpy(p2 + N1, t1.out, GEN1 * sizeof *p2);
    for (int i = 0; i < NEW2; i++) {
        do p2[N1 + GEN1 + i] = (int32_t)(tu_next(&r) % (uint64_t)V);
        while (p2[N1 + GEN1 + i] == f->m->cfg.image_token_id);
    }
    int64_t pages = (N1 + GEN1 - 1) / PAGE; /* turn 1 fed all but its last token */
    assert_int_equal(t1.stored, pages);

    /* process 2: a new engine answers the second turn from the store (with
     * the overlapped scheduling on: the same tokens either way) */
    turn t2;
    in_child(f, &nd, fp, p2, n2, GEN2, 1, &t2);
    assert_int_equal(t2.fetched, pages);
    assert_int_equal(t2.hit, pages * PAGE);
    assert_int_equal(t2.replay, REPLAY);
    /* prefill: the replay and the tokens after the hit; then GEN2 - 1 decode steps */
    assert_int_equal(t2.tokens_fed, (n2 - (pages * PAGE - REPLAY)) + GEN2 - 1);

    /* the reference: one engine, both turns, the in-memory prefix cache */
    tide_engine_config c = cfg_for(NULL);
    tide_engine *e;
    if (tide_engine_create_with_model(&c, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
    turn r1, r2;
    run_turn(e, p1, N1, GEN1, &r1);
    run_turn(e, p2, n2, GEN2, &r2);
    tide_engine_destroy(e);
    assert_int_equal(r1.n_out, GEN1);
    assert_memory_equal(r1.out, t1.out, GEN1 * sizeof *t1.out);
    assert_int_equal(r2.hit, t2.hit);
    assert_int_equal(r2.tokens_fed, t2.tokens_fed);
    assert_int_equal(r2.n_out, t2.n_out);
    assert_memory_equal(r2.out, t2.out, (size_t)t2.n_out * sizeof *t2.out);

    /* another model's fingerprint finds nothing in the same store */
    turn t3;
    in_child(f, &nd, fp ^ 1, p2, n2, GEN2, 0, &t3);
    assert_int_equal(t3.fetched, 0);
    assert_int_equal(t3.hit, 0);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_second_turn_from_store, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
