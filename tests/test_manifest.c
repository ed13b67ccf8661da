/* The checkpoint manifest: names, dtypes and shapes per config, checked
 * against the reference's module tree as spec §2 describes it, and tensor
 * counts against a formula written independently of manifest.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/manifest.h"
#include "testutil.h"

#define FIXTURE TIDE_SOURCE_DIR "/tests/data/flash-config.json"

static void expect(const tide_manifest *m, const char *name, tide_dtype dt, int ndim, int64_t d0, int64_t d1) {
    const tide_manifest_entry *e = tide_manifest_find(m, name);
    if (!e) fail_msg("%s missing from the manifest", name);
    if (e->dtype != dt || e->ndim != ndim || e->shape[0] != d0 || (ndim > 1 && e->shape[1] != d1))
        fail_msg("%s: %s [%lld, %lld] (ndim %d), expected %s [%lld, %lld]", name, tide_dtype_name(e->dtype),
                 (long long)e->shape[0], (long long)e->shape[1], e->ndim, tide_dtype_name(dt), (long long)d0,
                 (long long)d1);
}

static void absent(const tide_manifest *m, const char *name) {
    if (tide_manifest_find(m, name)) fail_msg("%s should not be in the manifest", name);
}

/* Tensor count from the module tree (spec §2), per layer. */
static size_t expected_count(const tide_config *c) {
    const tide_text_config *x = &c->text;
    size_t n = 3; /* embed, norm, head */
    int vision = c->vision.num_hidden_layers > 0;
    for (int i = 0; i < c->n_layers; i++) {
        const tide_layer_role *r = &c->roles[i];
        if (!r->is_dspark && i >= c->present_layers) continue;
        n += 12;                                   /* attention: sink, wq_a+s, q_norm, wq_b+s, wkv+s, kv_norm, wo_a, wo_b+s */
        n += 2 + (size_t)vision;                   /* gate weight, bias, bias_vl */
        n += (size_t)r->n_routed_experts * 6 + 6;  /* routed (weight+scale x3) + shared */
        n += 2 + 6;                                /* attn_norm, ffn_norm, hc_* */
        if (r->is_kv_source) n += 2 + (r->compress_ratio > 1);
        if (r->is_index_source) n += 3 + 2 * (size_t)r->indexer_owns_keys;
        if (r->has_engram) n += 6;
        if (r->is_dspark && r->dspark_stage == 0) n += 3;
        if (r->is_dspark && r->dspark_stage == x->num_nextn_predict_layers - 1) n += 4;
    }
    /* the vision tower: patch_embed (2), 8 per block, norm, aligner (4), image_start/end/newline */
    if (vision) n += 2 + 8 * (size_t)c->vision.num_hidden_layers + 1 + 4 + 3;
    return n;
}

static void check_sizes(const tide_manifest *m) {
    uint64_t total = 0;
    for (size_t i = 0; i < m->n; i++) {
        const tide_manifest_entry *e = &m->e[i];
        uint64_t n = (uint64_t)e->shape[0] * (uint64_t)(e->ndim > 1 ? e->shape[1] : 1);
        uint64_t bits = e->dtype == TIDE_DT_F32 ? 32 : e->dtype == TIDE_DT_BF16 ? 16 : e->dtype == TIDE_DT_F4 ? 4 : 8;
        assert_true(e->nbytes == n * bits / 8);
        total += e->nbytes;
        /* a quantised weight is followed by its scale */
        if (e->kind == TIDE_WK_FP8_WEIGHT || e->kind == TIDE_WK_FP4_WEIGHT || e->kind == TIDE_WK_ENGRAM_TABLE) {
            assert_true(i + 1 < m->n);
            assert_int_equal(m->e[i + 1].kind, TIDE_WK_SCALE);
            assert_int_equal(m->e[i + 1].dtype, TIDE_DT_F8_E8M0);
        }
    }
    assert_true(total == m->total_bytes);
}

static void unique_names(const tide_manifest *m) {
    /* quadratic, fine for the toy shapes */
    for (size_t i = 0; i < m->n; i++)
        for (size_t j = i + 1; j < m->n; j++)
            if (!strcmp(m->e[i].name, m->e[j].name)) fail_msg("duplicate %s", m->e[i].name);
}

static void test_tiny(void **state) {
    (void)state;
    tide_config *c = malloc(sizeof *c);
    tide_status st = {0};
    tide_manifest m;
    assert_int_equal(tide_config_preset("tiny", c, &st), 0);
    assert_int_equal(tide_manifest_build(c, &m, &st), 0);
    assert_int_equal(m.n, expected_count(c));
    check_sizes(&m);
    unique_names(&m);
    const int64_t D = 128, V = 129280, H = 4, hd = 128, QR = 64, I = 64;
    expect(&m, "embed.weight", TIDE_DT_BF16, 2, V, D);
    expect(&m, "head.weight", TIDE_DT_BF16, 2, V, D);
    expect(&m, "norm.weight", TIDE_DT_BF16, 1, D, 0);
    expect(&m, "layers.0.attn.attn_sink", TIDE_DT_F32, 1, H, 0);
    expect(&m, "layers.0.attn.wq_a.weight", TIDE_DT_F8_E4M3, 2, QR, D);
    expect(&m, "layers.0.attn.wq_a.scale", TIDE_DT_F8_E8M0, 2, 2, 4);
    expect(&m, "layers.0.attn.wq_b.weight", TIDE_DT_F8_E4M3, 2, H * hd, QR);
    expect(&m, "layers.0.attn.wkv.weight", TIDE_DT_F8_E4M3, 2, hd, D);
    expect(&m, "layers.0.attn.kv_norm.weight", TIDE_DT_BF16, 1, hd, 0);
    expect(&m, "layers.0.attn.wo_a.weight", TIDE_DT_BF16, 2, 2 * 32, H * hd / 2);
    expect(&m, "layers.0.attn.wo_b.weight", TIDE_DT_F8_E4M3, 2, D, 2 * 32);
    expect(&m, "layers.0.attn.wo_b.scale", TIDE_DT_F8_E8M0, 2, 4, 2);
    expect(&m, "layers.0.hc_attn_fn", TIDE_DT_F32, 2, 24, 4 * D);
    expect(&m, "layers.0.hc_ffn_base", TIDE_DT_F32, 1, 24, 0);
    expect(&m, "layers.0.hc_attn_scale", TIDE_DT_F32, 1, 3, 0);
    expect(&m, "layers.0.ffn.gate.weight", TIDE_DT_BF16, 2, 8, D);
    expect(&m, "layers.0.ffn.gate.bias", TIDE_DT_F32, 1, 8, 0);
    absent(&m, "layers.0.ffn.gate.bias_vl"); /* no vision tower */
    expect(&m, "layers.0.ffn.experts.7.w1.weight", TIDE_DT_F4, 2, I, D);
    expect(&m, "layers.0.ffn.experts.7.w1.scale", TIDE_DT_F8_E8M0, 2, I, D / 32);
    expect(&m, "layers.0.ffn.experts.7.w2.weight", TIDE_DT_F4, 2, D, I);
    expect(&m, "layers.0.ffn.experts.7.w2.scale", TIDE_DT_F8_E8M0, 2, D, I / 32);
    absent(&m, "layers.0.ffn.experts.8.w1.weight");
    expect(&m, "layers.0.ffn.shared_experts.w3.weight", TIDE_DT_F8_E4M3, 2, I, D);
    expect(&m, "layers.0.ffn.shared_experts.w2.scale", TIDE_DT_F8_E8M0, 2, 4, 2);
    /* window-only layers: no compressor or indexer */
    absent(&m, "layers.0.attn.compressor.wkv.weight");
    absent(&m, "layers.1.attn.indexer.wq_b.weight");
    /* engram on 1 and 4 */
    int64_t rows1 = c->text.engram_num_embeddings[0];
    expect(&m, "layers.1.engram.embed.weight", TIDE_DT_F8_E4M3, 2, rows1, 64);
    expect(&m, "layers.1.engram.embed.scale", TIDE_DT_F8_E8M0, 2, rows1, 2);
    expect(&m, "layers.1.engram.wkv.weight", TIDE_DT_F8_E4M3, 2, D * 5, 4 * 64);
    expect(&m, "layers.1.engram.q_weight", TIDE_DT_BF16, 2, 4, D);
    expect(&m, "layers.1.engram.k_weight", TIDE_DT_BF16, 2, 4, D);
    expect(&m, "layers.4.engram.embed.weight", TIDE_DT_F8_E4M3, 2, c->text.engram_num_embeddings[1], 64);
    absent(&m, "layers.0.engram.embed.weight");
    absent(&m, "layers.2.engram.wkv.weight");
    /* ratio-2 KV source: compressor with wgate; indexer owning its keys */
    expect(&m, "layers.2.attn.compressor.wkv.weight", TIDE_DT_BF16, 2, hd, D);
    expect(&m, "layers.2.attn.compressor.wgate.weight", TIDE_DT_BF16, 2, hd, D);
    expect(&m, "layers.2.attn.compressor.norm.weight", TIDE_DT_BF16, 1, hd, 0);
    expect(&m, "layers.2.attn.indexer.wq_b.weight", TIDE_DT_F8_E4M3, 2, 4 * 96, QR);
    expect(&m, "layers.2.attn.indexer.weights_proj.weight", TIDE_DT_BF16, 2, 4, D);
    expect(&m, "layers.2.attn.indexer.wk.weight", TIDE_DT_BF16, 2, 96, hd);
    expect(&m, "layers.2.attn.indexer.k_norm.weight", TIDE_DT_BF16, 1, 96, 0);
    /* readers have neither */
    absent(&m, "layers.3.attn.compressor.wkv.weight");
    absent(&m, "layers.3.attn.indexer.wq_b.weight");
    /* ratio-1 source: no wgate */
    expect(&m, "layers.6.attn.compressor.wkv.weight", TIDE_DT_BF16, 2, hd, D);
    absent(&m, "layers.6.attn.compressor.wgate.weight");
    /* index source that is not a KV source: no wk / k_norm */
    expect(&m, "layers.8.attn.indexer.wq_b.weight", TIDE_DT_F8_E4M3, 2, 4 * 96, QR);
    absent(&m, "layers.8.attn.indexer.wk.weight");
    absent(&m, "layers.8.attn.indexer.k_norm.weight");
    absent(&m, "layers.8.attn.compressor.wkv.weight");
    /* DSpark stages */
    absent(&m, "layers.10.attn.wq_a.weight");
    expect(&m, "mtp.0.attn.wq_a.weight", TIDE_DT_F8_E4M3, 2, QR, D);
    expect(&m, "mtp.0.main_proj.weight", TIDE_DT_F8_E4M3, 2, D, 3 * D);
    expect(&m, "mtp.0.main_proj.scale", TIDE_DT_F8_E8M0, 2, 4, 12);
    expect(&m, "mtp.0.main_norm.weight", TIDE_DT_BF16, 1, D, 0);
    absent(&m, "mtp.1.main_proj.weight");
    expect(&m, "mtp.1.ffn.experts.3.w3.weight", TIDE_DT_F4, 2, I, D);
    absent(&m, "mtp.1.ffn.experts.4.w3.weight"); /* 4 DSpark experts */
    expect(&m, "mtp.1.ffn.gate.weight", TIDE_DT_BF16, 2, 4, D);
    absent(&m, "mtp.1.attn.compressor.wkv.weight");
    absent(&m, "mtp.0.engram.embed.weight");
    expect(&m, "mtp.2.norm.weight", TIDE_DT_BF16, 1, D, 0);
    expect(&m, "mtp.2.markov_head.embed.weight", TIDE_DT_BF16, 2, V, 32);
    expect(&m, "mtp.2.markov_head.head.weight", TIDE_DT_BF16, 2, V, 32);
    expect(&m, "mtp.2.confidence_head.proj.weight", TIDE_DT_BF16, 2, 1, D + 32);
    absent(&m, "mtp.0.norm.weight");
    absent(&m, "mtp.0.embed.weight");
    absent(&m, "mtp.2.head.weight");
    /* the layer-name helper */
    char buf[64];
    assert_int_equal(tide_manifest_layer_name(c, 3, "attn.wq_a.weight", buf, sizeof buf, &st), 0);
    assert_string_equal(buf, "layers.3.attn.wq_a.weight");
    assert_int_equal(tide_manifest_layer_name(c, 11, "attn.wq_a.weight", buf, sizeof buf, &st), 0);
    assert_string_equal(buf, "mtp.1.attn.wq_a.weight");
    assert_int_equal(tide_manifest_layer_name(c, 11, "attn.wq_a.weight", buf, 8, &st), -1);
    tide_manifest_free(&m);
    free(c);
}

static void test_released(void **state) {
    (void)state;
    tide_config *c = malloc(sizeof *c);
    tide_status st = {0};
    tide_manifest m;
    assert_int_equal(tide_config_load(FIXTURE, c, &st), 0);
    assert_int_equal(tide_manifest_build(c, &m, &st), 0);
    assert_int_equal(m.n, expected_count(c));
    check_sizes(&m);
    for (size_t i = 1; i < m.n; i++) /* names unique (by_name is sorted) */
        assert_true(strcmp(m.by_name[i - 1]->name, m.by_name[i]->name) < 0);
    expect(&m, "layers.39.ffn.experts.383.w2.weight", TIDE_DT_F4, 2, 5120, 2304);
    expect(&m, "layers.39.ffn.experts.383.w2.scale", TIDE_DT_F8_E8M0, 2, 5120, 72);
    expect(&m, "layers.14.engram.embed.weight", TIDE_DT_F8_E4M3, 2, 384016682, 256);
    expect(&m, "layers.14.engram.embed.scale", TIDE_DT_F8_E8M0, 2, 384016682, 8);
    expect(&m, "layers.14.engram.wkv.weight", TIDE_DT_F8_E4M3, 2, 5120 * 5, 24 * 256);
    expect(&m, "layers.20.attn.indexer.wk.weight", TIDE_DT_BF16, 2, 128, 512);
    absent(&m, "layers.24.attn.indexer.wk.weight");
    expect(&m, "layers.24.attn.indexer.wq_b.weight", TIDE_DT_F8_E4M3, 2, 32 * 128, 1280);
    expect(&m, "layers.0.attn.wo_a.weight", TIDE_DT_BF16, 2, 8 * 1024, 64 * 512 / 8);
    expect(&m, "layers.0.ffn.gate.bias_vl", TIDE_DT_F32, 1, 384, 0); /* vision tower present */
    /* the released tower (docs/vision.md): 259 tower + 4 aligner tensors + 3 delimiters, BF16 */
    expect(&m, "vision.patch_embed.proj.weight", TIDE_DT_BF16, 2, 1024, 3 * 14 * 14);
    expect(&m, "vision.blocks.31.attn.wqkv.weight", TIDE_DT_BF16, 2, 3 * 1024, 1024);
    expect(&m, "vision.blocks.31.mlp.w1.weight", TIDE_DT_BF16, 2, 2 * 2816, 1024);
    expect(&m, "vision.blocks.31.mlp.w2.weight", TIDE_DT_BF16, 2, 1024, 2816);
    expect(&m, "aligner.w1.weight", TIDE_DT_BF16, 2, 5120, 1024 * 9);
    expect(&m, "image_newline", TIDE_DT_BF16, 1, 5120, 0);
    absent(&m, "vision.blocks.32.norm1.weight");
    expect(&m, "mtp.0.main_proj.weight", TIDE_DT_F8_E4M3, 2, 5120, 3 * 5120);
    expect(&m, "mtp.2.ffn.experts.127.w1.weight", TIDE_DT_F4, 2, 2304, 5120);
    absent(&m, "mtp.2.ffn.experts.128.w1.weight");
    expect(&m, "mtp.2.confidence_head.proj.weight", TIDE_DT_BF16, 2, 1, 5120 + 256);
    /* 40 x 384 + 3 x 128 experts, FP4: 3 matrices of 5120 x 2304 / 2 bytes each */
    uint64_t fp4 = (uint64_t)(40 * 384 + 3 * 128) * 3 * 5120 * 2304 / 2;
    assert_true(m.bytes_by_dtype[TIDE_DT_F4] == fp4);
    tide_manifest_free(&m);

    /* A partial checkpoint (tide synth --layers 2) lists layers 0-1 and the stages. */
    c->synth.is_synthetic = 1;
    c->synth.written_layers = 2;
    assert_int_equal(tide_config_check(c, &st), 0);
    assert_int_equal(c->present_layers, 2);
    assert_int_equal(tide_manifest_build(c, &m, &st), 0);
    assert_int_equal(m.n, expected_count(c));
    expect(&m, "layers.1.engram.embed.weight", TIDE_DT_F8_E4M3, 2, 384006168, 256);
    absent(&m, "layers.2.attn.wq_a.weight");
    expect(&m, "mtp.2.norm.weight", TIDE_DT_BF16, 1, 5120, 0);
    tide_manifest_free(&m);
    c->synth.written_layers = 41;
    assert_int_equal(tide_config_check(c, &st), -1);
    assert_non_null(strstr(st.msg, "written_layers"));
    free(c);
}

static void test_all_presets(void **state) {
    (void)state;
    tide_config *c = malloc(sizeof *c);
    tide_status st = {0};
    for (const char *const *name = tide_config_preset_names(); *name; name++) {
        tide_manifest m;
        assert_int_equal(tide_config_preset(*name, c, &st), 0);
        assert_int_equal(tide_manifest_build(c, &m, &st), 0);
        assert_int_equal(m.n, expected_count(c));
        check_sizes(&m);
        for (size_t i = 0; i < m.n; i++) {
            /* every quantised dimension is whole blocks */
            const tide_manifest_entry *e = &m.e[i];
            if (e->kind == TIDE_WK_FP4_WEIGHT || e->kind == TIDE_WK_ENGRAM_TABLE || e->kind == TIDE_WK_FP8_WEIGHT)
                assert_int_equal(e->shape[1] % 32, 0);
            assert_true(e->init_std >= 0 && e->init_std < 2);
        }
        tide_manifest_free(&m);
    }
    free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny),
        cmocka_unit_test(test_released),
        cmocka_unit_test(test_all_presets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
