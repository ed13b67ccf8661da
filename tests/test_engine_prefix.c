/* The engine with the prefix cache (docs/engine.md section 4, "Prefix
 * cache"): a hit gives exactly the tokens of the same bounded-replay
 * computation done by hand with the forward API (and, replaying the whole
 * prefix in the chunking-invariant mode, exactly a cache-off engine's);
 * tenant salts isolate; cached pages are evicted LRU under memory pressure
 * without changing any output; preemption with the cache on loses nothing;
 * every block's and page's reference count matches its holders after every
 * step; statistics add up; bad settings are refused; `tide run` flags.
 *
 * Tiny checkpoint (sliding window 8; KV sources of ratio 2, 2, 1), fresh
 * random prompts per run, pages of 8 tokens over blocks of 2 positions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/forward.h"
#include "model/model.h"
#include "test_ops_util.h"
#include "tide.h"

typedef tn_model_fixture fixture;

static int setup(void **state) { return tn_model_setup(state, "engpfx", 0, 3); }
static int teardown(void **state) { return tn_model_teardown(state); }

enum { PAGE = 8, KVB = 2, MAXQ = 32, NEW = 4 };

static tide_engine_config cfg_for(int canonical, int64_t replay) {
    tide_engine_config c = tide_engine_config_default();
    c.n_threads = 2;
    c.kv_block = KVB;
    c.page_tokens = PAGE;
    c.prefix_replay = replay;
    c.canonical_layout = canonical;
    c.index_key_quirk = !canonical;
    c.max_step_tokens = 64;
    c.prefill_chunk = canonical ? 0 : PAGE;
    return c;
}

typedef struct {
    int n;
    int32_t *prompt[MAXQ];
    int64_t n_prompt[MAXQ];
    uint64_t salt[MAXQ];
    int32_t out[MAXQ][NEW];
    int64_t n_out[MAXQ], n_cached[MAXQ], n_preempted[MAXQ];
} batch;

static void free_batch(batch *b) {
    for (int i = 0; i < b->n; i++) free(b->prompt[i]);
}

static void check(const tide_engine *e) {
    tide_status st = {0};
    if (tide_engine_check(e, &st) != 0) fail_msg("%s", st.msg);
}

static void submit(tide_engine *e, batch *b, int i, tide_request_id *id) {
    tide_status st = {0};
    tide_request r = tide_request_default();
    r.prompt = b->prompt[i];
    r.n_prompt = b->n_prompt[i];
    r.sampling.temperature = 0;
    r.sampling.max_tokens = NEW;
    r.cache_salt = b->salt[i];
    if (tide_engine_submit(e, &r, id, &st) != 0) fail_msg("%s", st.msg);
}

static void collect(tide_engine *e, batch *b, int i, tide_request_id id) {
    tide_status st = {0};
    tide_request_info info;
    assert_int_equal(tide_engine_get(e, id, &info, &st), 0);
    assert_int_equal(info.state, TIDE_REQ_FINISHED);
    if (info.reason == TIDE_FINISH_ERROR) fail_msg("request %d: %s", i, info.error);
    assert_int_equal(info.n_output, NEW);
    memcpy(b->out[i], info.output, NEW * sizeof(int32_t));
    b->n_out[i] = info.n_output;
    b->n_cached[i] = info.n_cached;
    b->n_preempted[i] = info.n_preempted;
    tide_engine_release(e, id);
}

static void run_engine(tide_engine *e) {
    tide_status st = {0};
    while (tide_engine_busy(e)) {
        assert_int_equal(tide_engine_step(e, &st), 0);
        check(e);
    }
}

/* Requests [lo, hi) of b on e: all at once (together) or one after another. */
static void run_range(tide_engine *e, batch *b, int lo, int hi, int together) {
    tide_request_id ids[MAXQ];
    for (int i = lo; i < hi; i++) {
        submit(e, b, i, &ids[i]);
        if (!together) {
            run_engine(e);
            collect(e, b, i, ids[i]);
        }
    }
    if (!together) return;
    run_engine(e);
    for (int i = lo; i < hi; i++) collect(e, b, i, ids[i]);
}

static tide_engine *make_engine(const fixture *f, const tide_engine_config *c) {
    tide_status st = {0};
    tide_engine *e;
    if (tide_engine_create_with_model(c, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
    return e;
}

static void same_outputs(const batch *a, const batch *b, int lo, int hi) {
    for (int i = lo; i < hi; i++)
        if (memcmp(a->out[i], b->out[i], NEW * sizeof(int32_t)) != 0)
            fail_msg("request %d: outputs differ (%d %d %d %d vs %d %d %d %d)", i, a->out[i][0], a->out[i][1],
                     a->out[i][2], a->out[i][3], b->out[i][0], b->out[i][1], b->out[i][2], b->out[i][3]);
}

/* n requests: a shared prefix of `shared` tokens (0 = none) + a random tail
 * of min_tail..max_tail tokens. */
static void make_batch_tails(const fixture *f, batch *b, int n, int64_t shared, int min_tail, int max_tail,
                             uint64_t tag) {
    tu_rng r = {f->seed * 131 + tag};
    int32_t pre[256];
    tn_random_tokens(f->m, &r, pre, shared);
    memset(b, 0, sizeof *b);
    b->n = n;
    for (int i = 0; i < n; i++) {
        int64_t tail = min_tail + (int64_t)(tu_next(&r) % (uint64_t)(max_tail - min_tail + 1));
        b->n_prompt[i] = shared + tail;
        b->prompt[i] = malloc((size_t)b->n_prompt[i] * sizeof(int32_t));
        memcpy(b->prompt[i], pre, (size_t)shared * sizeof(int32_t));
        tn_random_tokens(f->m, &r, b->prompt[i] + shared, tail);
    }
}

/* The same with tails of 1..max_tail tokens. */
static void make_batch(const fixture *f, batch *b, int n, int64_t shared, int max_tail, uint64_t tag) {
    make_batch_tails(f, b, n, shared, 1, max_tail, tag);
}

/* ---- the bounded-replay computation by hand -------------------------------- */

static int32_t argmax_token(const fixture *f, const float *logits) {
    int64_t V = f->m->cfg.text.vocab_size, best = -1;
    for (int64_t t = 0; t < V; t++) {
        if (t == f->m->cfg.image_token_id) continue;
        if (best < 0 || logits[t] > logits[best]) best = t;
    }
    return (int32_t)best;
}

/* The tokens a request with `prompt` gets when the global KV of its first
 * `frozen` tokens comes from another sequence and the tokens [start, frozen)
 * are replayed: a throwaway sequence prefills the prefix, a second one shares
 * its blocks, is restored at start and decodes greedily. */
static void by_hand(const fixture *f, int canonical, const int32_t *prompt, int64_t n_prompt, int64_t frozen,
                    int64_t start, int32_t *out) {
    tide_status st = {0};
    tide_fwd_opts o = tide_fwd_default_opts();
    o.ref_layout = !canonical;
    o.index_key_quirk = !canonical;
    o.kv_block = KVB;
    tide_fwd_ctx *fx;
    assert_int_equal(tide_fwd_ctx_create(f->m, tide_cpu_ops(), 2, &o, &fx, &st), 0);
    int64_t V = f->m->cfg.text.vocab_size;
    float *logits = malloc((size_t)V * sizeof(float));
    tide_step_out so = {logits, NULL};
    tide_seq_cache a, b;
    assert_int_equal(tide_fwd_seq_init(fx, &a, &st), 0);
    /* the prefix, in page-sized chunks as the reference-layout engine feeds it */
    for (int64_t p = 0; p < frozen; p += PAGE) {
        tide_step_seq s = {&a, prompt + p, PAGE, TIDE_LOGITS_NONE};
        if (tide_forward(fx, &s, 1, &so, &st) != 0) fail_msg("%s", st.msg);
    }
    assert_int_equal(tide_fwd_seq_init(fx, &b, &st), 0);
    tide_kv_pool *kv = tide_fwd_kv(fx);
    const tide_model *m = f->m;
    for (int k = 0; k < m->n_kv_src; k++) {
        int r = m->cfg.roles[m->kv_src_layer[k]].compress_ratio;
        int64_t nb = frozen / r / KVB;
        assert_true(a.tables[k].n >= nb);
        assert_int_equal(tide_kv_share(kv, &b.tables[k], a.tables[k].blocks, nb, &st), 0);
    }
    if (tide_fwd_seq_restore(fx, &b, prompt, frozen, start, &st) != 0) fail_msg("%s", st.msg);
    tide_fwd_seq_free(fx, &a); /* b keeps the shared blocks alive */
    /* the replay and the rest of the prompt, in the engine's chunks */
    for (int64_t p = start; p < n_prompt; p += PAGE) {
        int64_t n = n_prompt - p < PAGE ? n_prompt - p : PAGE;
        tide_step_seq s = {&b, prompt + p, n, p + n == n_prompt ? TIDE_LOGITS_LAST : TIDE_LOGITS_NONE};
        if (tide_forward(fx, &s, 1, &so, &st) != 0) fail_msg("%s", st.msg);
    }
    for (int i = 0; i < NEW; i++) {
        out[i] = argmax_token(f, logits);
        if (i + 1 == NEW) break;
        tide_step_seq d = {&b, &out[i], 1, TIDE_LOGITS_LAST};
        if (tide_forward(fx, &d, 1, &so, &st) != 0) fail_msg("%s", st.msg);
    }
    tide_fwd_seq_free(fx, &b);
    assert_int_equal(tide_kv_used(kv), 0);
    free(logits);
    tide_fwd_ctx_free(fx);
}

/* Request 0 fills the cache; requests 1.. hit its 3 shared pages and give
 * exactly the hand-made replay's tokens. Replay of 10 tokens (window 8 + 2),
 * so the restored sequences start at 14 with no window entries below. */
static void hit_case(fixture *f, int canonical) {
    batch b;
    make_batch(f, &b, 3, 3 * PAGE, 7, 10 + (uint64_t)canonical);
    tide_engine_config c = cfg_for(canonical, 10);
    tide_engine *e = make_engine(f, &c);
    run_range(e, &b, 0, 3, 0);
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_int_equal(b.n_cached[0], 0);
    int64_t lookup = 0;
    for (int i = 0; i < 3; i++) lookup += b.n_prompt[i] - 1;
    assert_int_equal(s.prefix_lookup_tokens, lookup);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(b.n_cached[i], 3 * PAGE);
        int32_t want[NEW];
        by_hand(f, canonical, b.prompt[i], b.n_prompt[i], 3 * PAGE, 3 * PAGE - 10, want);
        if (memcmp(want, b.out[i], sizeof want) != 0)
            fail_msg("request %d: engine %d %d %d %d, by hand %d %d %d %d", i, b.out[i][0], b.out[i][1],
                     b.out[i][2], b.out[i][3], want[0], want[1], want[2], want[3]);
    }
    assert_int_equal(s.prefix_hit_tokens, 2 * 3 * PAGE);
    assert_int_equal(s.prefix_hits, 2);
    assert_int_equal(s.prefix_replay_tokens, 2 * 10);
    assert_true(s.prefix_hit_rate > 0 && s.prefix_hit_rate == (double)s.prefix_hit_tokens / (double)lookup);
    assert_int_equal(s.page_tokens, PAGE);
    /* idle: only cached pages hold blocks, and clearing empties the pool */
    assert_int_equal(s.prefix_pages_in_use, 0);
    assert_true(s.prefix_pages_cached >= 3);
    assert_int_equal(s.kv_blocks_used, s.kv_blocks_cached);
    assert_int_equal(tide_engine_clear_prefix_cache(e), s.prefix_pages_cached);
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.kv_blocks_used, 0);
    assert_int_equal(s.prefix_pages_cached, 0);
    check(e);
    tide_engine_destroy(e);
    free_batch(&b);
}

static void test_hit_equals_replay_canonical(void **state) { hit_case(*state, 1); }
static void test_hit_equals_replay_ref(void **state) { hit_case(*state, 0); }

/* Replaying the whole prefix in the chunking-invariant mode is exactly a cold
 * prefill: every hit (requests running together, sharing pages while the
 * first is still running) gives a cache-off engine's tokens. So it is with
 * the reference layouts when every request chunks its prompt at the page
 * boundaries (prefill_chunk = page_tokens). */
static void full_replay_case(fixture *f, int canonical) {
    batch warm, cold;
    make_batch(f, &warm, 6, 2 * PAGE + 3, 12, 20 + (uint64_t)canonical);
    make_batch(f, &cold, 6, 2 * PAGE + 3, 12, 20 + (uint64_t)canonical);
    tide_engine_config c = cfg_for(canonical, -1);
    c.max_step_tokens = 16; /* several steps of prefill: later requests hit earlier ones' pages */
    tide_engine *e = make_engine(f, &c);
    run_range(e, &warm, 0, 1, 0);
    run_range(e, &warm, 1, 6, 1);
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_true(s.prefix_hits >= 5);
    assert_int_equal(s.prefix_replay_tokens, s.prefix_hit_tokens);
    for (int i = 1; i < 6; i++) assert_true(warm.n_cached[i] >= 2 * PAGE);
    tide_engine_destroy(e);
    c.prefix_cache = 0;
    e = make_engine(f, &c);
    run_range(e, &cold, 0, 6, 1);
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.prefix_lookup_tokens, 0);
    assert_int_equal(s.prefix_pages_total, 0);
    tide_engine_destroy(e);
    same_outputs(&warm, &cold, 0, 6);
    free_batch(&warm);
    free_batch(&cold);
}

static void test_full_replay_exact_canonical(void **state) { full_replay_case(*state, 1); }
static void test_full_replay_exact_ref(void **state) { full_replay_case(*state, 0); }

/* Inexact pages (docs/engine.md, "Inexact pages"): A caches 2 pages; B
 * shares them with a bounded replay (10 < 16 tokens), so its pages 2 and 3
 * follow the approximation; C has B's 4-page prefix. By default B's later
 * pages stay private: C hits only A's 2 (exact) pages and gets exactly the
 * hand-made replay from them. With prefix_cache_inexact, C hits B's 4 pages
 * (marked inexact); with a full replay nothing is inexact and C hits 4. */
static void inexact_case(fixture *f, int64_t replay, int allow, int64_t want_c, int64_t want_withheld,
                         int64_t want_inexact, int64_t want_admissions) {
    batch b;
    make_batch_tails(f, &b, 3, 4 * PAGE, 3, 3, 40);
    b.n_prompt[0] = 2 * PAGE + 3;
    tide_engine_config c = cfg_for(1, replay);
    c.prefix_cache_inexact = allow;
    tide_engine *e = make_engine(f, &c);
    run_range(e, &b, 0, 3, 0);
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_int_equal(b.n_cached[0], 0);
    assert_int_equal(b.n_cached[1], 2 * PAGE);
    assert_int_equal(b.n_cached[2], want_c);
    assert_int_equal(s.prefix_pages_withheld, want_withheld);
    assert_int_equal(s.prefix_pages_inexact, want_inexact);
    assert_int_equal(s.prefix_inexact_admissions, want_admissions);
    if (want_c == 2 * PAGE && replay >= 0) {
        int32_t want[NEW];
        by_hand(f, 1, b.prompt[2], b.n_prompt[2], 2 * PAGE, 2 * PAGE - replay, want);
        if (memcmp(want, b.out[2], sizeof want) != 0) fail_msg("C does not follow A's exact pages");
    }
    check(e);
    tide_engine_destroy(e);
    free_batch(&b);
}

static void test_inexact_pages(void **state) {
    /* default: B's pages 2, 3 and C's withheld; both admissions inexact */
    inexact_case(*state, 10, 0, 2 * PAGE, 4, 0, 2);
    /* allowed: B's 2 cached and marked, C hits them */
    inexact_case(*state, 10, 1, 4 * PAGE, 0, 2, 2);
    /* a full replay is exact: nothing withheld, C hits B's pages */
    inexact_case(*state, -1, 0, 4 * PAGE, 0, 0, 0);
}

/* Salts isolate tenants: the same prompt under another salt does not hit. */
static void test_salt(void **state) {
    fixture *f = *state;
    batch b;
    make_batch(f, &b, 4, 2 * PAGE, 3, 30);
    for (int i = 1; i < 4; i++) {
        free(b.prompt[i]);
        b.prompt[i] = malloc((size_t)b.n_prompt[0] * sizeof(int32_t));
        memcpy(b.prompt[i], b.prompt[0], (size_t)b.n_prompt[0] * sizeof(int32_t));
        b.n_prompt[i] = b.n_prompt[0];
    }
    b.salt[0] = 7;
    b.salt[1] = 8;
    b.salt[2] = 7;
    b.salt[3] = 8;
    tide_engine_config c = cfg_for(1, -1);
    tide_engine *e = make_engine(f, &c);
    run_range(e, &b, 0, 4, 0);
    assert_int_equal(b.n_cached[0], 0);
    assert_int_equal(b.n_cached[1], 0);          /* another tenant */
    assert_int_equal(b.n_cached[2], 2 * PAGE);   /* same tenant */
    assert_int_equal(b.n_cached[3], 2 * PAGE);   /* tenant 8 now has its own pages */
    for (int i = 1; i < 4; i++) assert_memory_equal(b.out[i], b.out[0], NEW * sizeof(int32_t));
    tide_engine_destroy(e);
    free_batch(&b);
}

/* A pool of 5 pages' worth of blocks and 6 requests with distinct prompts of
 * 2-3 pages, one after another (at least 12 pages: the oldest request's are
 * evicted before the last one runs): cached pages are evicted least
 * recently used first, nothing fails, the outputs equal a cache-off run,
 * the statistics add up; then the newest request's prompt still hits and
 * the oldest's does not. */
static void test_eviction(void **state) {
    fixture *f = *state;
    enum { N = 6 };
    batch warm;
    make_batch(f, &warm, N + 2, 0, 3 * PAGE - 2, 40);
    for (int i = 0; i < N; i++)
        if (warm.n_prompt[i] < 2 * PAGE + 1) { /* at least two full pages each */
            warm.prompt[i] = realloc(warm.prompt[i], (2 * PAGE + 1) * sizeof(int32_t));
            tu_rng r = {f->seed + (uint64_t)i};
            tn_random_tokens(f->m, &r, warm.prompt[i] + warm.n_prompt[i], 2 * PAGE + 1 - warm.n_prompt[i]);
            warm.n_prompt[i] = 2 * PAGE + 1;
        }
    /* requests N and N+1 repeat the newest and the oldest prompt */
    for (int k = 0; k < 2; k++) {
        int src = k == 0 ? N - 1 : 0;
        free(warm.prompt[N + k]);
        warm.n_prompt[N + k] = warm.n_prompt[src];
        warm.prompt[N + k] = malloc((size_t)warm.n_prompt[src] * sizeof(int32_t));
        memcpy(warm.prompt[N + k], warm.prompt[src], (size_t)warm.n_prompt[src] * sizeof(int32_t));
    }
    tide_engine_config c = cfg_for(1, -1);
    c.max_seqs = 1;
    /* 8 blocks per page (2 + 2 + 4); a request holds at most 3 * 8 + 4 blocks */
    c.kv_blocks = 5 * 8;
    tide_engine *e = make_engine(f, &c);
    run_range(e, &warm, 0, N, 0);
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    int64_t lookup = 0;
    for (int i = 0; i < N; i++) {
        lookup += warm.n_prompt[i] - 1;
        assert_int_equal(warm.n_cached[i], 0);
        assert_int_equal(warm.n_preempted[i], 0);
    }
    assert_int_equal(s.prefix_lookup_tokens, lookup);
    assert_int_equal(s.prefix_hit_tokens, 0);
    assert_true(s.prefix_hit_rate == 0);
    assert_true(s.prefix_evictions > 0);
    assert_true(s.prefix_pages_cached <= 5);
    assert_true(s.kv_blocks_used <= c.kv_blocks);
    assert_int_equal(s.kv_blocks_used, s.kv_blocks_cached);
    int64_t evicted = s.prefix_evictions;
    run_range(e, &warm, N, N + 2, 0);
    assert_true(warm.n_cached[N] >= 2 * PAGE); /* the most recent pages survived */
    assert_int_equal(warm.n_cached[N + 1], 0); /* the least recent did not */
    tide_engine_get_stats(e, &s);
    assert_true(s.prefix_evictions >= evicted);
    assert_true(s.prefix_hit_rate > 0 && s.prefix_hit_rate < 1);
    assert_true(tide_engine_clear_prefix_cache(e) > 0);
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.kv_blocks_used, 0);
    tide_engine_destroy(e);
    c.prefix_cache = 0;
    batch cold_out;
    memcpy(&cold_out, &warm, sizeof cold_out); /* the same prompts (freed once, with warm) */
    e = make_engine(f, &c);
    run_range(e, &cold_out, 0, N + 2, 0);
    tide_engine_destroy(e);
    same_outputs(&warm, &cold_out, 0, N + 2);
    free_batch(&warm);
}

/* Preemption with the cache on: a pool too small for the batch forces
 * preemptions; readmitted requests hit pages (their own and their
 * neighbours'). Replaying whole prefixes in the chunking-invariant mode the
 * outputs equal a cache-off run without pressure; with the default bounded
 * replay every request still finishes with all its tokens. Reference counts
 * are checked after every step; the pool ends holding only cached pages. */
static void test_preemption_cache_on(void **state) {
    fixture *f = *state;
    enum { N = 8 };
    batch ref, tight;
    /* Every prompt is PAGE + 12 tokens, so the schedule (admissions, block
     * counts, preemptions) does not depend on the seed. With random tail
     * lengths some seeds drew short requests that the scheduler ran without
     * a preemption (admissions see pages one step later, and a chunk that
     * finds no blocks waits rather than preempt a request in flight). */
    make_batch_tails(f, &ref, N, PAGE, 12, 12, 50);
    make_batch_tails(f, &tight, N, PAGE, 12, 12, 50);
    tide_engine_config c = cfg_for(1, -1);
    c.prefix_cache = 0;
    tide_engine *e = make_engine(f, &c);
    run_range(e, &ref, 0, N, 1);
    tide_engine_destroy(e);
    c = cfg_for(1, -1);
    /* a request holds up to 2 x 6 + 12 = 24 blocks (23 positions): two do not fit */
    c.kv_blocks = 30;
    c.max_step_tokens = 16;
    e = make_engine(f, &c);
    run_range(e, &tight, 0, N, 1);
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_true(s.preemptions > 0);
    assert_true(s.prefix_hits > 0);
    assert_int_equal(s.kv_blocks_used, s.kv_blocks_cached);
    tide_engine_clear_prefix_cache(e);
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.kv_blocks_used, 0);
    tide_engine_destroy(e);
    same_outputs(&ref, &tight, 0, N);
    /* bounded replay, reference layouts: nothing lost */
    c = cfg_for(0, 10);
    c.kv_blocks = 30;
    e = make_engine(f, &c);
    run_range(e, &tight, 0, N, 1); /* collect() checks every request produced NEW tokens */
    tide_engine_get_stats(e, &s);
    assert_true(s.preemptions > 0);
    assert_int_equal(s.kv_blocks_used, s.kv_blocks_cached);
    tide_engine_destroy(e);
    free_batch(&ref);
    free_batch(&tight);
}

/* Requests that do not hit give the same tokens with the cache on or off,
 * in one batch of 8 (up to 168 prompt tokens: several steps of 64 with
 * chunked prefills beside decodes). */
static void test_no_hit_unchanged(void **state) {
    fixture *f = *state;
    enum { N = 8 };
    batch on, off;
    make_batch(f, &on, N, 0, 2 * PAGE + 5, 60);
    make_batch(f, &off, N, 0, 2 * PAGE + 5, 60);
    tide_engine_config c = cfg_for(0, 140);
    tide_engine *e = make_engine(f, &c);
    run_range(e, &on, 0, N, 1);
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.prefix_hit_tokens, 0);
    assert_true(s.prefix_pages_cached > 0);
    tide_engine_destroy(e);
    c.prefix_cache = 0;
    e = make_engine(f, &c);
    run_range(e, &off, 0, N, 1);
    tide_engine_destroy(e);
    same_outputs(&on, &off, 0, N);
    free_batch(&on);
    free_batch(&off);
}

/* Only the blocks a hit does not share count against the pool: A (3 pages +
 * 1 token) holds up to 28 blocks of a 32-block pool; B, with A's prompt but
 * another last token, shares A's 24 page blocks and needs 4 of its own, so
 * both run side by side without preemption (without sharing B would need 28).
 * Whole-prefix replay, canonical: B's tokens are a cache-off engine's. */
static void test_shared_blocks_admission(void **state) {
    fixture *f = *state;
    batch b, cold;
    make_batch(f, &b, 2, 3 * PAGE, 1, 70);
    make_batch(f, &cold, 2, 3 * PAGE, 1, 70);
    tide_engine_config c = cfg_for(1, -1);
    c.kv_blocks = 32;
    tide_engine *e = make_engine(f, &c);
    tide_status st = {0};
    tide_request_id ids[2];
    submit(e, &b, 0, &ids[0]);
    assert_int_equal(tide_engine_step(e, &st), 0); /* A's prompt in one chunk: its pages registered */
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.prefix_pages_cached, 3);
    assert_int_equal(s.kv_blocks_used, 2 * 6 + 13); /* 25 positions: 12 + 12 + 25 over blocks of 2 */
    submit(e, &b, 1, &ids[1]);
    assert_int_equal(tide_engine_step(e, &st), 0);
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.n_running, 2);
    run_engine(e);
    for (int i = 0; i < 2; i++) collect(e, &b, i, ids[i]);
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.preemptions, 0);
    assert_int_equal(b.n_cached[1], 3 * PAGE);
    tide_engine_destroy(e);
    c.prefix_cache = 0; /* the same pool without sharing: B has to wait for A */
    e = make_engine(f, &c);
    submit(e, &cold, 0, &ids[0]);
    assert_int_equal(tide_engine_step(e, &st), 0);
    submit(e, &cold, 1, &ids[1]);
    assert_int_equal(tide_engine_step(e, &st), 0);
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.n_running, 1);
    assert_int_equal(s.n_waiting, 1);
    run_engine(e);
    for (int i = 0; i < 2; i++) collect(e, &cold, i, ids[i]);
    tide_engine_destroy(e);
    same_outputs(&b, &cold, 0, 2);
    free_batch(&b);
    free_batch(&cold);
}

/* Random traffic: prompts from three prefixes (0 to 3 pages) with short
 * tails under two salts, submitted in waves, random cancels and releases, a
 * small pool (preemption and eviction), bounded or whole replay. After every
 * step every reference count matches its holders; every request that was not
 * cancelled ends with all its tokens; at the end only cached pages hold
 * blocks, and clearing the cache empties the pool. */
static void test_random_traffic(void **state) {
    fixture *f = *state;
    tu_rng r = {f->seed * 7 + 3};
    enum { N = 18 };
    int32_t pre[3][3 * PAGE];
    for (int k = 0; k < 3; k++) tn_random_tokens(f->m, &r, pre[k], 3 * PAGE);
    batch b;
    memset(&b, 0, sizeof b);
    b.n = N;
    for (int i = 0; i < N; i++) {
        int64_t shared = (int64_t)(tu_next(&r) % 4) * PAGE, tail = 1 + (int64_t)(tu_next(&r) % 6);
        const int32_t *src = pre[tu_next(&r) % 3];
        b.n_prompt[i] = shared + tail;
        b.prompt[i] = malloc((size_t)b.n_prompt[i] * sizeof(int32_t));
        memcpy(b.prompt[i], src, (size_t)shared * sizeof(int32_t));
        tn_random_tokens(f->m, &r, b.prompt[i] + shared, tail);
        b.salt[i] = tu_next(&r) % 2;
    }
    tide_engine_config c = cfg_for((int)(tu_next(&r) % 2), tu_next(&r) % 2 ? -1 : 10);
    c.kv_blocks = 40;
    c.max_seqs = 4;
    c.max_step_tokens = 16;
    tide_engine *e = make_engine(f, &c);
    tide_status st = {0};
    tide_request_id ids[N];
    int cancelled[N] = {0}, done = 0;
    for (int wave = 0; wave < 3; wave++) {
        for (int i = wave * N / 3; i < (wave + 1) * N / 3; i++) submit(e, &b, i, &ids[i]);
        for (int step = 0; step < 6 && tide_engine_busy(e); step++) {
            assert_int_equal(tide_engine_step(e, &st), 0);
            check(e);
            int i = (int)(tu_next(&r) % (uint64_t)((wave + 1) * N / 3));
            if (tu_next(&r) % 4 == 0 && !cancelled[i]) {
                tide_request_info info;
                assert_int_equal(tide_engine_get(e, ids[i], &info, &st), 0);
                if (info.state != TIDE_REQ_FINISHED) cancelled[i] = 1;
                assert_int_equal(tide_engine_cancel(e, ids[i], &st), 0);
                check(e);
            }
        }
    }
    run_engine(e);
    for (int i = 0; i < N; i++) {
        tide_request_info info;
        assert_int_equal(tide_engine_get(e, ids[i], &info, &st), 0);
        assert_int_equal(info.state, TIDE_REQ_FINISHED);
        if (info.reason == TIDE_FINISH_ERROR) fail_msg("request %d: %s", i, info.error);
        if (cancelled[i]) assert_int_equal(info.reason, TIDE_FINISH_CANCELLED);
        else {
            assert_int_equal(info.n_output, NEW);
            done++;
        }
        tide_engine_release(e, ids[i]);
        check(e);
    }
    assert_true(done > 0);
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.n_waiting + s.n_running + s.n_finished, 0);
    assert_int_equal(s.kv_blocks_used, s.kv_blocks_cached);
    assert_int_equal(s.prefix_pages_in_use, 0);
    tide_engine_clear_prefix_cache(e);
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.kv_blocks_used, 0);
    check(e);
    tide_engine_destroy(e);
    free_batch(&b);
}

static void test_bad_config(void **state) {
    fixture *f = *state;
    tide_status st = {0};
    tide_engine *e;
    tide_engine_config c = cfg_for(1, 10);
    c.page_tokens = 6; /* not a multiple of 2 x 2 */
    assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), -1);
    assert_null(e);
    if (!strstr(st.msg, "page_tokens 6 must be a multiple of 4")) fail_msg("%s", st.msg);
    c.page_tokens = -8;
    assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), -1);
    c = cfg_for(1, -2);
    assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), -1);
    assert_non_null(strstr(st.msg, "prefix_replay"));
    c = cfg_for(1, 10);
    c.prefix_cache = 2;
    assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), -1);
    /* page_tokens 0: derived (the smallest multiple of 2 x kv_block >= 128) */
    c = cfg_for(1, 10);
    c.page_tokens = 0;
    c.kv_block = 3;
    e = make_engine(f, &c);
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.page_tokens, 132);
    tide_engine_destroy(e);
}

/* tide run: the flags exist, are explained, and are checked. */
static void test_cli_flags(void **state) {
    fixture *f = *state;
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' run --help", TIDE_EXE);
    assert_int_equal(tu_system(cmd, &out), 0);
    assert_non_null(strstr(out, "--no-prefix-cache"));
    assert_non_null(strstr(out, "--page-tokens"));
    assert_non_null(strstr(out, "--prefix-replay"));
    assert_non_null(strstr(out, "--prefix-cache-inexact"));
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --prompt-ids 5,6,7 --prefix-replay x 2>&1", TIDE_EXE, f->dir);
    assert_int_not_equal(tu_system(cmd, &out), 0);
    assert_non_null(strstr(out, "--prefix-replay"));
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --prompt-ids 5,6,7 --kv-block 2 --page-tokens 6 2>&1",
             TIDE_EXE, f->dir);
    assert_int_not_equal(tu_system(cmd, &out), 0);
    assert_non_null(strstr(out, "multiple of 4"));
    free(out);
    snprintf(cmd, sizeof cmd,
             "'%s' run --model '%s' --prompt-ids 5,6,7,8,9,10,11,12,13,14 --max-tokens 2 --kv-block 2 "
             "--page-tokens 4 --prefix-replay full --no-prefix-cache --canonical-layout --no-index-quirk 2>&1",
             TIDE_EXE, f->dir);
    assert_int_equal(tu_system(cmd, &out), 0);
    free(out);
    /* --input: a repeated prompt reports its cached tokens; another salt none */
    char in[1024], res[1024];
    snprintf(in, sizeof in, "%s/pfx.jsonl", f->dir);
    snprintf(res, sizeof res, "%s/pfx.out.jsonl", f->dir);
    FILE *fp = fopen(in, "w");
    assert_non_null(fp);
    const char *ids = "5,6,7,8,9,10,11,12,13,14";
    fprintf(fp, "{\"id\": \"a\", \"prompt_ids\": [%s], \"max_tokens\": 2}\n", ids);
    fprintf(fp, "{\"id\": \"b\", \"prompt_ids\": [%s], \"max_tokens\": 2}\n", ids);
    fprintf(fp, "{\"id\": \"c\", \"prompt_ids\": [%s], \"max_tokens\": 2, \"cache_salt\": 5}\n", ids);
    fclose(fp);
    snprintf(cmd, sizeof cmd,
             "'%s' run --model '%s' --input '%s' --output '%s' --max-seqs 1 --kv-block 2 --page-tokens 4 2>&1 && "
             "cat '%s'",
             TIDE_EXE, f->dir, in, res, res);
    assert_int_equal(tu_system(cmd, &out), 0);
    if (!strstr(out, "\"id\":\"a\",") || !strstr(out, "\"cached_tokens\":0}") ||
        !strstr(out, "\"completion_tokens\":2,\"cached_tokens\":8}"))
        fail_msg("%s", out);
    const char *c_line = strstr(out, "\"id\":\"c\"");
    assert_non_null(c_line);
    assert_non_null(strstr(c_line, "\"cached_tokens\":0}"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_equals_replay_canonical),
        cmocka_unit_test(test_hit_equals_replay_ref),
        cmocka_unit_test(test_full_replay_exact_canonical),
        cmocka_unit_test(test_full_replay_exact_ref),
        cmocka_unit_test(test_inexact_pages),
        cmocka_unit_test(test_salt),
        cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_preemption_cache_on),
        cmocka_unit_test(test_no_hit_unchanged),
        cmocka_unit_test(test_shared_blocks_admission),
        cmocka_unit_test(test_random_traffic),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_cli_flags),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
