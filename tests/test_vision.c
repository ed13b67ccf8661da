/* The vision tower and aligner (src/vision/vision.c) against an independent
 * numpy implementation (tests/vision_ref.py) on a fresh synthetic checkpoint
 * (tide synth --vision, tiny widths, random weights) and random patches;
 * and the binder's errors. docs/vision.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/synth.h"
#include "num/num.h"
#include "testutil.h"
#include "vision/vision.h"

/* A tiny text model (one backbone layer) with the tiny vision tower. */
static char *write_vision(uint64_t seed, const char *shape, int with_vision, tide_config *cfg) {
    tide_status st = {0};
    char *dir = tu_mkdtemp("vision");
    assert_non_null(dir);
    assert_int_equal(tide_config_preset(shape, cfg, &st), 0);
    if (with_vision && tide_config_preset_vision(shape, cfg, &st)) fail_msg("%s", st.msg);
    tide_synth_opts o = {.out_dir = dir, .shape = shape, .seed = seed, .layers = 1, .threads = 2};
    if (tide_synth_write(cfg, &o, NULL, &st)) fail_msg("%s", st.msg);
    return dir;
}

static void write_f32(const char *dir, const char *name, const float *x, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(x, sizeof(float), n, f), n);
    fclose(f);
}

/* One image grid through the C tower, then the numpy reference on the same files. */
static void check_grid(const char *dir, const tide_vision *v, tide_pool *pool, tu_rng *rng, int64_t n_h,
                       int64_t n_w) {
    tide_status st = {0};
    int64_t p = v->cfg.patch_size, N = n_h * n_w, Dv = v->cfg.hidden_size, r = v->cfg.downsample_ratio;
    int64_t L = ((n_h + r - 1) / r) * ((n_w + r - 1) / r);
    float *patches = malloc(sizeof(float) * (size_t)(N * 3 * p * p));
    float *tower = malloc(sizeof(float) * (size_t)(N * Dv));
    float *aligned = malloc(sizeof(float) * (size_t)(L * v->text_dim));
    float *again = malloc(sizeof(float) * (size_t)(L * v->text_dim));
    assert_true(patches && tower && aligned && again);
    /* pixels as the preprocessing makes them: (k/255 - 0.5)/0.5, BF16 */
    for (int64_t i = 0; i < N * 3 * p * p; i++)
        patches[i] = tide_round_bf16((float)((double)(tu_next(rng) % 256) / 255.0 * 2.0 - 1.0));
    if (tide_vision_tower(v, tide_cpu_ops(), pool, patches, n_h, n_w, tower, &st)) fail_msg("%s", st.msg);
    if (tide_vision_align(v, tide_cpu_ops(), pool, tower, n_h, n_w, aligned, &st)) fail_msg("%s", st.msg);
    /* encode = tower then aligner, and the thread count changes nothing */
    if (tide_vision_encode(v, tide_cpu_ops(), NULL, patches, n_h, n_w, again, &st)) fail_msg("%s", st.msg);
    assert_memory_equal(aligned, again, sizeof(float) * (size_t)(L * v->text_dim));
    write_f32(dir, "patches.f32", patches, (size_t)(N * 3 * p * p));
    write_f32(dir, "tower.f32", tower, (size_t)(N * Dv));
    write_f32(dir, "aligned.f32", aligned, (size_t)(L * v->text_dim));
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s/tests/vision_ref.py %s %lld %lld 2>&1", TIDE_PYTHON, TIDE_SOURCE_DIR, dir,
             (long long)n_h, (long long)n_w);
    char *out = NULL;
    int rc = tu_system(cmd, &out);
    fprintf(stderr, "[%lld x %lld patches]\n%s", (long long)n_h, (long long)n_w, out ? out : "");
    free(out);
    assert_int_equal(rc, 0);
    free(patches), free(tower), free(aligned), free(again);
}

static int have_numpy(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s -c 'import numpy' 2>/dev/null", TIDE_PYTHON);
    return tu_system(cmd, NULL) == 0;
}

static void tower_matches_numpy(void **state) {
    (void)state;
    TU_NEED_DEP(have_numpy(), "python3 with numpy", "apt-get install python3-numpy (scripts/deps.sh)");
    uint64_t seed = tu_seed();
    tide_config cfg;
    char *dir = write_vision(seed >> 1, "tiny", 1, &cfg);
    tide_status st = {0};
    tide_st *ck;
    if (tide_st_open(dir, &ck, &st)) fail_msg("%s", st.msg);
    tide_vision v;
    if (tide_vision_bind(&v, &cfg, ck, &st)) fail_msg("%s", st.msg);
    tide_pool *pool;
    assert_int_equal(tide_pool_create(2, &pool, &st), 0);
    tu_rng rng = {seed};
    /* grids that are not multiples of r (3): the aligner's zero padding; a
     * single row; and a square one */
    check_grid(dir, &v, pool, &rng, 7, 5);
    check_grid(dir, &v, pool, &rng, 1, 4);
    check_grid(dir, &v, pool, &rng, 6, 6);
    /* the prompt span: delimiters and the aligner's rows in reading order */
    {
        tide_image_plan pl = {.n_vit_h = 7, .n_vit_w = 5, .n_llm_h = 3, .n_llm_w = 2};
        int64_t D = v.text_dim, n = tide_image_span_len(&pl), p = v.cfg.patch_size;
        float *patches = malloc(sizeof(float) * (size_t)(35 * 3 * p * p)), *al = malloc(sizeof(float) * (size_t)(6 * D));
        float *span = malloc(sizeof(float) * (size_t)(n * D));
        int8_t types[64];
        for (int64_t i = 0; i < 35 * 3 * p * p; i++) patches[i] = tide_round_bf16((float)(tu_uniform(&rng) * 2 - 1));
        assert_int_equal(tide_vision_encode(&v, tide_cpu_ops(), pool, patches, 7, 5, al, &st), 0);
        assert_int_equal(tide_vision_span_embeds(&v, tide_cpu_ops(), pool, patches, &pl, span, &st), 0);
        tide_image_span_types(&pl, types);
        int64_t img = 0;
        for (int64_t k = 0; k < n; k++) {
            const float *want = types[k] == TIDE_IMG_START ? v.image_start
                              : types[k] == TIDE_IMG_END   ? v.image_end
                              : types[k] == TIDE_IMG_NEWLINE ? v.image_newline
                                                             : al + (img++) * D;
            assert_memory_equal(span + k * D, want, sizeof(float) * (size_t)D);
        }
        assert_int_equal(img, 6);
        pl.n_llm_w = 3; /* a plan that does not match its patch grid */
        assert_int_equal(tide_vision_span_embeds(&v, tide_cpu_ops(), pool, patches, &pl, span, &st), -1);
        free(patches), free(al), free(span);
    }
    tide_pool_destroy(pool);
    tide_vision_free(&v);
    tide_st_close(ck);
    tu_rmtree(dir);
    free(dir);
}

/* Other widths: downsample 2, heads of 32 (16 RoPE angles), one layer,
 * an odd rope_theta; grids that are and are not multiples of 2. */
static void variant_matches_numpy(void **state) {
    (void)state;
    TU_NEED_DEP(have_numpy(), "python3 with numpy", "apt-get install python3-numpy (scripts/deps.sh)");
    uint64_t seed = tu_seed();
    tide_config cfg;
    tide_status st = {0};
    assert_int_equal(tide_config_preset("tiny", &cfg, &st), 0);
    assert_int_equal(tide_config_preset_vision("tiny", &cfg, &st), 0);
    cfg.vision.num_hidden_layers = 1, cfg.vision.num_attention_heads = 2, cfg.vision.downsample_ratio = 2;
    cfg.vision.rope_theta = 777.0, cfg.vision.intermediate_size = 40, cfg.vision.patch_size = 8;
    assert_int_equal(tide_config_check(&cfg, &st), 0);
    char *dir = tu_mkdtemp("vision");
    tide_synth_opts o = {.out_dir = dir, .shape = "tiny", .seed = seed >> 1, .layers = 1, .threads = 2};
    if (tide_synth_write(&cfg, &o, NULL, &st)) fail_msg("%s", st.msg);
    tide_st *ck;
    if (tide_st_open(dir, &ck, &st)) fail_msg("%s", st.msg);
    tide_vision v;
    if (tide_vision_bind(&v, &cfg, ck, &st)) fail_msg("%s", st.msg);
    tu_rng rng = {seed ^ 0x5bd1e995u};
    check_grid(dir, &v, NULL, &rng, 5, 3);
    check_grid(dir, &v, NULL, &rng, 4, 8);
    tide_vision_free(&v);
    tide_st_close(ck);
    tu_rmtree(dir);
    free(dir);
}

/* A checkpoint written without a tower, bound with a config that has one:
 * the first missing tensor is named. A config without a tower is refused. */
static void bind_errors(void **state) {
    (void)state;
    tide_config text, vis;
    char *dir = write_vision(tu_seed() >> 1, "tiny", 0, &text);
    tide_status st = {0};
    tide_st *ck;
    if (tide_st_open(dir, &ck, &st)) fail_msg("%s", st.msg);
    tide_vision v;
    assert_int_equal(tide_vision_bind(&v, &text, ck, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_UNSUPPORTED);
    vis = text;
    assert_int_equal(tide_config_preset_vision("tiny", &vis, &st), 0);
    st = (tide_status){0};
    assert_int_equal(tide_vision_bind(&v, &vis, ck, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_MISSING);
    assert_non_null(strstr(st.msg, "vision.patch_embed.proj.weight"));
    /* a grid out of range is refused, not run */
    tide_vision none = {0};
    float x = 0;
    st = (tide_status){0};
    assert_int_equal(tide_vision_tower(&none, tide_cpu_ops(), NULL, &x, 1, 1, &x, &st), -1);
    tide_st_close(ck);
    tu_rmtree(dir);
    free(dir);
}

/* The manifest lists the tower exactly when the config has one, and the
 * flash preset's is the released one (docs/vision.md's tensor table). */
static void flash_vision_config(void **state) {
    (void)state;
    tide_config cfg;
    tide_status st = {0};
    assert_int_equal(tide_config_preset("flash", &cfg, &st), 0);
    assert_int_equal(tide_config_preset_vision("flash", &cfg, &st), 0);
    const tide_vision_config *v = &cfg.vision;
    assert_int_equal(v->num_hidden_layers, 32);
    assert_int_equal(v->hidden_size, 1024);
    assert_int_equal(v->num_attention_heads, 16);
    assert_int_equal(v->intermediate_size, 2816);
    assert_int_equal(v->patch_size, 14);
    assert_int_equal(v->downsample_ratio, 3);
    assert_int_equal(v->max_image_tokens, 1024);
    assert_int_equal(v->min_pixels, 295936);
    assert_int_equal(cfg.image_token_id, 129264);
    assert_int_equal(tide_config_preset_vision("nope", &cfg, &st), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tower_matches_numpy),
        cmocka_unit_test(variant_matches_numpy),
        cmocka_unit_test(bind_errors),
        cmocka_unit_test(flash_vision_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
