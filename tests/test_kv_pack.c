/* Packed KV entries (cache/kv_pack.h) against the simulation, on fresh
 * random rows (seed from tu_seed; num_testdata.h's block shapes: denormals,
 * zeros of both signs, ties, format boundaries) plus blocks holding NaN and
 * infinities:
 *   - unpack(pack(x)) equals the simulation of x bit for bit (NaN where the
 *     simulation gives NaN) for the three formats, at the released widths
 *     and at odd ones (partial blocks);
 *   - the layout: codes then scales, exactly tide_quant_*'s bytes, entry
 *     sizes 528 / 288 / 68 at the released widths, nothing written past the
 *     entry;
 *   - memory: a pool and rings sized for the flash shape, filled for a
 *     context, hold tide_roof_kv_token_bytes(packed) per token (and a
 *     sequence's rings tide_roof_kv_ring_bytes), about 7x less than f32. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench/roofline.h"
#include "cache/kv_pack.h"
#include "cache/kv_pool.h"
#include "cache/seq_cache.h"
#include "model/config.h"
#include "num/num.h"
#include "num_testdata.h"
#include "testutil.h"

static void sim(tide_kv_fmt f, float *x, int64_t n) {
    if (f == TIDE_KV_WINDOW) tide_sim_fp8_act(x, (size_t)n, 32);
    else if (f == TIDE_KV_LATENT) tide_sim_fp4_e4m3(x, (size_t)n, 16);
    else tide_sim_fp4_e8m0(x, (size_t)n, 32);
}

static void quant(tide_kv_fmt f, const float *x, int64_t n, uint8_t *codes, uint8_t *scales) {
    if (f == TIDE_KV_WINDOW) tide_quant_fp8_act(x, (size_t)n, 32, codes, scales);
    else if (f == TIDE_KV_LATENT) tide_quant_fp4_e4m3(x, (size_t)n, 16, codes, scales);
    else tide_quant_fp4_e8m0(x, (size_t)n, 32, codes, scales);
}

/* Overwrites a few random blocks with NaN / +-inf / all-zero / all-denormal. */
static void specials(tu_rng *r, float *x, int64_t n) {
    int64_t bl = 16;
    for (int64_t b = 0; b < n; b += bl) {
        int64_t len = n - b < bl ? n - b : bl;
        switch (tu_next(r) % 10) {
        case 0: x[b + (int64_t)(tu_next(r) % (uint64_t)len)] = NAN; break;
        case 1: x[b + (int64_t)(tu_next(r) % (uint64_t)len)] = (tu_next(r) & 1) ? INFINITY : -INFINITY; break;
        case 2:
            for (int64_t i = 0; i < len; i++) x[b + i] = (tu_next(r) & 1) ? 0.0f : -0.0f;
            break;
        case 3:
            for (int64_t i = 0; i < len; i++) x[b + i] = (float)(tu_normal(r) * 1e-40);
            break;
        default: break;
        }
    }
}

static void check_fmt(tide_kv_fmt f, int64_t n, uint64_t salt) {
    tu_rng r = {tu_seed() ^ salt};
    size_t eb = tide_kv_entry_bytes(f, n), cb = tide_kv_code_bytes(f, n);
    int64_t blk = tide_kv_fmt_block(f);
    assert_int_equal(eb, cb + (size_t)((n + blk - 1) / blk));
    float *x = malloc((size_t)n * sizeof *x), *s = malloc((size_t)n * sizeof *s), *y = malloc((size_t)n * sizeof *y);
    uint8_t *e = malloc(eb + 8), *codes = malloc(cb), *scales = malloc((size_t)((n + blk - 1) / blk));
    assert_true(x && s && y && e && codes && scales);
    for (int rep = 0; rep < 200; rep++) {
        nt_fill(&r, x, (size_t)n);
        if (rep % 2) specials(&r, x, n);
        memcpy(s, x, (size_t)n * sizeof *s);
        sim(f, s, n);
        memset(e, 0xa5, eb + 8);
        tide_kv_pack(f, x, n, e);
        for (int i = 0; i < 8; i++) assert_int_equal(e[eb + i], 0xa5); /* nothing past the entry */
        quant(f, x, n, codes, scales);
        assert_memory_equal(e, codes, cb);
        assert_memory_equal(e + cb, scales, eb - cb);
        tide_kv_unpack(f, e, n, y);
        for (int64_t i = 0; i < n; i++)
            if (!nt_same_f32(s[i], y[i]))
                fail_msg("format %d dim %lld rep %d element %lld: sim %a, unpacked %a (input %a)", (int)f,
                         (long long)n, rep, (long long)i, (double)s[i], (double)y[i], (double)x[i]);
    }
    free(x);
    free(s);
    free(y);
    free(e);
    free(codes);
    free(scales);
}

static void test_window(void **state) {
    (void)state;
    assert_int_equal(tide_kv_entry_bytes(TIDE_KV_WINDOW, 512), 528);
    check_fmt(TIDE_KV_WINDOW, 512, 1);
    check_fmt(TIDE_KV_WINDOW, 45, 2);
}

static void test_latent(void **state) {
    (void)state;
    assert_int_equal(tide_kv_entry_bytes(TIDE_KV_LATENT, 512), 288);
    check_fmt(TIDE_KV_LATENT, 512, 3);
    check_fmt(TIDE_KV_LATENT, 37, 4);
}

static void test_key(void **state) {
    (void)state;
    assert_int_equal(tide_kv_entry_bytes(TIDE_KV_KEY, 128), 68);
    check_fmt(TIDE_KV_KEY, 128, 5);
    check_fmt(TIDE_KV_KEY, 96, 6);
    check_fmt(TIDE_KV_KEY, 33, 7);
    assert_int_equal(tide_kv_entry_bytes(TIDE_KV_KEY, 0), 0);
}

/* The flash shape's pools, sized and filled as the forward pass does for
 * one sequence of `ctx` tokens: the bytes allocated per token. */
static void test_memory_per_token(void **state) {
    (void)state;
    tide_config cfg;
    tide_status st = {0};
    assert_int_equal(tide_config_preset("flash", &cfg, &st), 0);
    const tide_text_config *x = &cfg.text;
    int block = 64;
    int64_t ctx = 131072; /* a multiple of block x every ratio */
    tide_kv_pool pool;
    assert_int_equal(tide_kv_pool_init(&pool, block, x->head_dim, x->index_head_dim, 1 << 20, &st), 0);
    int n_src = 0;
    tide_block_table tables[TIDE_MAX_LAYERS];
    memset(tables, 0, sizeof tables);
    for (int i = 0; i < x->num_hidden_layers; i++) {
        const tide_layer_role *r = &cfg.roles[i];
        if (r->compress_ratio == 0 || !r->is_kv_source) continue;
        assert_int_equal(tide_kv_reserve(&pool, &tables[n_src++], ctx / r->compress_ratio, &st), 0);
    }
    assert_true(n_src > 0);
    /* what the pool allocated: its blocks (grown in doublings, so count the used ones) */
    double measured = (double)tide_kv_used(&pool) * (double)tide_kv_block_bytes(&pool) / (double)ctx;
    tide_roof_kv packed = tide_roof_kv_packed(), f32 = tide_roof_kv_f32();
    double figure = tide_roof_kv_token_bytes(&cfg, &packed);
    print_message("flash: %d KV sources, %.2f B per token in the pool (roofline packed %.2f, f32 %.2f: %.2fx)\n", n_src,
                  measured, figure, tide_roof_kv_token_bytes(&cfg, &f32), tide_roof_kv_token_bytes(&cfg, &f32) / measured);
    assert_true(measured == figure);
    assert_true(tide_roof_kv_token_bytes(&cfg, &f32) / measured > 7.0);
    for (int k = 0; k < n_src; k++) tide_kv_release(&pool, &tables[k]);
    tide_kv_pool_free(&pool);

    /* a sequence's rings (backbone layers; DSpark stages add their own) */
    tide_seq_cache c;
    assert_int_equal(tide_seq_cache_init(&c, x->num_hidden_layers, (int)x->sliding_window, x->head_dim, n_src, 4, &st), 0);
    double ring = (double)c.n_layers * (double)c.window * (double)c.ring_bytes;
    assert_true(ring == tide_roof_kv_ring_bytes(&cfg, &packed));
    assert_true(tide_roof_kv_ring_bytes(&cfg, &f32) / ring > 3.8);
    tide_seq_cache_free(&c, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_latent),
        cmocka_unit_test(test_key),
        cmocka_unit_test(test_memory_per_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
