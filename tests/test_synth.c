/* Synthetic checkpoints: every shape writes (or, for the released sizes,
 * plans) a checkpoint whose every manifest tensor reads back with the right
 * dtype and shape, whose values are the documented function of the seed,
 * whose slab-wise quantisation equals whole-tensor quantisation, and whose
 * bytes are reproducible. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/manifest.h"
#include "model/synth.h"
#include "num/num.h"
#include "testutil.h"

static uint64_t seed_below_2_63(void) { return tu_seed() >> 1; }

/* Writes shape into a fresh dir; returns the dir (caller removes and frees). */
static char *write_shape(const char *shape, uint64_t seed, int layers, const char *tok, tide_config *cfg,
                         int threads) {
    tide_status st = {0};
    char *dir = tu_mkdtemp("synth");
    assert_non_null(dir);
    assert_int_equal(tide_config_preset(shape, cfg, &st), 0);
    tide_synth_opts o = {.out_dir = dir, .shape = shape, .seed = seed, .layers = layers, .tokenizer = tok,
                         .threads = threads};
    tide_synth_report rep;
    if (tide_synth_write(cfg, &o, &rep, &st)) fail_msg("%s", st.msg);
    assert_int_equal(rep.wrote_tokenizer, tok != NULL);
    assert_true(rep.nshards >= 2);
    return dir;
}

/* Opens dir, checks the config and every manifest tensor. */
static void verify_dir(const char *dir, const char *shape, uint64_t seed, tide_st **ck_out, tide_config *c,
                       tide_manifest *m) {
    tide_status st = {0};
    if (tide_config_load(dir, c, &st)) fail_msg("%s", st.msg);
    assert_true(c->synth.is_synthetic);
    assert_string_equal(c->synth.shape, shape);
    assert_true(c->synth.seed == seed);
    assert_int_equal(tide_manifest_build(c, m, &st), 0);
    tide_st *ck;
    if (tide_st_open(dir, &ck, &st)) fail_msg("%s", st.msg);
    size_t miss = 1, wrong = 1, extra = 1;
    if (tide_manifest_verify(m, ck, &miss, &wrong, &extra, &st)) fail_msg("%s", st.msg);
    assert_true(miss == 0 && wrong == 0 && extra == 0);
    assert_int_equal(tide_st_count(ck), m->n);
    assert_true(tide_st_total_bytes(ck) == m->total_bytes);
    *ck_out = ck;
}

static float *values_of(uint64_t seed, const tide_manifest_entry *e) {
    uint64_t n = (uint64_t)e->shape[0] * (uint64_t)(e->ndim > 1 ? e->shape[1] : 1);
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    tide_synth_values(seed, e, 0, n, v);
    return v;
}

/* Stored bytes equal the values quantised whole (the writer works in slabs). */
static void check_tensor(const tide_st *ck, const tide_manifest *m, uint64_t seed, const char *name) {
    const tide_manifest_entry *e = tide_manifest_find(m, name);
    assert_non_null(e);
    const tide_tensor *t = tide_st_find(ck, name);
    assert_non_null(t);
    size_t rows = (size_t)e->shape[0], cols = (size_t)(e->ndim > 1 ? e->shape[1] : 1);
    if (e->ndim == 1) {
        cols = rows;
        rows = 1;
    }
    size_t n = rows * cols;
    float *v = values_of(seed, e);
    uint8_t *q = malloc(n * 4 + 64), *s = malloc(n / 8 + 64);
    if (e->kind == TIDE_WK_PLAIN && e->dtype == TIDE_DT_F32) {
        assert_memory_equal(t->data, v, n * 4);
    } else if (e->kind == TIDE_WK_PLAIN) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, (const uint8_t *)t->data + 2 * i, 2);
            assert_true(tide_bf16_to_f32(h) == tide_round_bf16(v[i]));
        }
    } else {
        const tide_tensor *ts = tide_st_find(ck, e[1].name);
        assert_non_null(ts);
        float *d = malloc(n * sizeof *d);
        if (e->kind == TIDE_WK_FP8_WEIGHT) {
            tide_quant_fp8_weight(v, rows, cols, q, s);
            tide_dequant_fp8_weight(t->data, ts->data, rows, cols, d);
        } else if (e->kind == TIDE_WK_FP4_WEIGHT) {
            tide_quant_fp4_weight(v, rows, cols, q, s);
            tide_dequant_fp4_weight(t->data, ts->data, rows, cols, d);
        } else {
            tide_quant_fp8_act(v, n, 32, q, s);
            for (size_t i = 0; i < n; i++)
                d[i] = tide_e4m3_to_f32(((const uint8_t *)t->data)[i]) *
                       tide_e8m0_to_f32(((const uint8_t *)ts->data)[i / 32]);
        }
        assert_memory_equal(t->data, q, t->nbytes);
        assert_memory_equal(ts->data, s, ts->nbytes);
        /* and the stored numbers are close to the values: 3 mantissa bits for
         * FP8, 1 for FP4, relative to each block's scale */
        double tol = e->kind == TIDE_WK_FP4_WEIGHT ? 0.26 : 0.07;
        for (size_t i = 0; i < n; i++) {
            double amax = 0; /* amax of this value's row block of 32 */
            size_t b0 = i / 32 * 32;
            for (size_t k = b0; k < b0 + 32 && k < n; k++) amax = fmax(amax, fabs(v[k]));
            if (e->kind == TIDE_WK_FP8_WEIGHT) amax = 1e9; /* 32x32 blocks: relative bound only */
            double err = fabs(d[i] - v[i]);
            if (!(err <= tol * fabs(v[i]) + (e->kind == TIDE_WK_FP8_WEIGHT ? 1e-3 : amax / 8)))
                fail_msg("%s[%zu]: stored %g, value %g", name, i, d[i], v[i]);
        }
        free(d);
    }
    free(v);
    free(q);
    free(s);
}

/* Sample statistics match the init the manifest asks for. */
static void check_stats(uint64_t seed, const tide_manifest *m, const char *name) {
    const tide_manifest_entry *e = tide_manifest_find(m, name);
    assert_non_null(e);
    uint64_t n = (uint64_t)e->shape[0] * (uint64_t)(e->ndim > 1 ? e->shape[1] : 1);
    float *v = values_of(seed, e);
    double s = 0, s2 = 0, mx = 0;
    for (uint64_t i = 0; i < n; i++) {
        s += v[i];
        s2 += (double)v[i] * v[i];
        mx = fmax(mx, fabs(v[i] - e->init_mean));
    }
    double mean = s / (double)n, sd = sqrt(s2 / (double)n - mean * mean);
    /* 5 standard errors: a loose bound for a fixed function of the seed */
    double se = e->init_std / sqrt((double)n);
    assert_true(fabs(mean - e->init_mean) < 5 * se + 1e-6);
    assert_true(fabs(sd - e->init_std) < 0.02 * e->init_std + 5 * se);
    assert_true(mx <= 1.7321 * e->init_std + 1e-6); /* bounded: uniform */
    free(v);
}

static void test_tiny(void **state) {
    (void)state;
    uint64_t seed = seed_below_2_63();
    tide_config *c = malloc(sizeof *c), *c2 = malloc(sizeof *c2);
    char *tokdir = tu_mkdtemp("tok");
    char tok[4200];
    snprintf(tok, sizeof tok, "%s/tokenizer.json", tokdir);
    FILE *f = fopen(tok, "w");
    assert_non_null(f);
    /* "a" and "A" normalise alike: 2 compressed ids */
    fputs("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1, \"A\": 2}}, \"added_tokens\": []}\n", f);
    fclose(f);
    char *dir = write_shape("tiny", seed, 0, tok, c, 1);
    tide_st *ck;
    tide_manifest m;
    verify_dir(dir, "tiny", seed, &ck, c2, &m);
    assert_int_equal(c2->present_layers, 10);
    assert_int_equal(c2->text.engram_compressed_vocab_size, 2); /* from the tokenizer */
    c->text.engram_compressed_vocab_size = 2;
    /* the roles survive the round trip through config.json */
    assert_memory_equal(c->roles, c2->roles, sizeof(tide_layer_role) * (size_t)c->n_layers);
    const char *names[] = {"norm.weight",
                           "layers.0.attn.attn_sink",
                           "layers.0.hc_attn_fn",
                           "layers.3.attn.wq_b.weight",
                           "layers.2.attn.compressor.wgate.weight",
                           "layers.5.ffn.experts.6.w2.weight",
                           "layers.1.engram.embed.weight",
                           "layers.4.engram.wkv.weight",
                           "mtp.0.main_proj.weight",
                           "mtp.2.markov_head.head.weight",
                           "mtp.1.ffn.shared_experts.w1.weight"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) check_tensor(ck, &m, seed, names[i]);
    check_stats(seed, &m, "mtp.2.markov_head.embed.weight");
    check_stats(seed, &m, "layers.2.ffn.experts.0.w1.weight");
    check_stats(seed, &m, "layers.0.attn_norm.weight");
    /* tokenizer copied */
    char path[4300];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    char *out = NULL;
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cmp '%s' '%s'", tok, path);
    assert_int_equal(tu_system(cmd, &out), 0);
    free(out);
    tide_st_close(ck);

    /* Same seed -> same bytes, whatever the thread count. */
    char *dir2 = write_shape("tiny", seed, 0, tok, c, 3);
    snprintf(cmd, sizeof cmd, "cmp '%s/model-00001-of-00002.safetensors' '%s/model-00001-of-00002.safetensors' && "
                              "cmp '%s/model-00002-of-00002.safetensors' '%s/model-00002-of-00002.safetensors' && "
                              "cmp '%s/model.safetensors.index.json' '%s/model.safetensors.index.json' && "
                              "cmp '%s/config.json' '%s/config.json'",
             dir, dir2, dir, dir2, dir, dir2, dir, dir2);
    assert_int_equal(tu_system(cmd, NULL), 0);
    tu_rmtree(dir2);
    free(dir2);
    /* another seed gives other values */
    const tide_manifest_entry *e = tide_manifest_find(&m, "layers.0.attn.wq_a.weight");
    float a[64], b[64];
    tide_synth_values(seed, e, 100, 64, a);
    tide_synth_values(seed + 1, e, 100, 64, b);
    assert_memory_not_equal(a, b, sizeof a);
    tide_manifest_free(&m);
    tu_rmtree(dir);
    free(dir);
    tu_rmtree(tokdir);
    free(tokdir);
    free(c);
    free(c2);
}

static void test_small_and_partial(void **state) {
    (void)state;
    uint64_t seed = seed_below_2_63();
    tide_config *c = malloc(sizeof *c), *c2 = malloc(sizeof *c2);
    tide_st *ck;
    tide_manifest m;
    char *dir = write_shape("small", seed, 0, NULL, c, 2);
    verify_dir(dir, "small", seed, &ck, c2, &m);
    check_tensor(ck, &m, seed, "layers.6.attn.indexer.wk.weight");
    check_tensor(ck, &m, seed, "layers.9.ffn.experts.15.w3.weight");
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "test ! -e '%s/tokenizer.json'", dir);
    assert_int_equal(tu_system(cmd, NULL), 0);
    assert_int_equal(c2->text.engram_compressed_vocab_size, 99092); /* no tokenizer: the preset's */
    tide_st_close(ck);
    tide_manifest_free(&m);
    tu_rmtree(dir);
    free(dir);

    /* --layers 3: layers 0-2 and the DSpark stages only */
    dir = write_shape("tiny", seed, 3, NULL, c, 1);
    verify_dir(dir, "tiny", seed, &ck, c2, &m);
    assert_int_equal(c2->present_layers, 3);
    assert_int_equal(c2->synth.written_layers, 3);
    assert_non_null(tide_st_find(ck, "layers.2.attn.compressor.wkv.weight"));
    assert_null(tide_st_find(ck, "layers.3.attn.wq_a.weight"));
    assert_non_null(tide_st_find(ck, "mtp.2.confidence_head.proj.weight"));
    tide_st_close(ck);
    tide_manifest_free(&m);
    tu_rmtree(dir);
    free(dir);
    free(c);
    free(c2);
}

/* The released shapes are only planned here (hundreds of GB). */
static void test_dry_runs(void **state) {
    (void)state;
    tide_config *c = malloc(sizeof *c);
    tide_status st = {0};
    const char *shapes[] = {"flash", "flash-ep8"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(tide_config_preset(shapes[i], c, &st), 0);
        tide_synth_opts o = {.out_dir = "/nonexistent/never-written", .shape = shapes[i], .seed = 1, .dry_run = 1};
        tide_synth_report rep;
        assert_int_equal(tide_synth_write(c, &o, &rep, &st), 0);
        tide_manifest m;
        assert_int_equal(tide_manifest_build(c, &m, &st), 0);
        assert_int_equal(rep.n_tensors, m.n);
        assert_true(rep.total_bytes == m.total_bytes);
        double gib = (double)rep.total_bytes / (1 << 30);
        if (i == 0) assert_true(gib > 400 && rep.nshards == 48);
        else assert_true(gib > 30 && gib < 60);
        uint64_t full = m.total_bytes;
        tide_manifest_free(&m);
        o.layers = 1;
        assert_int_equal(tide_synth_write(c, &o, &rep, &st), 0);
        assert_true(rep.total_bytes < full / 4);
        o.layers = 41;
        assert_int_equal(tide_synth_write(c, &o, &rep, &st), -1);
        assert_non_null(strstr(st.msg, "--layers"));
    }
    free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny),
        cmocka_unit_test(test_small_and_partial),
        cmocka_unit_test(test_dry_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
