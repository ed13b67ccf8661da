/* The forward pass with an image span (tide_forward_images, docs/vision.md)
 * against the numpy reference (tools/ref/model.py with its image input, run
 * by tests/vision_ref_forward.py) on a fresh tiny checkpoint with a vision
 * tower: the span rows replace the embeddings, span positions route with
 * bias_vl and are dead to engram (in later tokens' n-grams too); every
 * prefill row and two decode rows compared. Also the refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "model/model.h"
#include "num/num.h"
#include "test_ops_util.h"
#include "vision/vision.h"

#define LOGIT_TOL 0.08 /* as test_forward_ref (docs/model.md "Error bound") */

static double max_diff(const float *a, const double *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void span_matches_numpy(void **state) {
    (void)state;
    char tok[1024], cmd[8192];
    const char *t = tn_tokenizer(tok, sizeof tok);
    char np_cmd[512];
    snprintf(np_cmd, sizeof np_cmd, "%s -c 'import numpy' 2>/dev/null", TIDE_PYTHON);
    TU_NEED_DEP(t && tu_system(np_cmd, NULL) == 0, "the stand-in tokenizer and python3-numpy",
                "scripts/oracle-deps.sh, apt-get install python3-numpy");
    uint64_t seed = tu_seed() % 100000 + 1;
    char *dir = tu_mkdtemp("visfwd");
    snprintf(cmd, sizeof cmd, "'%s' synth --shape tiny --vision --seed %llu -o '%s' --tokenizer '%s' -q 2>&1",
             TIDE_EXE, (unsigned long long)seed, dir, t);
    char *out = NULL;
    if (tu_system(cmd, &out)) fail_msg("synth: %s", out ? out : "");
    free(out);
    tide_status st = {0};
    tide_model *m;
    if (tide_model_load(dir, &m, &st)) fail_msg("load: %s", st.msg);
    tide_st *ck;
    if (tide_st_open(dir, &ck, &st)) fail_msg("%s", st.msg);
    tide_vision v;
    if (tide_vision_bind(&v, &m->cfg, ck, &st)) fail_msg("%s", st.msg);

    /* [BOS, 6 text, span of a 3 x 2 token grid (10 positions), 8 text], then 2 decode steps */
    tide_image_plan pl = {.n_vit_h = 7, .n_vit_w = 5, .n_llm_h = 3, .n_llm_w = 2};
    int64_t D = m->cfg.text.hidden_size, V = m->cfg.text.vocab_size, span = tide_image_span_len(&pl);
    int64_t at = 7, n = at + span + 8, p = v.cfg.patch_size;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n), types32[64], dec[2];
    int8_t types[64];
    float *rows = calloc((size_t)(n * D), sizeof(float));
    float *patches = malloc(sizeof(float) * (size_t)(pl.n_vit_h * pl.n_vit_w * 3 * p * p));
    tu_rng rng = {seed};
    tn_random_tokens(m, &rng, ids, n);
    tn_random_tokens(m, &rng, dec, 2);
    ids[0] = 0;
    for (int64_t i = 0; i < pl.n_vit_h * pl.n_vit_w * 3 * p * p; i++)
        patches[i] = tide_round_bf16((float)(tu_uniform(&rng) * 2 - 1));
    if (tide_vision_span_embeds(&v, tide_cpu_ops(), NULL, patches, &pl, rows + at * D, &st)) fail_msg("%s", st.msg);
    memset(types, -1, sizeof types);
    tide_image_span_types(&pl, (int8_t *)types + at);
    for (int64_t i = at; i < at + span; i++) ids[i] = (int32_t)m->cfg.image_token_id;
    for (int64_t i = 0; i < n; i++) types32[i] = types[i];

    /* tide: one prefill step with every row's logits, then decode */
    tide_fwd_opts o = tide_fwd_default_opts();
    tide_fwd_ctx *fx;
    assert_int_equal(tide_fwd_ctx_create(m, tide_cpu_ops(), 2, &o, &fx, &st), 0);
    tide_seq_cache sc;
    assert_int_equal(tide_fwd_seq_init(fx, &sc, &st), 0);
    float *lg = malloc(sizeof(float) * (size_t)((n + 2) * V));
    tide_step_seq s = {&sc, ids, n, TIDE_LOGITS_ALL};
    tide_step_image im = {types, rows};
    tide_step_out so = {lg, NULL};
    /* refusals first: the image token without a span, a span without rows, a
     * span position whose id is not the image token; none changes the state */
    assert_int_equal(tide_forward(fx, &s, 1, &so, &st), -1);
    assert_non_null(strstr(st.msg, "outside an image span"));
    tide_step_image bad = {types, NULL};
    assert_int_equal(tide_forward_images(fx, &s, 1, &bad, &so, &st), -1);
    ids[at + 1] = 5;
    assert_int_equal(tide_forward_images(fx, &s, 1, &im, &so, &st), -1);
    ids[at + 1] = (int32_t)m->cfg.image_token_id;
    assert_int_equal(sc.pos, 0);
    if (tide_forward_images(fx, &s, 1, &im, &so, &st)) fail_msg("forward: %s", st.msg);
    for (int i = 0; i < 2; i++) {
        tide_step_seq d = {&sc, &dec[i], 1, TIDE_LOGITS_LAST};
        tide_step_out dout = {lg + (n + i) * V, NULL};
        if (tide_forward(fx, &d, 1, &dout, &st)) fail_msg("decode: %s", st.msg);
    }

    /* the reference */
    char path[4096];
    tn_arr a[4] = {{"ids", 'i', 1, {n, 0, 0, 0}, ids}, {"types", 'i', 1, {n, 0, 0, 0}, types32},
                   tn_f32("rows", rows, 2, n, D, 0), {"dec", 'i', 1, {2, 0, 0, 0}, dec}};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s.npy", dir, a[i].name);
        assert_int_equal(tn_write_npy(path, &a[i]), 0);
    }
    snprintf(cmd, sizeof cmd, "%s %s/tests/vision_ref_forward.py '%s' 2>&1", TIDE_PYTHON, TIDE_SOURCE_DIR, dir);
    out = NULL;
    if (tu_system(cmd, &out)) fail_msg("vision_ref_forward.py: %s", out ? out : "");
    free(out);
    int64_t nr, nt;
    double *ref = tn_out(dir, "/ref", &nr), *txt = tn_out(dir, "/text_routing", &nt);
    assert_true(ref && txt && nr == (n + 2) * V && nt == nr);
    double worst = 0, worst_span = 0;
    for (int64_t r = 0; r < n + 2; r++) {
        double d = max_diff(lg + r * V, ref + r * V, V);
        worst = fmax(worst, d);
        if (r >= at && r < at + span) worst_span = fmax(worst_span, d);
    }
    double bias_vl_effect = 0;
    for (int64_t i = 0; i < nr; i++) bias_vl_effect = fmax(bias_vl_effect, fabs(ref[i] - txt[i]));
    fprintf(stderr,
            "seed %llu: max |logit - ref| %.4f over %lld rows (%.4f in the span), tolerance %.2f; routing the span "
            "with the text bias would move the reference's logits by up to %.4f\n",
            (unsigned long long)seed, worst, (long long)(n + 2), worst_span, LOGIT_TOL, bias_vl_effect);
    assert_true(worst < LOGIT_TOL);
    free(ref), free(txt), free(lg), free(ids), free(rows), free(patches);
    tide_fwd_seq_free(fx, &sc);
    tide_fwd_ctx_free(fx);
    tide_vision_free(&v);
    tide_st_close(ck);
    tide_model_free(m);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(span_matches_numpy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
