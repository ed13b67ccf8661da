/* The roofline cost model (src/bench/roofline.h) against an independent
 * count on the tiny shape: the test writes tiny's dimensions and layer
 * table down as literals (docs/model-config.md section 4) and counts bytes
 * and FLOPs its own way, per layer, for random batches, contexts and
 * prompt lengths; plus a count done by hand for one decode step, and the
 * model's monotonicity in batch, context and length. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench/roofline.h"
#include "model/config.h"
#include "model/manifest.h"
#include "testutil.h"

/* tiny (config_preset.c): D 128, 4 heads x 128, q_lora 64, 2 groups x 32,
 * window 8, index 4 heads x 96, top-k 6, candidates 3 blocks x 4, 8 experts
 * top-2 of width 64, engram 2-grams and 3-grams x 2 heads x 64, hc 4. */
enum { D = 128, H = 4, HD = 128, QR = 64, G = 2, ORK = 32, W = 8, IH = 4, ID = 96, ITK = 6, TB = 3, BS = 4 };
enum { E = 8, K = 2, I = 64, COLS = 4, EHD = 64, HC = 4, NL = 10 };
static const double V = 129280;
/* layers 0..9 */
static const int ratio[NL] = {0, 0, 2, 2, 2, 2, 1, 1, 1, 1};
static const int kv_src[NL] = {0, 0, 1, 0, 1, 0, 1, 0, 0, 0};
static const int idx_src[NL] = {0, 0, 1, 0, 1, 0, 1, 0, 1, 0};
static const int owns_keys[NL] = {0, 0, 1, 0, 1, 0, 1, 0, 0, 0};
static const int masks[NL] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 0}; /* scores only candidate blocks */
static const int engram[NL] = {0, 1, 0, 0, 1, 0, 0, 0, 0, 0};

#define FP8 (1.0 + 1.0 / 1024)
#define FP4 (0.5 + 1.0 / 32)

typedef struct count {
    double bytes, flops;
} count;

static double imin(double a, double b) { return a < b ? a : b; }

/* Weight elements of layer l, by dtype, and per token row. */
static void layer_params(int l, double *fp8, double *bf16, double *f32, double *row) {
    *fp8 = QR * D + H * HD * QR + HD * D + D * G * ORK + 3.0 * I * D;
    *bf16 = (G * ORK) * (H * HD / G) + E * D;
    *f32 = 2.0 * (2 + HC) * HC * HC * D;
    *row = *fp8 + *bf16 + *f32;
    if (kv_src[l]) {
        double p = ratio[l] == 2 ? 2.0 * HD * D : HD * D;
        *bf16 += p;
        *row += p;
    }
    if (idx_src[l]) {
        *fp8 += IH * ID * QR;
        *bf16 += IH * D;
        *row += IH * ID * QR + IH * D;
        if (owns_keys[l]) {
            *bf16 += ID * HD;
            *row += ID * HD / ratio[l];
        }
    }
    if (engram[l]) {
        *fp8 += (HC + 1.0) * D * COLS * EHD;
        *row += (HC + 1.0) * D * COLS * EHD;
    }
}

static double touched(double n) { return E * (1.0 - pow(1.0 - (double)K / E, n)); }

/* Shared by decode and prefill: weights and GEMMs of n rows, `logits` of them with logits. */
static count weights(double n, double logits) {
    count c = {0, 0};
    for (int l = 0; l < NL; l++) {
        double fp8, bf16, f32, row;
        layer_params(l, &fp8, &bf16, &f32, &row);
        c.bytes += fp8 * FP8 + bf16 * 2 + f32 * 4 + touched(n) * 3.0 * I * D * FP4;
        c.flops += 2 * n * (row + K * 3.0 * I * D);
    }
    c.bytes += V * D * 2 + n * (D * 2 + 2.0 * COLS * EHD * (1 + 1.0 / 32));
    c.flops += 2 * logits * V * D;
    return c;
}

static count ref_decode(double b, long long ctx, double kb) {
    count c = weights(b, b);
    long long p = ctx;
    for (int l = 0; l < NL; l++) {
        double ent = imin(W, p + 1);
        c.bytes += b * imin(W - 1, ctx) * HD * kb + b * HD * kb; /* ring read + write */
        if (ratio[l]) {
            double vis = (double)((p + 1) / ratio[l]);
            ent += imin(ITK, vis);
            c.bytes += b * imin(ITK, vis) * HD * kb;
            if (idx_src[l]) {
                double n = masks[l] ? imin(vis, TB * BS) : vis;
                c.bytes += b * n * ID * kb;
                c.flops += b * 2.0 * IH * ID * n;
            }
            if (kv_src[l]) c.bytes += b * (HD * kb + (owns_keys[l] ? ID * kb : 0)) / ratio[l];
        }
        c.flops += b * 4.0 * H * HD * ent;
    }
    return c;
}

static count ref_prefill(long long len, double kb) {
    count c = weights((double)len, 1);
    for (int l = 0; l < NL; l++) {
        c.bytes += imin(len, W) * HD * kb;
        for (long long t = 0; t < len; t++) {
            double ent = imin(W, t + 1);
            if (ratio[l]) {
                double vis = (double)((t + 1) / ratio[l]);
                ent += imin(ITK, vis);
                if (idx_src[l]) c.flops += 2.0 * IH * ID * (masks[l] ? imin(vis, TB * BS) : vis);
            }
            c.flops += 4.0 * H * HD * ent;
        }
        if (ratio[l]) {
            double nc = (double)(len / ratio[l]);
            c.bytes += nc * HD * kb + (idx_src[l] ? nc * ID * kb : 0);
            if (kv_src[l]) c.bytes += nc * (HD * kb + (owns_keys[l] ? ID * kb : 0));
        }
    }
    return c;
}

static tide_config tiny(void) {
    tide_config cfg;
    tide_status st = {0};
    assert_int_equal(tide_config_preset("tiny", &cfg, &st), 0);
    return cfg;
}

static void assert_close(double got, double want, const char *what) {
    if (!(fabs(got - want) <= 1e-12 * fabs(want) + 1e-9)) {
        fprintf(stderr, "%s: model %.17g, independent count %.17g\n", what, got, want);
        fail();
    }
}

static void test_decode_vs_count(void **state) {
    (void)state;
    tide_config cfg = tiny();
    tu_rng rng = {tu_seed()};
    tide_status st = {0};
    for (int it = 0; it < 200; it++) {
        int64_t b = 1 + (int64_t)(tu_next(&rng) % 300);
        int64_t ctx = it < 20 ? it : (int64_t)(tu_next(&rng) % 200000);
        int packed = (int)(tu_next(&rng) & 1);
        tide_roof_kv kv = packed ? tide_roof_kv_packed() : tide_roof_kv_f32();
        tide_roof r;
        assert_int_equal(tide_roof_decode(&cfg, &kv, b, ctx, &r, &st), 0);
        /* the reference takes one byte rate for all cache kinds: compare f32 only for KV */
        if (!packed) {
            count c = ref_decode((double)b, (long long)ctx, 4.0);
            assert_close(r.bytes, c.bytes, "decode bytes");
            assert_close(r.flops, c.flops, "decode flops");
        }
        assert_int_equal(r.rows, b);
        assert_int_equal(r.logit_rows, b);
    }
}

static void test_prefill_vs_count(void **state) {
    (void)state;
    tide_config cfg = tiny();
    tu_rng rng = {tu_seed() ^ 0x5eed};
    tide_status st = {0};
    tide_roof_kv kv = tide_roof_kv_f32();
    for (int it = 0; it < 60; it++) {
        int64_t len = it < 20 ? it + 1 : 1 + (int64_t)(tu_next(&rng) % 5000);
        tide_roof r;
        assert_int_equal(tide_roof_prefill(&cfg, &kv, len, &r, &st), 0);
        count c = ref_prefill((long long)len, 4.0);
        assert_close(r.bytes, c.bytes, "prefill bytes");
        assert_close(r.flops, c.flops, "prefill flops");
        assert_int_equal(r.logit_rows, 1);
    }
}

/* One decode step of one sequence at context 100 with the f32 cache, counted
 * by hand (numbers in the comments). */
static void test_decode_by_hand(void **state) {
    (void)state;
    tide_config cfg = tiny();
    tide_status st = {0};
    tide_roof_kv kv = tide_roof_kv_f32();
    tide_roof r;
    assert_int_equal(tide_roof_decode(&cfg, &kv, 1, 100, &r, &st), 0);
    /* FP8 elements: 10 layers x 90112 (wq_a 8192, wq_b 32768, wkv 16384, wo_b 8192,
     * shared 24576) + 4 indexers x 24576 + 2 engram wkv x 163840 = 1327104.
     * BF16: 10 x 17408 (wo_a 16384, gate 1024) + compressors 32768 + 32768 + 16384
     * + 4 x 512 + 3 x 12288 = 294912. F32: 10 x 24576 = 245760. */
    double dense = 1327104 * FP8 + 294912 * 2.0 + 245760 * 4.0;
    assert_close(r.w_dense, dense, "dense weights");
    /* 2 experts of 24576 FP4 values per layer */
    assert_close(r.w_experts, 10 * 2 * 24576 * FP4, "experts");
    assert_close(r.experts_touched, 2.0, "experts touched");
    assert_close(r.w_head, 129280.0 * 128 * 2, "head");
    assert_close(r.w_gather, 256 + 2 * 4 * 64 * (1 + 1.0 / 32), "gathered rows");
    /* ring: 10 layers x 7 entries x 128 x 4 B = 35840 */
    assert_close(r.kv_window, 35840, "window");
    /* 8 compressed layers x 6 latents x 512 B = 24576 */
    assert_close(r.kv_latent, 24576, "latents");
    /* keys scored: 50 + 50 (ratio 2) + 101 (layer 6) + 12 (layer 8, 3 blocks of 4) = 213 x 384 B */
    assert_close(r.kv_index, 213 * 384.0, "index keys");
    /* writes: 10 x 512 B of ring + (512 + 384) / 2 twice + 896 */
    assert_close(r.kv_write, 5120 + 896 + 896, "writes");
    /* attention entries: 2 x 8 + 8 x 14 = 128; 4 x 4 heads x 128 dims each */
    assert_close(r.f_attn, 128 * 4.0 * 4 * 128, "attention flops");
    assert_close(r.f_index, 213 * 2.0 * 4 * 96, "indexer flops");
    /* per row: 10 x 132096 + compressors 81920 + indexers 4 x 25088 + wk 6144 + 6144
     * + 12288 + engram 2 x 163840 + experts 10 x 2 x 24576 + head 16547840 */
    double row = 10 * 132096.0 + 81920 + 4 * 25088 + 6144 + 6144 + 12288 + 2 * 163840 + 10 * 2 * 24576 +
                 129280.0 * 128;
    assert_close(r.f_gemm, 2 * row, "gemm flops");
}

static void test_monotone(void **state) {
    (void)state;
    tide_config cfg = tiny();
    tide_status st = {0};
    tide_roof_kv f = tide_roof_kv_f32(), p = tide_roof_kv_packed();
    tide_roof a, b;
    static const int64_t ctxs[] = {0, 1, 7, 8, 9, 100, 1000, 4096, 65536, 131072, 1 << 20};
    static const int64_t batches[] = {1, 2, 3, 8, 32, 256, 1024};
    for (size_t i = 0; i + 1 < sizeof ctxs / sizeof ctxs[0]; i++)
        for (size_t j = 0; j < sizeof batches / sizeof batches[0]; j++) {
            assert_int_equal(tide_roof_decode(&cfg, &f, batches[j], ctxs[i], &a, &st), 0);
            assert_int_equal(tide_roof_decode(&cfg, &f, batches[j], ctxs[i + 1], &b, &st), 0);
            assert_true(b.bytes >= a.bytes && b.flops >= a.flops);
            if (j + 1 < sizeof batches / sizeof batches[0]) {
                assert_int_equal(tide_roof_decode(&cfg, &f, batches[j + 1], ctxs[i], &b, &st), 0);
                assert_true(b.bytes > a.bytes && b.flops > a.flops);
                /* per token, a bigger batch never costs more bytes */
                assert_true(b.bytes / (double)batches[j + 1] <= a.bytes / (double)batches[j]);
            }
            assert_int_equal(tide_roof_decode(&cfg, &p, batches[j], ctxs[i], &b, &st), 0);
            assert_true(b.bytes < a.bytes || ctxs[i] == 0);
            assert_true(b.flops == a.flops);
        }
    for (int64_t len = 1; len < 3000; len = len * 3 + 1) {
        assert_int_equal(tide_roof_prefill(&cfg, &f, len, &a, &st), 0);
        assert_int_equal(tide_roof_prefill(&cfg, &f, len * 3 + 1, &b, &st), 0);
        assert_true(b.bytes > a.bytes && b.flops > a.flops);
    }
    double prev = 0;
    for (int64_t n = 1; n < 5000; n *= 2) {
        double t = tide_roof_expected_experts(384, 6, n);
        assert_true(t > prev && t <= 384.0);
        prev = t;
    }
    assert_close(tide_roof_expected_experts(384, 6, 1), 6.0, "one token");
    assert_close(tide_roof_expected_experts(8, 8, 3), 8.0, "k = E");
    assert_close(tide_roof_expected_experts(8, 2, 0), 0.0, "no tokens");
}

static void test_time_and_errors(void **state) {
    (void)state;
    tide_config cfg = tiny();
    tide_status st = {0};
    tide_roof_kv kv = tide_roof_kv_packed();
    tide_roof r;
    assert_int_equal(tide_roof_decode(&cfg, &kv, 4, 1000, &r, &st), 0);
    int mem = -1;
    double t = tide_roof_time(&r, 1e9, 1e15, &mem);
    assert_int_equal(mem, 1);
    assert_close(t, r.bytes / 1e9, "memory-bound time");
    t = tide_roof_time(&r, 1e15, 1e6, &mem);
    assert_int_equal(mem, 0);
    assert_close(t, r.flops / 1e6, "compute-bound time");
    /* the packed layout's sizes: 288 B per 512-wide latent, 68 B per 128-wide key */
    assert_close(512 * kv.latent, 288, "latent bytes");
    assert_close(128 * kv.key, 68, "key bytes");
    assert_int_equal(tide_roof_decode(&cfg, &kv, 0, 10, &r, &st), -1);
    assert_non_null(strstr(st.msg, "batch"));
    assert_int_equal(tide_roof_decode(&cfg, &kv, 1, -1, &r, &st), -1);
    assert_non_null(strstr(st.msg, "context"));
    assert_int_equal(tide_roof_prefill(&cfg, &kv, 0, &r, &st), -1);
    assert_non_null(strstr(st.msg, "prompt length"));
    tide_config empty;
    memset(&empty, 0, sizeof empty);
    assert_int_equal(tide_roof_prefill(&empty, &kv, 5, &r, &st), -1);
}

/* With every expert touched, the weights a decode step reads are exactly the
 * manifest's backbone matrices plus the head, less what the model leaves
 * out on purpose (vectors, the embedding and engram tables, which are
 * gathered, and the engram q/k weights): a check against the checkpoint's
 * own list of tensors, on every preset small enough to list quickly. */
static void test_weights_vs_manifest(void **state) {
    (void)state;
    static const char *const shapes[] = {"tiny", "small", "flash-ep8", "flash"};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        tide_config cfg;
        tide_manifest man;
        tide_status st = {0};
        assert_int_equal(tide_config_preset(shapes[i], &cfg, &st), 0);
        assert_int_equal(tide_manifest_build(&cfg, &man, &st), 0);
        double want = 0;
        for (size_t k = 0; k < man.n; k++) {
            const tide_manifest_entry *e = &man.e[k];
            if (e->ndim < 2 || e->layer >= cfg.text.num_hidden_layers) continue;
            if (strstr(e->name, "engram.embed.") || strstr(e->name, "engram.q_weight") ||
                strstr(e->name, "engram.k_weight") || !strcmp(e->name, "embed.weight"))
                continue;
            want += (double)e->nbytes;
        }
        tide_roof_kv kv = tide_roof_kv_packed();
        tide_roof r;
        assert_int_equal(tide_roof_decode(&cfg, &kv, (int64_t)1 << 30, 0, &r, &st), 0);
        assert_close(r.experts_touched, (double)cfg.text.n_routed_experts, shapes[i]);
        assert_close(r.w_dense + r.w_experts + r.w_head, want, shapes[i]);
        tide_manifest_free(&man);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_vs_count), cmocka_unit_test(test_prefill_vs_count),
        cmocka_unit_test(test_decode_by_hand),  cmocka_unit_test(test_monotone),
        cmocka_unit_test(test_time_and_errors), cmocka_unit_test(test_weights_vs_manifest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
