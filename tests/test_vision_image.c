/* The vision path's image preprocessing (src/vision/image_*.c): decoding,
 * the grid plan, PIL's bicubic resize and ImageOps.pad, the patches, bit for
 * bit against the release's image_processor.py semantics run with PIL
 * (tests/vision_ref_image.py, python3-pil) on fresh random images; the span
 * layout; and clean refusals of malformed, oversized and hostile input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "testutil.h"
#include "vision/image.h"

static int have_pil(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s -c 'import numpy, PIL' 2>/dev/null", TIDE_PYTHON);
    return tu_system(cmd, NULL) == 0;
}

static uint8_t *slurp(const char *path, size_t *n) {
    char *b = NULL;
    tide_status st = {0};
    if (tide_read_file(path, (size_t)1 << 30, &b, n, &st)) fail_msg("%s", st.msg);
    return (uint8_t *)b;
}

static void matches_pil(void **state) {
    (void)state;
    TU_NEED_DEP(have_pil(), "python3 with numpy and PIL", "apt-get install python3-numpy python3-pil (scripts/deps.sh)");
    char *dir = tu_mkdtemp("vimg");
    char cmd[8192], path[4096], line[1024];
    snprintf(cmd, sizeof cmd, "%s %s/tests/vision_ref_image.py %s %llu 2>&1", TIDE_PYTHON, TIDE_SOURCE_DIR, dir,
             (unsigned long long)(tu_seed() >> 1));
    char *out = NULL;
    int rc = tu_system(cmd, &out);
    if (rc) fail_msg("vision_ref_image.py: %s", out ? out : "");
    free(out);
    snprintf(path, sizeof path, "%s/cases.txt", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        char name[256], exp[256];
        long long w, h, p, r, mt, mp, mwh, bw, bh, gh, gw;
        assert_int_equal(sscanf(line, "%255s %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %255s", name, &w,
                                &h, &p, &r, &mt, &mp, &mwh, &bw, &bh, &gh, &gw, exp),
                         13);
        tide_vision_config v = {.patch_size = p, .downsample_ratio = r, .max_image_tokens = mt, .min_pixels = mp,
                                .max_wh_ratio = mwh};
        size_t n, ne;
        snprintf(path, sizeof path, "%s/%s", dir, name);
        uint8_t *bytes = slurp(path, &n);
        snprintf(path, sizeof path, "%s/%s", dir, exp);
        float *want = (float *)slurp(path, &ne);
        assert_true(bytes && want);
        tide_image im;
        tide_image_plan pl;
        tide_status st = {0};
        if (tide_image_decode(bytes, n, NULL, &im, &st)) fail_msg("%s: %s", name, st.msg);
        assert_int_equal(im.w, w);
        assert_int_equal(im.h, h);
        if (tide_image_plan_grid(im.w, im.h, &v, &pl, &st)) fail_msg("%s: %s", name, st.msg);
        if (pl.best_w != bw || pl.best_h != bh || pl.n_llm_h != gh || pl.n_llm_w != gw)
            fail_msg("%s (%lldx%lld): plan %lldx%lld grid %lldx%lld, the reference's %lldx%lld grid %lldx%lld", name, w, h,
                     (long long)pl.best_w, (long long)pl.best_h, (long long)pl.n_llm_h, (long long)pl.n_llm_w, bw, bh,
                     gh, gw);
        assert_true(tide_image_span_len(&pl) <= mt);
        size_t count = (size_t)(pl.n_vit_h * pl.n_vit_w * 3 * p * p);
        assert_int_equal(ne, count * sizeof(float));
        float *got = malloc(count * sizeof(float));
        assert_non_null(got);
        if (tide_image_patches(&im, &pl, p, got, &st)) fail_msg("%s: %s", name, st.msg);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < count; i++)
            if (got[i] != want[i] && !bad++) first = i;
        fprintf(stderr, "%s %lldx%lld -> %lldx%lld px, %lldx%lld tokens: %zu of %zu values differ\n", name, w, h, bw,
                bh, gh, gw, bad, count);
        if (bad) fail_msg("%s: %zu of %zu patch values differ from PIL's; first at %zu: %g vs %g", name, bad, count,
                          first, got[first], want[first]);
        cases++;
        free(got), free(bytes), free(want);
        tide_image_free(&im);
    }
    fclose(f);
    assert_true(cases >= 10);
    tu_rmtree(dir);
    free(dir);
}

/* The span: [START] ([IMAGE] * w + [NEWLINE]) * h [END]. */
static void span_layout(void **state) {
    (void)state;
    tide_image_plan p = {.n_llm_h = 2, .n_llm_w = 3};
    int8_t t[16];
    assert_int_equal(tide_image_span_len(&p), 10);
    tide_image_span_types(&p, t);
    const int8_t want[10] = {TIDE_IMG_START, 1, 1, 1, TIDE_IMG_NEWLINE, 1, 1, 1, TIDE_IMG_NEWLINE, TIDE_IMG_END};
    assert_memory_equal(t, want, 10);
    /* the released budget: 1024 tokens at most, whatever the aspect */
    tide_vision_config v = {.patch_size = 14, .downsample_ratio = 3, .max_image_tokens = 1024, .min_pixels = 295936};
    tide_status st = {0};
    tu_rng rng = {tu_seed()};
    for (int i = 0; i < 2000; i++) {
        int64_t w = 1 + (int64_t)(tu_next(&rng) % 20000), h = 1 + (int64_t)(tu_next(&rng) % 20000);
        if (i % 3 == 0) h = 1 + (int64_t)(tu_next(&rng) % 8);
        if (tide_image_plan_grid(w, h, &v, &p, &st)) fail_msg("%lld x %lld: %s", (long long)w, (long long)h, st.msg);
        assert_true(tide_image_span_len(&p) <= 1024);
        assert_true(p.best_w % 14 == 0 && p.best_h % 14 == 0 && p.n_vit_w * 14 == p.best_w);
    }
}

/* Hostile and broken inputs: each refused with a message, none crashing. */
static void refusals(void **state) {
    (void)state;
    tide_image im;
    tide_status st = {0};
    assert_int_equal(tide_image_decode((const uint8_t *)"", 0, NULL, &im, &st), -1);
    assert_int_equal(tide_image_decode((const uint8_t *)"hello, world", 12, NULL, &im, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_UNSUPPORTED);
    /* a PNG header declaring 1,000,000 x 1,000,000 pixels */
    static const uint8_t huge[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                                   0x00, 0x0f, 0x42, 0x40, 0x00, 0x0f, 0x42, 0x40, 8, 2, 0, 0, 0, 0xd3, 0x0f, 0xaf, 0x2a};
    st = (tide_status){0};
    assert_int_equal(tide_image_decode(huge, sizeof huge, NULL, &im, &st), -1);
    assert_non_null(strstr(st.msg, "PNG"));
    /* truncated signatures of each format */
    static const char *const heads[] = {"\x89PNG\r\n\x1a\n\0\0", "\xff\xd8\xff\xe0\0\x10JFIF", "RIFF\x10\0\0\0WEBPVP8 ",
                                        "GIF89a\x01\0\x01\0"};
    static const size_t lens[] = {10, 10, 16, 10};
    for (int i = 0; i < 4; i++) {
        st = (tide_status){0};
        assert_int_equal(tide_image_decode((const uint8_t *)heads[i], lens[i], NULL, &im, &st), -1);
        assert_true(!strncmp(st.msg, "image:", 6));
    }
    /* the byte limit */
    tide_image_limits lim = {.max_bytes = 4};
    st = (tide_status){0};
    assert_int_equal(tide_image_decode((const uint8_t *)heads[0], lens[0], &lim, &im, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_NOMEM);
    /* the fuzz corpus: every seed either decodes or is refused with a message */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/fuzz/corpus/fuzz_image", TIDE_SOURCE_DIR);
    static const char *const seeds[] = {"ok.png", "ok.jpg", "ok.webp", "ok.gif", "trunc.png", "trunc.jpg"};
    for (int i = 0; i < 6; i++) {
        char path[8192];
        size_t n;
        snprintf(path, sizeof path, "%s/%s", dir, seeds[i]);
        uint8_t *b = slurp(path, &n);
        assert_non_null(b);
        st = (tide_status){0};
        int rc = tide_image_decode(b, n, NULL, &im, &st);
        if (i < 4) {
            if (rc) fail_msg("%s: %s", seeds[i], st.msg);
            tide_image_free(&im);
        } else {
            assert_int_equal(rc, -1);
            assert_true(!strncmp(st.msg, "image:", 6));
        }
        free(b);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_pil),
        cmocka_unit_test(span_layout),
        cmocka_unit_test(refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
