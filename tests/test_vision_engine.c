/* Requests carrying images through the engine (docs/vision.md, "In the
 * engine"): on a fresh tiny checkpoint with a vision tower, a prompt [text,
 * one image's span, text] decoded greedily by the engine gives exactly the
 * tokens of the forward API fed by hand (tide_forward_images with the span
 * rows of tide_vision_span_embeds, then plain decode steps), both with the
 * prompt in one chunk and in chunks of 5 that split the span (chunking-
 * invariant layout), and in the reference's layout with fixed chunks of 4
 * against the forward API fed in the same chunks; the prefix
 * cache hits a repeated request (same image) past the span with the same
 * tokens, and a request with the same text and another image shares no page
 * that holds a span position and gives a fresh engine's tokens; bad spans
 * are refused. Fresh random pixels, tokens and weights per run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/forward.h"
#include "model/model.h"
#include "test_ops_util.h"
#include "tide.h"
#include "vision/vision.h"

enum { NEW = 4, PRE = 8, POST = 6, W = 30, H = 20, MAXP = 128 };

typedef struct {
    tn_model_fixture *f;
    uint8_t *pix[2];          /* two random images, W x H */
    int32_t prompt[MAXP];
    int64_t n_prompt, span;
} fx_t;

static int setup(void **state) {
    tn_model_fixture *f = calloc(1, sizeof *f);
    fx_t *x = calloc(1, sizeof *x);
    if (!f || !x) return -1;
    x->f = f;
    *state = x;
    f->seed = tu_seed() % 100000 + 1;
    f->dir = tu_mkdtemp("visengine");
    if (!f->dir || tn_synth(f->dir, "tiny --vision", f->seed) != 0) return -1;
    tide_status st = {0};
    if (tide_model_load(f->dir, &f->m, &st) != 0) {
        fprintf(stderr, "load: %s\n", st.msg);
        return -1;
    }
    tu_rng r = {f->seed * 31 + 7};
    for (int k = 0; k < 2; k++) {
        x->pix[k] = malloc(W * H * 3);
        for (int i = 0; i < W * H * 3; i++) x->pix[k][i] = (uint8_t)(tu_next(&r) & 0xff);
    }
    tide_image_plan pl;
    if (tide_image_plan_grid(W, H, &f->m->cfg.vision, &pl, &st) != 0) return -1;
    x->span = tide_image_span_len(&pl);
    x->n_prompt = PRE + x->span + POST;
    if (x->n_prompt > MAXP) return -1;
    tn_random_tokens(f->m, &r, x->prompt, x->n_prompt);
    for (int64_t j = 0; j < x->span; j++) x->prompt[PRE + j] = (int32_t)f->m->cfg.image_token_id;
    return 0;
}

static int teardown(void **state) {
    fx_t *x = *state;
    if (!x) return 0;
    free(x->pix[0]);
    free(x->pix[1]);
    void *f = x->f;
    free(x);
    return tn_model_teardown(&f);
}

/* canonical: the chunking-invariant layout; else the reference's layout
 * with its fixed chunks of `chunk` tokens (sched.h) */
static tide_engine_config cfg_for(int64_t step_tokens, int prefix, int canonical, int64_t chunk) {
    tide_engine_config c = tide_engine_config_default();
    c.n_threads = 2;
    c.kv_block = 2;
    c.canonical_layout = canonical;
    c.index_key_quirk = !canonical;
    c.prefill_chunk = chunk;
    c.max_step_tokens = step_tokens;
    c.prefix_cache = prefix;
    c.page_tokens = prefix ? 8 : 0;
    c.prefix_replay = -1; /* the whole prefix: a hit is exact */
    return c;
}

/* Greedy over every token but the image token (as the engine's sampler). */
static int32_t argmax(const float *l, int64_t V, int64_t img) {
    int64_t b = img == 0 ? 1 : 0;
    for (int64_t t = 0; t < V; t++)
        if (t != img && l[t] > l[b]) b = t;
    return (int32_t)b;
}

/* The forward API by hand: the prompt in steps of `chunk` tokens (0: one
 * step) with the span's rows, then NEW - 1 decode steps; canonical as
 * cfg_for. */
static void reference(const fx_t *x, int k, int canonical, int64_t chunk, int32_t *out) {
    const tide_model *m = x->f->m;
    tide_status st = {0};
    tide_vision v;
    if (tide_vision_bind(&v, &m->cfg, m->ck, &st)) fail_msg("%s", st.msg);
    tide_image im = {W, H, x->pix[k]};
    tide_image_plan pl;
    assert_int_equal(tide_image_plan_grid(W, H, &m->cfg.vision, &pl, &st), 0);
    int64_t D = m->cfg.text.hidden_size, V = m->cfg.text.vocab_size, p = m->cfg.vision.patch_size;
    float *patches = malloc((size_t)(pl.n_vit_h * pl.n_vit_w * 3 * p * p) * sizeof(float));
    float *rows = calloc((size_t)(x->n_prompt * D), sizeof(float));
    int8_t types[MAXP];
    memset(types, 0xff, sizeof types);
    if (tide_image_patches(&im, &pl, p, patches, &st)) fail_msg("%s", st.msg);
    if (tide_vision_span_embeds(&v, tide_cpu_ops(), NULL, patches, &pl, rows + PRE * D, &st)) fail_msg("%s", st.msg);
    tide_image_span_types(&pl, types + PRE);
    tide_fwd_opts o = tide_fwd_default_opts();
    o.ref_layout = !canonical;
    o.index_key_quirk = !canonical;
    o.kv_block = 2;
    tide_fwd_ctx *fx;
    if (tide_fwd_ctx_create(m, tide_cpu_ops(), 2, &o, &fx, &st)) fail_msg("%s", st.msg);
    tide_seq_cache sc;
    if (tide_fwd_seq_init(fx, &sc, &st)) fail_msg("%s", st.msg);
    float *logits = malloc((size_t)V * sizeof(float));
    tide_step_out so = {logits, NULL};
    tide_step_seq s;
    for (int64_t at = 0; at < x->n_prompt;) {
        int64_t n = chunk > 0 && x->n_prompt - at > chunk ? chunk : x->n_prompt - at;
        s = (tide_step_seq){&sc, x->prompt + at, n, at + n == x->n_prompt ? TIDE_LOGITS_LAST : TIDE_LOGITS_NONE};
        tide_step_image si = {types + at, rows + at * D};
        if (tide_forward_images(fx, &s, 1, &si, &so, &st)) fail_msg("forward: %s", st.msg);
        at += n;
    }
    for (int j = 0; j < NEW; j++) {
        out[j] = argmax(logits, V, m->cfg.image_token_id);
        if (j == NEW - 1) break;
        s = (tide_step_seq){&sc, &out[j], 1, TIDE_LOGITS_LAST};
        if (tide_forward(fx, &s, 1, &so, &st)) fail_msg("decode: %s", st.msg);
    }
    tide_fwd_seq_free(fx, &sc);
    tide_fwd_ctx_free(fx);
    tide_vision_free(&v);
    free(logits);
    free(patches);
    free(rows);
}

/* One request with image k on e, run to the end: its tokens and n_cached. */
static int64_t run_one(tide_engine *e, const fx_t *x, int k, int32_t *out) {
    tide_status st = {0};
    tide_request r = tide_request_default();
    tide_request_image img = {PRE, W, H, x->pix[k]};
    r.prompt = x->prompt;
    r.n_prompt = x->n_prompt;
    r.sampling.temperature = 0;
    r.sampling.max_tokens = NEW;
    r.images = &img;
    r.n_images = 1;
    tide_request_id id;
    if (tide_engine_submit(e, &r, &id, &st) != 0) fail_msg("submit: %s", st.msg);
    while (tide_engine_busy(e)) {
        assert_int_equal(tide_engine_step(e, &st), 0);
        if (tide_engine_check(e, &st) != 0) fail_msg("%s", st.msg);
    }
    tide_request_info info;
    assert_int_equal(tide_engine_get(e, id, &info, &st), 0);
    if (info.reason == TIDE_FINISH_ERROR) fail_msg("request: %s", info.error);
    assert_int_equal(info.n_output, NEW);
    memcpy(out, info.output, NEW * sizeof *out);
    int64_t cached = info.n_cached;
    tide_engine_release(e, id);
    return cached;
}

static tide_engine *make(const fx_t *x, int64_t step_tokens, int prefix) {
    tide_engine_config c = cfg_for(step_tokens, prefix, 1, 0);
    tide_engine *e;
    tide_status st = {0};
    if (tide_engine_create_with_model(&c, x->f->m, &e, &st) != 0) fail_msg("engine: %s", st.msg);
    return e;
}

static void engine_matches_forward(void **state) {
    fx_t *x = *state;
    int32_t ref[NEW], got[NEW];
    reference(x, 0, 1, 0, ref);
    /* one chunk, then chunks of 5 (the span starts at 8: split) */
    int64_t steps[2] = {64, 5};
    for (int i = 0; i < 2; i++) {
        tide_engine *e = make(x, steps[i], 0);
        run_one(e, x, 0, got);
        for (int j = 0; j < NEW; j++)
            if (got[j] != ref[j])
                fail_msg("step budget %lld: token %d is %d, the forward API's %d", (long long)steps[i], j, got[j],
                         ref[j]);
        tide_engine_destroy(e);
    }
    /* the reference's layout, where chunking changes the numbers: the
     * engine's fixed chunks of 4 (cutting the span at 8, 12, ...) against
     * the forward API fed in the same chunks */
    reference(x, 0, 0, 4, ref);
    tide_engine_config c = cfg_for(64, 0, 0, 4);
    tide_engine *e;
    tide_status st = {0};
    if (tide_engine_create_with_model(&c, x->f->m, &e, &st) != 0) fail_msg("engine: %s", st.msg);
    run_one(e, x, 0, got);
    tide_engine_destroy(e);
    assert_memory_equal(got, ref, sizeof got);
}

static void prefix_cache_keys_on_pixels(void **state) {
    fx_t *x = *state;
    int32_t ref0[NEW], ref1[NEW], a[NEW], b[NEW], c[NEW];
    reference(x, 0, 1, 0, ref0);
    reference(x, 1, 1, 0, ref1);
    tide_engine *e = make(x, 64, 1);
    assert_int_equal(run_one(e, x, 0, a), 0);
    int64_t hit = run_one(e, x, 0, b);     /* same image: hits past the span */
    int64_t other = run_one(e, x, 1, c);   /* same text, another image */
    tide_engine_destroy(e);
    if (hit < PRE + x->span - 7) fail_msg("same image: %lld tokens cached, the span ends at %lld", (long long)hit,
                                          (long long)(PRE + x->span));
    if (other > PRE) fail_msg("another image: %lld tokens cached, the span starts at %d", (long long)other, PRE);
    assert_memory_equal(a, ref0, sizeof a);
    assert_memory_equal(b, ref0, sizeof b);
    assert_memory_equal(c, ref1, sizeof c);
}

static void bad_spans_refused(void **state) {
    fx_t *x = *state;
    tide_engine *e = make(x, 64, 1);
    tide_status st = {0};
    tide_request r = tide_request_default();
    r.prompt = x->prompt;
    r.n_prompt = x->n_prompt;
    r.sampling.max_tokens = 2;
    tide_request_id id;
    /* the image token with no image */
    assert_int_equal(tide_engine_submit(e, &r, &id, &st), -1);
    assert_non_null(strstr(st.msg, "outside an image's span"));
    /* the span one position off */
    tide_request_image img = {PRE + 1, W, H, x->pix[0]};
    r.images = &img;
    r.n_images = 1;
    st = (tide_status){0};
    assert_int_equal(tide_engine_submit(e, &r, &id, &st), -1);
    /* past the prompt's end */
    img.pos = x->n_prompt - 2;
    st = (tide_status){0};
    assert_int_equal(tide_engine_submit(e, &r, &id, &st), -1);
    assert_non_null(strstr(st.msg, "outside the prompt"));
    /* no pixels */
    img = (tide_request_image){PRE, W, H, NULL};
    st = (tide_status){0};
    assert_int_equal(tide_engine_submit(e, &r, &id, &st), -1);
    assert_non_null(strstr(st.msg, "no pixels"));
    assert_false(tide_engine_busy(e));
    tide_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(engine_matches_forward),
        cmocka_unit_test(prefix_cache_keys_on_pixels),
        cmocka_unit_test(bad_spans_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
