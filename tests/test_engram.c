/* Engram tables, hashing and the layer's contribution (src/model/engram.c)
 * against the independent numpy oracle tools/ref/engram_oracle.py:
 *   - the released layout: primes (which must sum to engram_num_embeddings)
 *     and multipliers from numpy's default_rng;
 *   - row indices of random sequences with dead spans, computed by tide in
 *     prefill chunks and decode steps that carry only the preceding
 *     max_ngram-1 tokens, versus the oracle on each whole sequence;
 *   - the layer's output on random weights and hidden states (tolerance:
 *     gathered rows bit-exact; kv and x within 2 BF16 ulps, >= 95% exact);
 *   - errors: token ids outside the tokenizer, an inconsistent config. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/engram.h"
#include "num/num.h"
#include "testutil.h"

#define ORACLE TIDE_SOURCE_DIR "/tools/ref/engram_oracle.py"

/* A config holding only what the engram code reads. */
static void engram_config(tide_config *cfg, const int *layers, int n_layers, int64_t vocab,
                          int max_ngram, int n_heads, int head_dim, int64_t compressed,
                          int64_t pad) {
    memset(cfg, 0, sizeof *cfg);
    tide_text_config *t = &cfg->text;
    t->n_engram_layer_ids = t->n_engram_num_embeddings = n_layers;
    for (int k = 0; k < n_layers; k++) {
        t->engram_layer_ids[k] = layers[k];
        t->engram_num_embeddings[k] = INT64_MAX / 64; /* set from the primes below */
    }
    t->engram_max_ngram_size = max_ngram;
    t->engram_n_heads = n_heads;
    t->engram_head_dim = head_dim;
    t->engram_vocab_size = vocab;
    t->engram_compressed_vocab_size = compressed;
    t->engram_pad_token_id = pad;
    t->hidden_size = 64;
    t->hc_mult = 4;
    t->rms_norm_eps = 1e-20;
}

static char *run_oracle(const char *cmd_args, const char *stdin_text) {
    char *dir = tu_mkdtemp("engram_in");
    char path[1024], cmd[2048];
    snprintf(path, sizeof path, "%s/in.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(stdin_text, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s %s %s < %s", TIDE_PYTHON, ORACLE, cmd_args, path);
    char *out = NULL;
    int rc = tu_system(cmd, &out);
    if (rc != 0) fprintf(stderr, "oracle failed: %s\n", out ? out : "");
    assert_int_equal(rc, 0);
    tu_rmtree(dir);
    free(dir);
    return out;
}

/* Reads the next integer after `key` (or at p when key is NULL). */
static int64_t next_int(char **p) {
    char *end;
    while (**p && !(**p == '-' || (**p >= '0' && **p <= '9'))) (*p)++;
    int64_t v = strtoll(*p, &end, 10);
    assert_true(end != *p);
    *p = end;
    return v;
}

static void layout_json(char *buf, size_t cap, const tide_config *cfg) {
    const tide_text_config *t = &cfg->text;
    int o = snprintf(buf, cap, "{\"layer_ids\":[");
    for (int k = 0; k < t->n_engram_layer_ids; k++)
        o += snprintf(buf + o, cap - o, "%s%d", k ? "," : "", t->engram_layer_ids[k]);
    snprintf(buf + o, cap - o,
             "],\"vocab_size\":%" PRId64 ",\"max_ngram\":%" PRId64 ",\"n_heads\":%" PRId64
             ",\"compressed_vocab\":%" PRId64,
             t->engram_vocab_size, t->engram_max_ngram_size, t->engram_n_heads,
             t->engram_compressed_vocab_size);
}

/* Compares tables' multipliers and primes with the oracle's "layout". */
static void check_layout(const tide_engram_tables *t, const tide_config *cfg) {
    char js[4096];
    layout_json(js, sizeof js - 2, cfg);
    strcat(js, "}");
    char *out = run_oracle("layout", js), *p = out;
    for (int k = 0; k < t->n_layers; k++) {
        p = strstr(p, "multipliers");
        assert_non_null(p);
        p += 11;
        for (int j = 0; j < t->max_ngram; j++) {
            int64_t want = next_int(&p);
            if (t->multipliers[k * t->max_ngram + j] != want)
                fail_msg("layer %d multiplier %d: %" PRId64 " != numpy %" PRId64, t->layer_ids[k], j,
                         t->multipliers[k * t->max_ngram + j], want);
        }
    }
    for (int k = 0; k < t->n_layers; k++) {
        p = strstr(p, "primes");
        assert_non_null(p);
        p += 6;
        for (int c = 0; c < t->n_cols; c++) assert_int_equal(t->primes[k * t->n_cols + c], next_int(&p));
    }
    free(out);
}

static void test_released_layout(void **state) {
    (void)state;
    const int layers[] = {1, 14};
    tide_config cfg;
    engram_config(&cfg, layers, 2, 16000000, 4, 8, 256, 99092, 2);
    cfg.text.engram_num_embeddings[0] = 384006168;
    cfg.text.engram_num_embeddings[1] = 384016682;
    tide_engram_token_map m;
    tide_status st = {0};
    assert_int_equal(tide_engram_token_map_synthetic(129280, 99092, &m, &st), 0);
    tide_engram_tables t;
    assert_int_equal(tide_engram_tables_build(&cfg, &m, &t, &st), 0);
    assert_int_equal(t.n_cols, 24);
    assert_int_equal(t.primes[0], 16000057);
    for (int k = 0; k < 2; k++) { /* the table is exactly the union of the bucket ranges */
        int64_t last = (k * 24) + 23;
        assert_int_equal(t.offsets[last] + t.primes[last], cfg.text.engram_num_embeddings[k]);
    }
    for (int i = 0; i < 2 * 4; i++) assert_true(t.multipliers[i] & 1);
    check_layout(&t, &cfg);
    int64_t cp[48]; /* the config module's own copy of the rule agrees */
    assert_int_equal(tide_config_engram_primes(&cfg, cp, 48, &st), 0);
    assert_memory_equal(cp, t.primes, sizeof cp);
    tide_engram_tables_free(&t);

    /* one row short: refused, naming the layer */
    cfg.text.engram_num_embeddings[1] -= 1;
    assert_int_equal(tide_engram_tables_build(&cfg, &m, &t, &st), -1);
    assert_non_null(strstr(st.msg, "engram layer 14"));
    cfg.text.engram_num_embeddings[1] += 1;
    /* a tokenizer whose compressed size differs from the config: refused */
    cfg.text.engram_compressed_vocab_size = 99091;
    assert_int_equal(tide_engram_tables_build(&cfg, &m, &t, &st), -1);
    assert_non_null(strstr(st.msg, "engram_compressed_vocab_size"));
    tide_engram_token_map_free(&m);
}

/* Random small layouts and sequences; tide hashes each sequence as a prefill
 * chunk followed by decode steps, every call given only its history. */
static void test_hash_random(void **state) {
    (void)state;
    tu_rng r = {tu_seed()};
    for (int trial = 0; trial < 3; trial++) {
        int n_layers = 1 + (int)(tu_next(&r) % 3), layers[3];
        for (int k = 0; k < n_layers; k++) layers[k] = (int)(tu_next(&r) % 60) + k * 60;
        int max_ngram = 2 + (int)(tu_next(&r) % 4), n_heads = 1 + (int)(tu_next(&r) % 4);
        int64_t vocab = 50 + (int64_t)(tu_next(&r) % 5000);
        int64_t n_tokens = 300 + (int64_t)(tu_next(&r) % 300);
        int64_t V = 20 + (int64_t)(tu_next(&r) % 250);
        tide_config cfg;
        engram_config(&cfg, layers, n_layers, vocab, max_ngram, n_heads, 32, V, 2);
        tide_engram_token_map m;
        tide_status st = {0};
        assert_int_equal(tide_engram_token_map_synthetic(n_tokens, V, &m, &st), 0);
        /* scramble the map so compressed ids are not just id % V */
        for (int64_t i = 0; i < n_tokens; i++) m.map[i] = (int32_t)(tu_next(&r) % (uint64_t)V);
        for (int64_t v = 0; v < V; v++) m.map[v] = (int32_t)v; /* every compressed id in use */
        tide_engram_tables t;
        assert_int_equal(tide_engram_tables_build(&cfg, &m, &t, &st), 0);
        check_layout(&t, &cfg);

        enum { NSEQ = 3, LEN = 40 };
        int32_t ids[NSEQ][LEN];
        uint8_t dead[NSEQ][LEN];
        char js[65536];
        layout_json(js, sizeof js, &cfg);
        size_t o = strlen(js);
        o += (size_t)snprintf(js + o, sizeof js - o, ",\"pad_id\":%" PRId64 ",\"seqs\":[", t.pad_id);
        for (int s = 0; s < NSEQ; s++) {
            int dstart = (int)(tu_next(&r) % LEN), dlen = (int)(tu_next(&r) % 6);
            if (s == 0) dlen = 0;
            for (int i = 0; i < LEN; i++) {
                ids[s][i] = (int32_t)(tu_next(&r) % (uint64_t)n_tokens);
                dead[s][i] = i >= dstart && i < dstart + dlen;
                o += (size_t)snprintf(js + o, sizeof js - o, "%s%d", i ? "," : (s ? ",[" : "["),
                                      dead[s][i] ? -1 : m.map[ids[s][i]]);
            }
            o += (size_t)snprintf(js + o, sizeof js - o, "]");
        }
        snprintf(js + o, sizeof js - o, "]}");
        char *out = run_oracle("hash", js), *p = out;

        const int C = t.n_cols, L = t.n_layers, H = max_ngram - 1;
        int64_t *rows = malloc(sizeof(int64_t) * LEN * L * C);
        for (int s = 0; s < NSEQ; s++) {
            /* prefill [0, split), then one position at a time */
            int split = 1 + (int)(tu_next(&r) % (LEN - 1));
            assert_int_equal(tide_engram_hash(&t, ids[s], dead[s], 0, split, rows, &st), 0);
            for (int pos = split; pos < LEN; pos++) {
                int nh = pos < H ? pos : H;
                if (tu_next(&r) % 4 == 0) nh = pos; /* more history than needed is fine */
                assert_int_equal(tide_engram_hash(&t, ids[s] + pos - nh, dead[s] + pos - nh, nh, 1,
                                                  rows + (size_t)pos * L * C, &st), 0);
            }
            for (int i = 0; i < LEN * L * C; i++) {
                int64_t want = next_int(&p);
                if (rows[i] != want)
                    fail_msg("trial %d seq %d pos %d layer %d col %d: %" PRId64 " != %" PRId64, trial,
                             s, i / (L * C), (i / C) % L, i % C, rows[i], want);
            }
        }
        free(rows);
        free(out);
        tide_engram_tables_free(&t);
        tide_engram_token_map_free(&m);
    }
}

static void test_reject_bad_tokens(void **state) {
    (void)state;
    const int layers[] = {3};
    tide_config cfg;
    engram_config(&cfg, layers, 1, 100, 3, 2, 32, 10, 2);
    tide_engram_token_map m;
    tide_status st = {0};
    assert_int_equal(tide_engram_token_map_synthetic(50, 10, &m, &st), 0);
    tide_engram_tables t;
    assert_int_equal(tide_engram_tables_build(&cfg, &m, &t, &st), 0);
    int32_t ids[4] = {1, 2, 50, 3};
    int64_t rows[4 * 4];
    assert_int_equal(tide_engram_hash(&t, ids, NULL, 0, 4, rows, &st), -1);
    assert_non_null(strstr(st.msg, "token id 50"));
    ids[2] = -7;
    assert_int_equal(tide_engram_hash(&t, ids, NULL, 0, 4, rows, &st), -1);
    /* a dead position's id is never looked up */
    uint8_t dead[4] = {0, 0, 1, 0};
    assert_int_equal(tide_engram_hash(&t, ids, dead, 0, 4, rows, &st), 0);
    /* ...but a bad id in the history is */
    ids[2] = 1;
    ids[0] = 1000;
    assert_int_equal(tide_engram_hash(&t, ids, NULL, 2, 2, rows, &st), -1);
    tide_engram_tables_free(&t);
    /* the pad token must be inside the tokenizer */
    cfg.text.engram_pad_token_id = 50;
    assert_int_equal(tide_engram_tables_build(&cfg, &m, &t, &st), -1);
    tide_engram_token_map_free(&m);
}

/* ---- the layer's output ---------------------------------------------------- */

static void dump(const char *dir, const char *name, const void *p, size_t bytes) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, bytes, f), bytes);
    fclose(f);
}

static float *load(const char *dir, const char *name, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    float *v = malloc(n * sizeof *v);
    assert_int_equal(fread(v, sizeof *v, n, f), n);
    fclose(f);
    return v;
}

static uint8_t rand_e4m3(tu_rng *r) {
    uint8_t c;
    do c = (uint8_t)tu_next(r); while ((c & 0x7f) == 0x7f);
    return c;
}

static float bf16_ulp(float v) {
    int e;
    frexpf(fabsf(v), &e);
    return ldexpf(1.0f, e - 8);
}

/* Counts elements beyond 2 bf16 ulps and exact matches. */
static void compare(const char *what, const float *got, const float *want, size_t n) {
    size_t exact = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        float a = got[i], b = want[i];
        if (a == b) { exact++; continue; }
        float tol = 2 * bf16_ulp(fmaxf(fabsf(a), fabsf(b))) + 1e-30f;
        if (!(fabsf(a - b) <= tol) && bad++ < 5)
            fprintf(stderr, "%s[%zu]: tide %.9g, numpy %.9g\n", what, i, a, b);
    }
    fprintf(stderr, "%s: %zu/%zu exact\n", what, exact, n);
    assert_int_equal(bad, 0);
    assert_true(exact * 100 >= n * 95);
}

static void forward_case(tide_engram_dims d, int n, uint64_t salt) {
    tu_rng r = {tu_seed() ^ salt};
    const int R = 300;
    const size_t K = (size_t)d.n_cols * d.head_dim, N = (size_t)(d.hc_mult + 1) * d.dim;
    uint8_t *embed = malloc((size_t)R * d.head_dim), *escale = malloc((size_t)R * d.head_dim / 32);
    uint8_t *wkv = malloc(N * K), *wscale = malloc(((N + 31) / 32) * (K / 32));
    float *qw = malloc(sizeof(float) * d.hc_mult * d.dim), *kw = malloc(sizeof(float) * d.hc_mult * d.dim);
    float *x = malloc(sizeof(float) * n * d.hc_mult * d.dim);
    int64_t *rows = malloc(sizeof(int64_t) * n * d.n_cols);
    uint8_t *dead = malloc((size_t)n);
    for (int i = 0; i < n; i++) dead[i] = i % 5 == 2;
    for (int i = 0; i < R * d.head_dim; i++) embed[i] = rand_e4m3(&r);
    for (int i = 0; i < R * d.head_dim / 32; i++) escale[i] = (uint8_t)(118 + tu_next(&r) % 8);
    for (size_t i = 0; i < N * K; i++) wkv[i] = rand_e4m3(&r);
    for (size_t i = 0; i < ((N + 31) / 32) * (K / 32); i++) wscale[i] = (uint8_t)(112 + tu_next(&r) % 6);
    for (int i = 0; i < d.hc_mult * d.dim; i++) {
        qw[i] = tide_round_bf16((float)(1 + 0.3 * tu_normal(&r)));
        kw[i] = tide_round_bf16((float)(1 + 0.3 * tu_normal(&r)));
    }
    for (int i = 0; i < n * d.hc_mult * d.dim; i++) x[i] = tide_round_bf16((float)tu_normal(&r));
    for (int i = 0; i < n * d.n_cols; i++) rows[i] = (int64_t)(tu_next(&r) % R);

    char *dir = tu_mkdtemp("engram_fwd");
    char meta[512];
    snprintf(meta, sizeof meta,
             "{\"n\":%d,\"dim\":%d,\"hc\":%d,\"n_cols\":%d,\"head_dim\":%d,\"rows\":%d,\"eps\":1e-20}", n,
             d.dim, d.hc_mult, d.n_cols, d.head_dim, R);
    dump(dir, "meta.json", meta, strlen(meta));
    dump(dir, "embed.u8", embed, (size_t)R * d.head_dim);
    dump(dir, "embed_scale.u8", escale, (size_t)R * d.head_dim / 32);
    dump(dir, "wkv.u8", wkv, N * K);
    dump(dir, "wkv_scale.u8", wscale, ((N + 31) / 32) * (K / 32));
    dump(dir, "q_weight.f32", qw, sizeof(float) * d.hc_mult * d.dim);
    dump(dir, "k_weight.f32", kw, sizeof(float) * d.hc_mult * d.dim);
    dump(dir, "x.f32", x, sizeof(float) * n * d.hc_mult * d.dim);
    dump(dir, "rows.i64", rows, sizeof(int64_t) * n * d.n_cols);
    dump(dir, "dead.u8", dead, n);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s forward %s 2>&1", TIDE_PYTHON, ORACLE, dir);
    char *msg = NULL;
    int rc = tu_system(cmd, &msg);
    if (rc) fprintf(stderr, "%s\n", msg);
    assert_int_equal(rc, 0);
    free(msg);

    tide_engram_weights w = {embed, escale, R, wkv, wscale, qw, kw};
    tide_status st = {0};
    /* gathered rows: bit-exact */
    float *emb = malloc(sizeof(float) * n * K), *want_emb = load(dir, "emb.f32", n * K);
    assert_int_equal(tide_engram_gather(&w, &d, rows, d.n_cols, n, emb, &st), 0);
    assert_memory_equal(emb, want_emb, sizeof(float) * n * K);
    /* the whole layer */
    float *x0 = malloc(sizeof(float) * n * d.hc_mult * d.dim);
    memcpy(x0, x, sizeof(float) * n * d.hc_mult * d.dim);
    assert_int_equal(tide_engram_forward(&w, &d, rows, d.n_cols, dead, n, x, &st), 0);
    float *want = load(dir, "out.f32", (size_t)n * d.hc_mult * d.dim);
    compare("engram out", x, want, (size_t)n * d.hc_mult * d.dim);
    size_t moved = 0, live = 0; /* the inputs are scaled so the update is not lost in rounding */
    for (int i = 0; i < n; i++)
        for (int j = 0; !dead[i] && j < d.hc_mult * d.dim; j++, live++)
            moved += x[(size_t)i * d.hc_mult * d.dim + j] != x0[(size_t)i * d.hc_mult * d.dim + j];
    fprintf(stderr, "engram out: %zu/%zu live values changed\n", moved, live);
    assert_true(moved * 10 >= live * 8);
    for (int i = 0; i < n; i++) /* dead positions untouched, live ones moved */
        assert_int_equal(memcmp(x + (size_t)i * d.hc_mult * d.dim, x0 + (size_t)i * d.hc_mult * d.dim,
                                sizeof(float) * d.hc_mult * d.dim) == 0,
                         dead[i] != 0);
    /* the pooled variant: bit-identical */
    float *xp = malloc(sizeof(float) * n * d.hc_mult * d.dim);
    memcpy(xp, x0, sizeof(float) * n * d.hc_mult * d.dim);
    tide_pool *pool = NULL;
    assert_int_equal(tide_pool_create(3, &pool, &st), 0);
    assert_int_equal(tide_engram_forward_pool(pool, &w, &d, rows, d.n_cols, dead, n, xp, &st), 0);
    tide_pool_destroy(pool);
    assert_memory_equal(xp, x, sizeof(float) * n * d.hc_mult * d.dim);
    free(xp);
    /* mix alone from the oracle's kv gives the same result */
    float *kv = load(dir, "kv.f32", n * N);
    memcpy(x, x0, sizeof(float) * n * d.hc_mult * d.dim);
    tide_engram_mix(&w, &d, kv, dead, n, x);
    compare("engram mix", x, want, (size_t)n * d.hc_mult * d.dim);

    /* a row outside the table is an error, not a read, and x stays as it was */
    rows[(size_t)(n - 1) * d.n_cols + 1] = R;
    memcpy(x, x0, sizeof(float) * n * d.hc_mult * d.dim);
    assert_int_equal(tide_engram_forward(&w, &d, rows, d.n_cols, dead, n, x, &st), -1);
    assert_non_null(strstr(st.msg, "outside the table"));
    assert_memory_equal(x, x0, sizeof(float) * n * d.hc_mult * d.dim);

    free(kv); free(want); free(x0); free(emb); free(want_emb); free(dead);
    free(embed); free(escale); free(wkv); free(wscale); free(qw); free(kw); free(x); free(rows);
    tu_rmtree(dir);
    free(dir);
}

static void test_forward_random(void **state) {
    (void)state;
    tide_engram_dims small = {.dim = 64, .hc_mult = 4, .n_cols = 6, .head_dim = 64, .eps = 1e-20f};
    forward_case(small, 70, 0xf0f0); /* more positions than one pass of the forward */
    /* the released row width and column count (K = 24 x 256 = 6144), a narrower model */
    tide_engram_dims wide = {.dim = 256, .hc_mult = 4, .n_cols = 24, .head_dim = 256, .eps = 1e-20f};
    forward_case(wide, 5, 0x0f0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_released_layout),
        cmocka_unit_test(test_hash_random),
        cmocka_unit_test(test_reject_bad_tokens),
        cmocka_unit_test(test_forward_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
