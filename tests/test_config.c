/* config.json loading, consistency checks and the layer-role table.
 * The fixture tests/data/flash-config.json holds the released values (spec §1);
 * the role table is checked against the spec's prose description, written
 * out independently of config_check.c's rules. */
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "testutil.h"

#define FIXTURE TIDE_SOURCE_DIR "/tests/data/flash-config.json"

static json_t *load_fixture(void) {
    json_error_t err;
    json_t *j = json_load_file(FIXTURE, 0, &err);
    assert_non_null(j);
    return j;
}

/* Parses a JSON document; returns the loader's rc, status in st. */
static int parse_json(json_t *j, tide_config *cfg, tide_status *st) {
    char *text = json_dumps(j, 0);
    assert_non_null(text);
    int rc = tide_config_from_json_text(text, "config.json", cfg, st);
    free(text);
    return rc;
}

static void expect_fail_with(json_t *j, const char *needle) {
    tide_config *cfg = malloc(sizeof *cfg);
    tide_status st = {0};
    int rc = parse_json(j, cfg, &st);
    if (rc == 0 || !strstr(st.msg, needle))
        fail_msg("expected failure mentioning \"%s\", got rc %d: %s", needle, rc, st.msg);
    free(cfg);
}

static void test_released_values(void **state) {
    (void)state;
    tide_config *c = malloc(sizeof *c);
    tide_status st = {0};
    if (tide_config_load(FIXTURE, c, &st)) fail_msg("%s", st.msg);
    const tide_text_config *x = &c->text;
    assert_int_equal(x->vocab_size, 129280);
    assert_int_equal(x->hidden_size, 5120);
    assert_int_equal(x->num_hidden_layers, 40);
    assert_int_equal(x->num_attention_heads, 64);
    assert_int_equal(x->head_dim, 512);
    assert_int_equal(x->qk_rope_head_dim, 64);
    assert_int_equal(x->q_lora_rank, 1280);
    assert_int_equal(x->o_groups, 8);
    assert_int_equal(x->o_lora_rank, 1024);
    assert_int_equal(x->sliding_window, 128);
    assert_int_equal(x->index_topk, 512);
    assert_int_equal(x->candidate_topk_blocks, 2048);
    assert_int_equal(x->candidate_block_size, 8);
    assert_int_equal(x->moe_intermediate_size, 2304);
    assert_true(x->rms_norm_eps == 1e-20);
    assert_true(x->routed_scaling_factor == 1.5);
    assert_true(x->swiglu_limit == 10.0);
    assert_true(x->gate_temp == 1.0); /* absent: the reference default */
    assert_true(x->rope_scaling.factor == 16.0);
    assert_int_equal(x->rope_scaling.original_max_position_embeddings, 65536);
    assert_int_equal(x->engram_num_embeddings[0], 384006168);
    assert_int_equal(x->engram_num_embeddings[1], 384016682);
    assert_int_equal(c->image_token_id, 129264);
    assert_int_equal(c->vision.num_hidden_layers, 32);
    assert_int_equal(c->vision.max_wh_ratio, 0);
    assert_int_equal(c->n_layers, 43);
    assert_int_equal(c->present_layers, 40);
    assert_false(c->synth.is_synthetic);
    free(c);
}

/* spec §1: layers 0-1 window only; 2-19 ratio 2 with KV from 2, 8, 14 (each
 * serving its group of six); 20-39 ratio 1 with KV only from 20; index
 * sources 2, 8, 14, 20, 24, 28, 32, 36 (others reuse the nearest below);
 * layer 20 is the candidate source and later index sources mask to it;
 * engram on 1 and 14; DSpark reads the inputs of 37, 38, 39; window-only
 * layers rope 10000 without YaRN, compressed ones 160000 with YaRN. */
static void test_released_roles(void **state) {
    (void)state;
    tide_config *c = malloc(sizeof *c);
    tide_status st = {0};
    if (tide_config_load(FIXTURE, c, &st)) fail_msg("%s", st.msg);
    for (int i = 0; i < 43; i++) {
        const tide_layer_role *r = tide_config_role(c, i);
        assert_non_null(r);
        assert_int_equal(r->layer, i);
        int ratio = i < 2 ? 0 : i < 20 ? 2 : i < 40 ? 1 : 0;
        assert_int_equal(r->compress_ratio, ratio);
        assert_int_equal(r->is_dspark, i >= 40);
        assert_int_equal(r->dspark_stage, i >= 40 ? i - 40 : -1);
        int kv = ratio == 0 ? -1 : i >= 20 ? 20 : 2 + (i - 2) / 6 * 6;
        assert_int_equal(r->kv_source, kv);
        assert_int_equal(r->is_kv_source, i == 2 || i == 8 || i == 14 || i == 20);
        int is_idx = i == 2 || i == 8 || i == 14 || (i >= 20 && i <= 36 && i % 4 == 0);
        assert_int_equal(r->is_index_source, is_idx);
        int idx = ratio == 0 ? -1 : i < 20 ? kv : 20 + (i - 20) / 4 * 4;
        assert_int_equal(r->index_source, idx);
        assert_int_equal(r->index_key_source, is_idx ? kv : -1);
        assert_int_equal(r->indexer_owns_keys, is_idx && r->is_kv_source);
        assert_int_equal(r->is_candidate_source, i == 20);
        assert_int_equal(r->uses_candidates, is_idx && i > 20);
        assert_int_equal(r->has_engram, i == 1 || i == 14);
        assert_int_equal(r->engram_index, i == 1 ? 0 : i == 14 ? 1 : -1);
        assert_int_equal(r->is_dspark_target, i >= 37 && i <= 39);
        assert_int_equal(r->dspark_target_index, i >= 37 && i <= 39 ? i - 37 : -1);
        assert_true(r->rope_theta == (ratio ? 160000.0 : 10000.0));
        assert_int_equal(r->yarn, ratio > 0);
        assert_int_equal(r->n_routed_experts, i >= 40 ? 128 : 384);
        assert_int_equal(r->num_experts_per_tok, i >= 40 ? 3 : 6);
    }
    assert_null(tide_config_role(c, 43));
    assert_null(tide_config_role(c, -1));
    free(c);
}

static void test_presets(void **state) {
    (void)state;
    tide_config *c = malloc(sizeof *c), *d = malloc(sizeof *d), *f = malloc(sizeof *f);
    tide_status st = {0};
    assert_int_equal(tide_config_load(FIXTURE, f, &st), 0);
    int n = 0;
    for (const char *const *name = tide_config_preset_names(); *name; name++, n++) {
        if (tide_config_preset(*name, c, &st)) fail_msg("%s: %s", *name, st.msg);
        /* JSON round trip gives the same config. */
        char *t1, *t2;
        assert_int_equal(tide_config_to_json_text(c, &t1, &st), 0);
        if (tide_config_from_json_text(t1, *name, d, &st)) fail_msg("%s: %s", *name, st.msg);
        assert_int_equal(tide_config_to_json_text(d, &t2, &st), 0);
        assert_string_equal(t1, t2);
        free(t1);
        free(t2);
        assert_int_equal(d->n_layers, c->n_layers);
        assert_memory_equal(d->roles, c->roles, sizeof(tide_layer_role) * (size_t)c->n_layers);
        if (!strcmp(*name, "flash")) {
            /* The flash preset is the released text config (vision aside). */
            assert_memory_equal(c->roles, f->roles, sizeof(tide_layer_role) * 43);
            assert_int_equal(c->text.engram_num_embeddings[0], 384006168);
            assert_int_equal(c->text.engram_num_embeddings[1], 384016682);
        }
        if (!strcmp(*name, "tiny") || !strcmp(*name, "small")) {
            /* Every role is present. */
            int win = 0, kvsrc = 0, kvread = 0, idx = 0, reuse = 0, cand = 0, masked = 0, eng = 0, tgt = 0,
                dsp = 0, r2 = 0, r1 = 0, borrowed_keys = 0;
            for (int i = 0; i < c->n_layers; i++) {
                const tide_layer_role *r = &c->roles[i];
                win += r->compress_ratio == 0 && !r->is_dspark;
                r2 += r->compress_ratio == 2;
                r1 += r->compress_ratio == 1;
                kvsrc += r->is_kv_source;
                kvread += r->compress_ratio && !r->is_kv_source;
                idx += r->is_index_source;
                reuse += r->compress_ratio && !r->is_index_source;
                cand += r->is_candidate_source;
                masked += r->uses_candidates;
                borrowed_keys += r->is_index_source && !r->indexer_owns_keys;
                eng += r->has_engram;
                tgt += r->is_dspark_target;
                dsp += r->is_dspark;
            }
            assert_true(win >= 1 && kvsrc >= 3 && kvread >= 2 && idx >= 3 && reuse >= 2 && r1 && r2);
            assert_true(cand == 1 && masked >= 1 && borrowed_keys >= 1);
            assert_int_equal(eng, 2);
            assert_int_equal(tgt, 3);
            assert_int_equal(dsp, 3);
            assert_int_equal(c->text.vocab_size, 129280);
            assert_int_equal(c->text.qk_rope_head_dim, 64);
            assert_true(c->text.engram_num_embeddings[0] < 100000);
        }
    }
    assert_int_equal(n, 4);
    assert_int_equal(tide_config_preset("huge", c, &st), -1);
    assert_non_null(strstr(st.msg, "huge"));
    free(c);
    free(d);
    free(f);
}

/* Removing any field the model needs is an error naming it. */
/* The keys of obj, copied (edits below re-insert keys, which reorders them). */
static int keys_of(json_t *obj, char keys[][100], int cap) {
    int n = 0;
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val) {
        (void)val;
        if (n < cap) snprintf(keys[n++], 100, "%s", key);
    }
    return n;
}

/* Fields the reference's ModelArgs never reads: optional, the config loads
 * without them (vision_config as a whole: the fixture then has no tower). */
static int optional_field(const char *prefix, const char *k) {
    static const char *const opt[] = {"model_type",          "vision_config",
                                      "text_config.model_type", "text_config.topk_method",
                                      "text_config.num_key_value_heads", "text_config.rope_scaling.rope_type",
                                      "vision_config.model_type"};
    char full[220];
    snprintf(full, sizeof full, "%.100s%.100s", prefix, k);
    for (size_t i = 0; i < sizeof opt / sizeof *opt; i++)
        if (!strcmp(full, opt[i])) return 1;
    return 0;
}

static void remove_each(json_t *root, json_t *obj, const char *prefix) {
    char keys[128][100];
    int n = keys_of(obj, keys, 128);
    for (int i = 0; i < n; i++) {
        const char *k = keys[i];
        if (!strcmp(k, "architectures") || !strcmp(k, "bos_token_id") || !strcmp(k, "eos_token_id") ||
            !strcmp(k, "torch_dtype"))
            continue; /* not read */
        char want[400];
        snprintf(want, sizeof want, "%.100s%.100s is missing", prefix, k);
        json_t *val = json_object_get(obj, k);
        json_incref(val);
        json_object_del(obj, k);
        if (optional_field(prefix, k)) {
            tide_config *cfg = malloc(sizeof *cfg);
            tide_status st = {0};
            if (parse_json(root, cfg, &st) != 0) fail_msg("without optional %s%s: %s", prefix, k, st.msg);
            free(cfg);
        } else {
            expect_fail_with(root, want);
        }
        json_object_set_new(obj, k, val);
    }
}

/* The reference's text-only layout: no vision_config, no image_token_id and
 * no model_type anywhere loads as a text-only model, and is written back
 * the same way (round trip). With a vision tower, image_token_id is required. */
static void test_text_only_layout(void **state) {
    (void)state;
    json_t *j = load_fixture();
    json_object_del(j, "vision_config");
    json_object_del(j, "image_token_id");
    json_object_del(j, "model_type");
    json_object_del(json_object_get(j, "text_config"), "model_type");
    tide_config *c = malloc(sizeof *c), *d = malloc(sizeof *d);
    tide_status st = {0};
    if (parse_json(j, c, &st) != 0) fail_msg("%s", st.msg);
    assert_int_equal(c->vision.present, 0);
    assert_int_equal(c->vision.num_hidden_layers, 0);
    assert_int_equal(c->image_token_id, -1);
    assert_string_equal(c->model_type, "");
    char *text;
    assert_int_equal(tide_config_to_json_text(c, &text, &st), 0);
    assert_null(strstr(text, "vision_config"));
    assert_null(strstr(text, "image_token_id"));
    assert_null(strstr(text, "model_type"));
    assert_int_equal(tide_config_from_json_text(text, "rt.json", d, &st), 0);
    assert_memory_equal(c, d, sizeof *c);
    free(text);
    /* a text-only config may still name the image token; it must be in the vocabulary */
    json_object_set_new(j, "image_token_id", json_integer(129264));
    assert_int_equal(parse_json(j, c, &st), 0);
    assert_int_equal(c->image_token_id, 129264);
    json_object_set_new(j, "image_token_id", json_integer(-2));
    expect_fail_with(j, "image_token_id = -2 is outside the vocabulary");
    json_decref(j);
    /* the released config enables the tower: the image token is required */
    j = load_fixture();
    json_object_del(j, "image_token_id");
    expect_fail_with(j, "image_token_id is missing (required with a vision tower: vision_config.num_hidden_layers = 32)");
    json_decref(j);
    /* a preset with --no-vision's edit keeps every text field */
    assert_int_equal(tide_config_preset("tiny", c, &st), 0);
    *d = *c;
    assert_int_equal(tide_config_drop_vision(d, &st), 0);
    assert_int_equal(d->vision.present, 0);
    assert_int_equal(d->image_token_id, -1);
    assert_memory_equal(&c->text.vocab_size, &d->text.vocab_size,
                        sizeof c->text - offsetof(tide_text_config, vocab_size));
    free(c);
    free(d);
}

/* The forward pass's limits are config checks, naming the field, so tide
 * inspect refuses what tide run would (docs/model-config.md). */
static void test_forward_limits(void **state) {
    (void)state;
    json_t *j = load_fixture();
    json_t *r = json_object_get(json_object_get(j, "text_config"), "compress_ratios");
    json_array_set_new(r, 2, json_integer(1024));
    expect_fail_with(j, "text_config.compress_ratios[2] = 1024 must be in 0..64");
    json_array_set_new(r, 2, json_integer(65));
    expect_fail_with(j, "text_config.compress_ratios[2] = 65 must be in 0..64");
    json_decref(j);
    j = load_fixture();
    json_t *t = json_object_get(j, "text_config");
    json_object_set_new(t, "head_dim", json_integer(1024));
    json_object_set_new(t, "index_head_dim", json_integer(1024));
    json_object_set_new(t, "qk_rope_head_dim", json_integer(1024));
    expect_fail_with(j, "text_config.qk_rope_head_dim = 1024: tide's forward pass supports at most 512");
    json_decref(j);
}

static void test_missing_fields(void **state) {
    (void)state;
    json_t *j = load_fixture();
    remove_each(j, j, "");
    remove_each(j, json_object_get(j, "text_config"), "text_config.");
    remove_each(j, json_object_get(json_object_get(j, "text_config"), "rope_scaling"), "text_config.rope_scaling.");
    remove_each(j, json_object_get(j, "quantization_config"), "quantization_config.");
    remove_each(j, json_object_get(j, "vision_config"), "vision_config.");
    json_decref(j);
}

/* A value of the wrong JSON type is an error naming the field. */
static void test_wrong_types(void **state) {
    (void)state;
    json_t *j = load_fixture();
    json_t *t = json_object_get(j, "text_config");
    char keys[128][100];
    int n = keys_of(t, keys, 128);
    for (int i = 0; i < n; i++) {
        const char *k = keys[i];
        json_t *val = json_object_get(t, k);
        json_t *bad = json_is_string(val) ? json_integer(7) : json_string("seven");
        char want[200];
        snprintf(want, sizeof want, "text_config.%.100s", k);
        json_incref(val);
        json_object_set_new(t, k, bad);
        expect_fail_with(j, want);
        json_object_set_new(t, k, val);
    }
    /* integers where reals are fine, reals where integers are required */
    json_object_set_new(t, "hidden_size", json_real(5120.0));
    expect_fail_with(j, "text_config.hidden_size must be an integer");
    json_object_set_new(t, "hidden_size", json_integer(5120));
    json_t *ratios = json_object_get(t, "compress_ratios");
    json_incref(ratios);
    json_object_set_new(t, "compress_ratios", json_pack("[i, s]", 0, "x"));
    expect_fail_with(j, "text_config.compress_ratios[1] must be an integer");
    json_object_set_new(t, "compress_ratios", ratios);
    json_object_set_new(t, "norm_topk_prob", json_integer(1));
    expect_fail_with(j, "text_config.norm_topk_prob must be a boolean");
    json_decref(j);
}

/* Edits one text_config field, expects a failure naming `needle`. */
static void edit_fail(const char *field, json_t *value, const char *needle) {
    json_t *j = load_fixture();
    json_object_set_new(json_object_get(j, "text_config"), field, value);
    expect_fail_with(j, needle);
    json_decref(j);
}

static void test_inconsistent(void **state) {
    (void)state;
    edit_fail("compress_ratios", json_pack("[i,i,i]", 0, 0, 0), "compress_ratios has 3 entries; expected");
    edit_fail("kv_source_layer_ids", json_pack("[i,i,i,i]", 1, 8, 14, 20), "compress ratio 0");
    edit_fail("kv_source_layer_ids", json_pack("[i,i,i,i,i]", 2, 8, 14, 20, 40), "kv_source_layer_ids[4] = 40");
    edit_fail("kv_source_layer_ids", json_pack("[i,i,i]", 8, 14, 20), "no KV source at or below");
    edit_fail("kv_source_layer_ids", json_pack("[i,i,i,i]", 2, 8, 14, 22), "ratios must match");
    edit_fail("index_source_layer_ids", json_pack("[i,i,i,i]", 2, 8, 20, 14), "strictly increasing");
    edit_fail("index_source_layer_ids", json_pack("[i,i,i,i]", 2, 8, 20, 24), "needs its own index source");
    edit_fail("candidate_source_layer_id", json_integer(21), "candidate_source_layer_id = 21");
    edit_fail("candidate_source_layer_id", json_integer(2), "the ratios must match");
    edit_fail("dspark_target_layer_ids", json_pack("[i,i,i]", 38, 39, 40), "dspark_target_layer_ids[2] = 40");
    edit_fail("engram_layer_ids", json_pack("[i,i]", 1, 41), "engram_layer_ids[1] = 41");
    edit_fail("engram_num_embeddings", json_pack("[I,I]", (json_int_t)384006168, (json_int_t)1000),
              "engram_num_embeddings[1] = 1000");
    edit_fail("engram_num_embeddings", json_pack("[I]", (json_int_t)384006168), "engram_num_embeddings has 1");
    edit_fail("num_experts_per_tok", json_integer(385), "num_experts_per_tok = 385");
    edit_fail("dspark_num_experts_per_tok", json_integer(129), "dspark_num_experts_per_tok = 129");
    edit_fail("head_dim", json_integer(500), "head_dim = 500 must be a multiple of 32");
    edit_fail("hidden_size", json_integer(5000), "hidden_size = 5000 must be a multiple of 32");
    edit_fail("moe_intermediate_size", json_integer(2300), "moe_intermediate_size");
    edit_fail("qk_rope_head_dim", json_integer(63), "qk_rope_head_dim");
    edit_fail("index_head_dim", json_integer(32), "qk_rope_head_dim");
    edit_fail("o_groups", json_integer(7), "o_groups = 7");
    edit_fail("num_key_value_heads", json_integer(8), "num_key_value_heads");
    edit_fail("n_shared_experts", json_integer(2), "n_shared_experts");
    edit_fail("scoring_func", json_string("relu"), "scoring_func");
    edit_fail("vocab_size", json_integer(129000), "image_token_id");
    edit_fail("num_hidden_layers", json_integer(0), "num_hidden_layers");
    edit_fail("num_nextn_predict_layers", json_integer(2), "compress_ratios has 43 entries");
    edit_fail("hc_eps", json_real(0.0), "hc_eps");
    edit_fail("rms_norm_eps", json_real(-1.0), "rms_norm_eps");
    edit_fail("dspark_noise_token_id", json_integer(200000), "dspark_noise_token_id");
    /* A DSpark stage must be window-only. */
    json_t *j = load_fixture();
    json_array_set_new(json_object_get(json_object_get(j, "text_config"), "compress_ratios"), 41, json_integer(1));
    expect_fail_with(j, "DSpark stage 1");
    json_decref(j);
    /* Unsupported quantisation. */
    j = load_fixture();
    json_object_set_new(json_object_get(j, "quantization_config"), "weight_block_size", json_pack("[i,i]", 128, 128));
    expect_fail_with(j, "weight_block_size");
    json_decref(j);
    j = load_fixture();
    json_object_set_new(json_object_get(json_object_get(j, "text_config"), "rope_scaling"), "rope_type",
                        json_string("linear"));
    expect_fail_with(j, "rope_scaling.rope_type");
    json_decref(j);
}

static void test_bad_text(void **state) {
    (void)state;
    tide_config *c = malloc(sizeof *c);
    tide_status st = {0};
    assert_int_equal(tide_config_from_json_text("{", "x.json", c, &st), -1);
    assert_non_null(strstr(st.msg, "x.json: invalid JSON"));
    assert_int_equal(tide_config_from_json_text("[1]", "x.json", c, &st), -1);
    assert_non_null(strstr(st.msg, "top level must be an object"));
    assert_int_equal(tide_config_from_json_text("{\"model_type\": \"a\", \"model_type\": \"b\"}", "x.json", c, &st), -1);
    assert_int_equal(tide_config_load("/nonexistent/tide/dir", c, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_IO);
    char *dir = tu_mkdtemp("cfg");
    assert_int_equal(tide_config_load(dir, c, &st), -1);
    assert_non_null(strstr(st.msg, "config.json"));
    tu_rmtree(dir);
    free(dir);
    free(c);
}

/* Random integer edits never crash the loader; a failure always says something. */
static void test_random_edits(void **state) {
    (void)state;
    tu_rng rng = {tu_seed()};
    json_t *j = load_fixture();
    json_t *t = json_object_get(j, "text_config");
    const char *keys[64];
    int nk = 0;
    const char *key;
    json_t *val;
    json_object_foreach(t, key, val) if (json_is_integer(val) && nk < 64) keys[nk++] = key;
    tide_config *c = malloc(sizeof *c);
    for (int it = 0; it < 300; it++) {
        json_t *copy = json_deep_copy(j);
        json_t *ct = json_object_get(copy, "text_config");
        for (int k = 0; k < 3; k++) {
            const char *kname = keys[tu_next(&rng) % (uint64_t)nk];
            int64_t v;
            switch (tu_next(&rng) % 4) {
            case 0: v = (int64_t)(tu_next(&rng) % 64); break;
            case 1: v = -(int64_t)(tu_next(&rng) % 5); break;
            case 2: v = (int64_t)(tu_next(&rng) >> 1); break;
            default: v = json_integer_value(json_object_get(ct, kname)) + 32; break;
            }
            json_object_set_new(ct, kname, json_integer(v));
        }
        json_t *lists[] = {json_object_get(ct, "kv_source_layer_ids"), json_object_get(ct, "index_source_layer_ids"),
                           json_object_get(ct, "compress_ratios")};
        json_t *l = lists[tu_next(&rng) % 3];
        size_t n = json_array_size(l);
        if (n) json_array_set_new(l, tu_next(&rng) % n, json_integer((json_int_t)(tu_next(&rng) % 50) - 2));
        tide_status st = {0};
        if (parse_json(copy, c, &st) != 0) assert_true(strlen(st.msg) > 10);
        json_decref(copy);
    }
    free(c);
    json_decref(j);
}

static void test_engram_primes(void **state) {
    (void)state;
    tide_config *c = malloc(sizeof *c);
    tide_status st = {0};
    assert_int_equal(tide_config_preset("tiny", c, &st), 0);
    int64_t p[64];
    int per = (int)((c->text.engram_max_ngram_size - 1) * c->text.engram_n_heads);
    assert_int_equal(tide_config_engram_primes(c, p, 64, &st), 0);
    /* distinct primes, each >= engram_vocab_size, ascending within a (layer, n-gram) */
    for (int i = 0; i < per * c->text.n_engram_layer_ids; i++) {
        assert_true(p[i] >= c->text.engram_vocab_size);
        for (int64_t d = 2; d * d <= p[i]; d++) assert_true(p[i] % d != 0);
        for (int k = 0; k < i; k++) assert_true(p[k] != p[i]);
        if (i % (int)c->text.engram_n_heads) assert_true(p[i] > p[i - 1]);
    }
    assert_int_equal(tide_config_engram_primes(c, p, 2, &st), -1);
    free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_released_values), cmocka_unit_test(test_released_roles),
        cmocka_unit_test(test_presets),         cmocka_unit_test(test_missing_fields),
        cmocka_unit_test(test_wrong_types),     cmocka_unit_test(test_inconsistent),
        cmocka_unit_test(test_bad_text),        cmocka_unit_test(test_random_edits),
        cmocka_unit_test(test_engram_primes),   cmocka_unit_test(test_text_only_layout),
        cmocka_unit_test(test_forward_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
