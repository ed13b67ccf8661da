/* Expert parallelism (src/dist): the CPU communicator between forked rank
 * processes (random variable-sized all-to-all, all-gather, a killed rank and
 * a hung one detected, the survivors shrinking), EPLB's placement against
 * hand-worked cases and its invariants on random loads, and the forward pass
 * with the experts over 2 and 4 ranks giving logits bit-identical to the
 * single process on fresh random sequences, ranks idle in some steps. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dist/comm.h"
#include "dist/ep.h"
#include "dist/eplb.h"
#include "model/forward.h"
#include "test_ops_util.h"

/* ---- EPLB ---------------------------------------------------------------- */

/* Global policy (one group, one node), 4 experts on 6 slots over 2 ranks:
 * loads 10,1,1,1. Copies: expert 0 gets both extra slots (10/2 = 5 > 1,
 * then 10/3 > 1), so per-copy loads are 3.33 x3 and 1 x3. Packing (3 per
 * rank, heaviest first, lightest rank with room, ties to the lower rank):
 * slot0(e0) r0, slot4(e0) r1, slot5(e0) r0 (tie), slot1(e1) r1, slot2(e2)
 * r1, slot3(e3) r0 (r1 full). Rank 0: e0 (copy 0), e0 (copy 2), e3; rank 1:
 * e0 (copy 1), e1, e2. Loads 7.67 / 5.33. */
static void test_eplb_global(void **state) {
    (void)state;
    double load[4] = {10, 1, 1, 1};
    int p2l[6], rep[6], cnt[4];
    tide_status st = {0};
    assert_int_equal(tide_eplb_place(load, 4, 6, 1, 1, 2, p2l, rep, cnt, &st), 0);
    int want_p2l[6] = {0, 0, 3, 0, 1, 2}, want_rep[6] = {0, 2, 0, 1, 0, 0}, want_cnt[4] = {3, 1, 1, 1};
    assert_memory_equal(p2l, want_p2l, sizeof p2l);
    assert_memory_equal(rep, want_rep, sizeof rep);
    assert_memory_equal(cnt, want_cnt, sizeof cnt);
    double b = tide_eplb_balancedness(load, 4, p2l, cnt, 6, 2);
    assert_true(fabs(b - (13.0 / 2) / (10.0 / 3 * 2 + 1)) < 1e-12);
}

/* Hierarchical: 8 experts in 4 groups of 2, 2 nodes of 2 ranks, no extra
 * slots; loads 1..8. Groups weigh 3,7,11,15: g3 -> node 0, g2 -> node 1,
 * g1 -> node 1 (11 < 15), g0 -> node 0. Node 0 holds experts 6,7,0,1
 * (loads 7,8,1,2): e7 r0, e6 r1, e1 r1 (7 < 8), e0 r0 -> r0 {7,0}, r1
 * {6,1}. Node 1 holds 4,5,2,3 (loads 5,6,3,4): e5 r2, e4 r3, e3 r3, e2 r2
 * -> r2 {5,2}, r3 {4,3}. Every rank carries 9. */
static void test_eplb_hierarchical(void **state) {
    (void)state;
    double load[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int p2l[8], rep[8], cnt[8];
    tide_status st = {0};
    assert_int_equal(tide_eplb_place(load, 8, 8, 4, 2, 4, p2l, rep, cnt, &st), 0);
    int want[8] = {7, 0, 6, 1, 5, 2, 4, 3};
    assert_memory_equal(p2l, want, sizeof want);
    for (int i = 0; i < 8; i++) assert_int_equal(rep[i], 0), assert_int_equal(cnt[i], 1);
    assert_true(fabs(tide_eplb_balancedness(load, 8, p2l, cnt, 8, 4) - 1.0) < 1e-12);
    /* groups that do not divide over the nodes: the global policy */
    assert_int_equal(tide_eplb_place(load, 8, 8, 2, 4, 4, p2l, rep, cnt, &st), 0);
    /* bad shapes are refused with a message */
    assert_int_equal(tide_eplb_place(load, 8, 7, 1, 1, 2, p2l, rep, cnt, &st), -1);
    assert_non_null(strstr(st.msg, "do not divide"));
    double neg[8] = {1, 2, 3, -1, 5, 6, 7, 8};
    assert_int_equal(tide_eplb_place(neg, 8, 8, 1, 1, 2, p2l, rep, cnt, &st), -1);
}

/* Random loads: every expert has cnt copies numbered 0..cnt-1, the copies
 * fill the slots, and with redundancy the balance never gets worse than
 * the plain placement's. */
static void test_eplb_random(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0xe91b};
    for (int t = 0; t < 200; t++) {
        int nodes = 1 << (tu_next(&r) % 2), ranks = nodes * (1 + (int)(tu_next(&r) % 4));
        int groups = nodes * (1 + (int)(tu_next(&r) % 3)), E = groups * (1 + (int)(tu_next(&r) % 5));
        int phy = E + (int)(tu_next(&r) % 9);
        phy += (ranks * nodes - phy % (ranks * nodes)) % (ranks * nodes);
        double load[64];
        for (int e = 0; e < E; e++) load[e] = tu_uniform(&r) < 0.2 ? 50 * tu_uniform(&r) : tu_uniform(&r);
        int p2l[128], rep[128], cnt[64], seen[64][128];
        memset(seen, 0, sizeof seen);
        tide_status st = {0};
        assert_int_equal(tide_eplb_place(load, E, phy, groups, nodes, ranks, p2l, rep, cnt, &st), 0);
        int total = 0;
        for (int e = 0; e < E; e++) assert_true(cnt[e] >= 1), total += cnt[e];
        assert_int_equal(total, phy);
        for (int s = 0; s < phy; s++) {
            assert_true(p2l[s] >= 0 && p2l[s] < E && rep[s] >= 0 && rep[s] < cnt[p2l[s]]);
            assert_int_equal(seen[p2l[s]][rep[s]]++, 0);
        }
        double b = tide_eplb_balancedness(load, E, p2l, cnt, phy, ranks);
        assert_true(b > 0 && b <= 1.0 + 1e-12);
    }
}

/* ---- the communicator --------------------------------------------------- */

/* Forks world ranks running fn(rank, comm, arg); returns how many failed. */
typedef int (*rank_fn)(int rank, tide_comm *c, void *arg);

/* Forks world ranks running fn over a fresh mesh (closed in the parent). */
static void start_ranks(int world, int timeout_ms, int hb_ms, rank_fn fn, void *arg, pid_t *pids) {
    int fds[2 * TIDE_COMM_MAX * TIDE_COMM_MAX];
    tide_status st = {0};
    assert_int_equal(tide_comm_sock_mesh(world, fds, &st), 0);
    fflush(NULL);
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            tide_comm *c;
            if (tide_comm_sock_create(r, world, fds, timeout_ms, hb_ms, &c, &st) != 0) _exit(3);
            int rc = fn(r, c, arg);
            tide_comm_free(c);
            _exit(rc);
        }
    }
    for (int i = 0; i < 2 * world * world; i++)
        if (fds[i] >= 0) close(fds[i]);
}

/* Waits for rank r; 0 when it exited with status 0. */
static int wait_rank(pid_t pid, int r) {
    int ws;
    waitpid(pid, &ws, 0);
    if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) return 0;
    fprintf(stderr, "rank %d: status %d\n", r, ws);
    return 1;
}

static int run_ranks(int world, int timeout_ms, rank_fn fn, void *arg) {
    pid_t pids[TIDE_COMM_MAX];
    start_ranks(world, timeout_ms, 20000, fn, arg, pids);
    int bad = 0;
    for (int r = 0; r < world; r++) bad += wait_rank(pids[r], r);
    return bad;
}

static uint8_t byte_of(uint64_t seed, int src, int dst, int64_t i) {
    return (uint8_t)((seed * 31 + (uint64_t)src * 131 + (uint64_t)dst * 17 + (uint64_t)i * 7) >> 3);
}
static int64_t size_of(uint64_t seed, int round, int src, int dst) {
    uint64_t h = seed * 0x9e3779b97f4a7c15ull + (uint64_t)(round * 4096 + src * 64 + dst);
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h % 5 == 0 ? 0 : (int64_t)(h % 300000); /* some empty, some larger than a socket buffer */
}

static int exchange_rounds(tide_comm *c, uint64_t seed, int rounds) {
    tide_status st = {0};
    int W = c->world;
    for (int t = 0; t < rounds; t++) {
        int64_t sb[TIDE_COMM_MAX], rb[TIDE_COMM_MAX], ns = 0, nr = 0;
        int me = c->orig[c->rank];
        for (int q = 0; q < W; q++) {
            sb[q] = size_of(seed, t, me, c->orig[q]);
            rb[q] = size_of(seed, t, c->orig[q], me);
            ns += sb[q];
            nr += rb[q];
        }
        uint8_t *s = malloc((size_t)ns + 1), *r = malloc((size_t)nr + 1);
        int64_t o = 0;
        for (int q = 0; q < W; q++)
            for (int64_t i = 0; i < sb[q]; i++) s[o++] = byte_of(seed + (uint64_t)t, me, c->orig[q], i);
        if (tide_comm_alltoallv(c, s, sb, r, rb, &st) != 0) return 10;
        o = 0;
        for (int q = 0; q < W; q++)
            for (int64_t i = 0; i < rb[q]; i++)
                if (r[o++] != byte_of(seed + (uint64_t)t, c->orig[q], me, i)) return 11;
        free(s);
        free(r);
        int64_t v[2] = {me + 1, (int64_t)(seed % 1000) * me};
        if (tide_comm_allreduce_i64(c, v, 2, 0, &st) != 0) {
            fprintf(stderr, "allreduce: %s\n", st.msg);
            return 12;
        }
        int64_t want0 = 0, want1 = 0;
        for (int q = 0; q < W; q++) want0 += c->orig[q] + 1, want1 += (int64_t)(seed % 1000) * c->orig[q];
        if (v[0] != want0 || v[1] != want1) return 13;
    }
    return 0;
}

static int comm_child(int rank, tide_comm *c, void *arg) {
    (void)rank;
    return exchange_rounds(c, *(uint64_t *)arg, 4);
}

static void test_comm_alltoallv(void **state) {
    (void)state;
    uint64_t seed = tu_seed();
    for (int W = 1; W <= 4; W++) assert_int_equal(run_ranks(W, 20000, comm_child, &seed), 0);
}

/* The last rank dies (killed by the parent, or stopped: a hang) after one
 * round; the others notice, shrink to world - 1 and keep exchanging. */
typedef struct {
    uint64_t seed;
    int victim;
} kill_arg;

static int kill_child(int rank, tide_comm *c, void *arg) {
    kill_arg *k = arg;
    int W = c->world;
    if (exchange_rounds(c, k->seed, 1) != 0) return 20;
    if (rank == k->victim) {
        for (;;) pause(); /* the parent kills or stops it */
    }
    tide_status st = {0};
    int rc = tide_comm_barrier(c, &st);
    if (rc == 0 || !c->failed) return 21;
    if (tide_comm_alltoallv(c, NULL, (int64_t[TIDE_COMM_MAX]){0}, NULL, (int64_t[TIDE_COMM_MAX]){0}, &st) == 0)
        return 22; /* sticky */
    if (tide_comm_shrink(c, &st) != 0) return 23;
    if (c->world != W - 1 || c->dead_mask != 1ull << k->victim) return 24;
    for (int q = 0; q < c->world; q++)
        if (c->orig[q] == k->victim) return 25;
    return exchange_rounds(c, k->seed + 1, 3) ? 26 : 0;
}

static void kill_case(int W, int sig, int timeout_ms, int hb_ms) {
    kill_arg k = {tu_seed(), W - 2};
    pid_t pids[TIDE_COMM_MAX];
    start_ranks(W, timeout_ms, hb_ms, kill_child, &k, pids);
    usleep(200000);
    kill(pids[k.victim], sig);
    for (int r = 0; r < W; r++)
        if (r != k.victim) assert_int_equal(wait_rank(pids[r], r), 0);
    kill(pids[k.victim], SIGKILL);
    waitpid(pids[k.victim], NULL, 0);
}

static void test_comm_killed_rank(void **state) {
    (void)state;
    kill_case(3, SIGKILL, 60000, 0); /* found by end-of-file, long before any timeout */
    kill_case(4, SIGKILL, 60000, 60000);
}

static void test_comm_hung_rank(void **state) {
    (void)state;
    kill_case(3, SIGSTOP, 1500, 0);     /* no heartbeat: found by the collective's timeout */
    kill_case(4, SIGSTOP, 600000, 1500); /* found by the heartbeat, the collective's timeout far away */
}

/* ---- the forward pass over 2 and 4 ranks ---------------------------------- */

#define NSEQ 5
#define NSTEP 4

typedef struct {
    const tide_model *m;
    int32_t tok[NSEQ][NSTEP][8];
    int64_t ntok[NSEQ][NSTEP]; /* 0: the sequence sits the step out */
    float *logits;             /* shared: [NSEQ][NSTEP][vocab] */
    int redundant, window;
} fwd_case;

static int64_t vocab(const tide_model *m) { return m->cfg.text.vocab_size; }

/* Runs the steps for the sequences of `rank` (i % world == rank) and writes
 * their logits. With a communicator, the experts are distributed. */
static int run_steps(fwd_case *fc, tide_comm *c, int rank, int world) {
    tide_model *m = (tide_model *)fc->m;
    tide_status st = {0};
    tide_ep *ep = NULL;
    if (c) {
        tide_ep_opts o = {.redundant = fc->redundant, .window = fc->window, .n_threads = 1, .ctl_bytes = 8};
        if (tide_ep_create(c, m, &o, &ep, &st) != 0) return 30;
        m->ep = ep;
    }
    tide_fwd_opts fo = tide_fwd_default_opts();
    tide_fwd_ctx *fx;
    if (tide_fwd_ctx_create(m, NULL, 1, &fo, &fx, &st) != 0) return 31;
    tide_seq_cache sc[NSEQ];
    for (int i = 0; i < NSEQ; i++)
        if (tide_fwd_seq_init(fx, &sc[i], &st) != 0) return 32;
    int64_t V = vocab(m);
    float *lg = malloc((size_t)(NSEQ * V) * sizeof(float));
    int rc = 0;
    for (int t = 0; t < NSTEP && !rc; t++) {
        tide_step_seq q[NSEQ];
        int n = 0, who[NSEQ];
        for (int i = 0; i < NSEQ; i++)
            if (i % world == rank && fc->ntok[i][t] > 0) {
                who[n] = i;
                q[n++] = (tide_step_seq){&sc[i], fc->tok[i][t], fc->ntok[i][t], TIDE_LOGITS_LAST};
            }
        if (n) {
            tide_step_out out = {lg, NULL};
            if (tide_forward(fx, q, n, &out, &st) != 0) rc = 33;
            else if (ep && tide_ep_failed(ep)) rc = 34;
            else
                for (int j = 0; j < n; j++)
                    memcpy(fc->logits + ((int64_t)who[j] * NSTEP + t) * V, lg + j * V, (size_t)V * sizeof(float));
        }
        if (ep) {
            int64_t mine = n, all[TIDE_COMM_MAX];
            if (tide_ep_sync(ep, &mine, all, &st) != 0) rc = 35;
        }
    }
    if (ep && !rc) {
        tide_ep_stats s;
        if (tide_ep_measure(ep, &st) != 0) rc = 36;
        tide_ep_get_stats(ep, &s);
        if (!rc && world > 1 && s.rows_sent == 0) rc = 37; /* rows did travel */
        if (!rc && fc->window && s.rebalances == 0) rc = 38;
        if (!rc && !(s.balancedness > 0 && s.balancedness <= 1)) rc = 39;
    }
    for (int i = 0; i < NSEQ; i++) tide_fwd_seq_free(fx, &sc[i]);
    tide_fwd_ctx_free(fx);
    free(lg);
    if (ep) {
        m->ep = NULL;
        tide_ep_free(ep);
    }
    return rc;
}

static int fwd_child(int rank, tide_comm *c, void *arg) { return run_steps(arg, c, rank, c->world); }

static void test_ep_forward_identical(void **state) {
    tn_model_fixture *f = *state;
    fwd_case fc = {.m = f->m};
    tu_rng r = {f->seed * 977};
    int64_t V = vocab(f->m);
    for (int i = 0; i < NSEQ; i++)
        for (int t = 0; t < NSTEP; t++) {
            fc.ntok[i][t] = t == 0 ? 1 + (int64_t)(tu_next(&r) % 8) : (tu_next(&r) % 3 == 0 ? 0 : 1);
            for (int j = 0; j < 8; j++) fc.tok[i][t][j] = (int32_t)(2 + tu_next(&r) % (uint64_t)(V - 2));
        }
    fc.ntok[NSEQ - 1][1] = 0; /* with 4 ranks, rank 0 (seqs 0, 4) idles in some step */
    size_t bytes = (size_t)(NSEQ * NSTEP * V) * sizeof(float);
    float *ref = malloc(bytes);
    fc.logits = ref;
    memset(ref, 0, bytes);
    assert_int_equal(run_steps(&fc, NULL, 0, 1), 0);
    float *sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    fc.logits = sh;
    int cases[][3] = {{2, 0, 0}, {4, 0, 0}, {2, 2, 1}, {4, 3, 2}}; /* world, redundant, window */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memset(sh, 0, bytes);
        fc.redundant = cases[k][1];
        fc.window = cases[k][2];
        assert_int_equal(run_ranks(cases[k][0], 30000, fwd_child, &fc), 0);
        for (int i = 0; i < NSEQ; i++)
            for (int t = 0; t < NSTEP; t++) {
                if (!fc.ntok[i][t]) continue;
                const float *a = ref + ((int64_t)i * NSTEP + t) * V, *b = sh + ((int64_t)i * NSTEP + t) * V;
                if (memcmp(a, b, (size_t)V * sizeof(float)) != 0)
                    fail_msg("world %d: seq %d step %d differs from EP 1", cases[k][0], i, t);
            }
    }
    munmap(sh, bytes);
    free(ref);
}

static int setup(void **state) { return tn_model_setup(state, "dist", 0, 0); }
static int teardown(void **state) { return tn_model_teardown(state); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eplb_global),
        cmocka_unit_test(test_eplb_hierarchical),
        cmocka_unit_test(test_eplb_random),
        cmocka_unit_test(test_comm_alltoallv),
        cmocka_unit_test(test_comm_killed_rank),
        cmocka_unit_test(test_comm_hung_rank),
        cmocka_unit_test_setup_teardown(test_ep_forward_identical, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
