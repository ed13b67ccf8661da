/* config.json <-> tide_config. Reading is strict: every field the model
 * needs must be present with the right JSON type, and every error names the
 * field as "<origin>: text_config.<key> ...". The semantic checks and the
 * role derivation live in config_check.c; this file only moves values. */
#include "model/config.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "base/json.h"

/* Where the value being read sits, for messages: section "" is the top level. */
typedef struct jctx {
    const char *origin;
    tide_status *st;
} jctx;

/* "text_config.hidden_size" or "image_token_id". */
static void field_name(char *buf, size_t cap, const char *sect, const char *key) {
    if (sect && *sect) snprintf(buf, cap, "%s.%s", sect, key);
    else snprintf(buf, cap, "%s", key);
}

static json_t *need(json_t *obj, const char *sect, const char *key, jctx *c) {
    json_t *v = json_object_get(obj, key);
    if (!v) {
        char f[160];
        field_name(f, sizeof f, sect, key);
        tide_fail(c->st, TIDE_ERR_MISSING, "%s: %s is missing", c->origin, f);
    }
    return v;
}

static int bad_type(const json_t *v, const char *sect, const char *key, const char *want,
                    jctx *c) {
    char f[160];
    field_name(f, sizeof f, sect, key);
    return tide_fail(c->st, TIDE_ERR_FORMAT, "%s: %s must be %s (found %s)", c->origin, f, want,
                     tide_json_kind(v));
}

static int get_i64(json_t *obj, const char *sect, const char *key, int64_t *out, jctx *c) {
    json_t *v = need(obj, sect, key, c);
    if (!v) return -1;
    if (!json_is_integer(v)) return bad_type(v, sect, key, "an integer", c);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int get_f64(json_t *obj, const char *sect, const char *key, double *out, jctx *c) {
    json_t *v = need(obj, sect, key, c);
    if (!v) return -1;
    if (!json_is_number(v)) return bad_type(v, sect, key, "a number", c);
    *out = json_number_value(v);
    return 0;
}

static int get_bool(json_t *obj, const char *sect, const char *key, int *out, jctx *c) {
    json_t *v = need(obj, sect, key, c);
    if (!v) return -1;
    if (!json_is_boolean(v)) return bad_type(v, sect, key, "a boolean", c);
    *out = json_is_true(v);
    return 0;
}

static int get_str(json_t *obj, const char *sect, const char *key, char *out, jctx *c) {
    json_t *v = need(obj, sect, key, c);
    if (!v) return -1;
    if (!json_is_string(v)) return bad_type(v, sect, key, "a string", c);
    const char *s = json_string_value(v);
    if (strlen(s) >= TIDE_CONFIG_STR) {
        char f[160];
        field_name(f, sizeof f, sect, key);
        return tide_fail(c->st, TIDE_ERR_FORMAT, "%s: %s is too long (%zu bytes, at most %d)",
                         c->origin, f, strlen(s), TIDE_CONFIG_STR - 1);
    }
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

/* An array of integers into int64 out[cap]; *n receives the length. */
static int get_i64_list(json_t *obj, const char *sect, const char *key, int64_t *out, int *n,
                        int cap, jctx *c) {
    json_t *v = need(obj, sect, key, c);
    if (!v) return -1;
    if (!json_is_array(v)) return bad_type(v, sect, key, "an array of integers", c);
    char f[160];
    field_name(f, sizeof f, sect, key);
    size_t len = json_array_size(v);
    if (len > (size_t)cap)
        return tide_fail(c->st, TIDE_ERR_UNSUPPORTED, "%s: %s has %zu entries; tide supports at most %d",
                         c->origin, f, len, cap);
    for (size_t i = 0; i < len; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e))
            return tide_fail(c->st, TIDE_ERR_FORMAT, "%s: %s[%zu] must be an integer (found %s)",
                             c->origin, f, i, tide_json_kind(e));
        out[i] = (int64_t)json_integer_value(e);
    }
    *n = (int)len;
    return 0;
}

/* Same for int-sized entries (layer ids, ratios): values outside int are errors. */
static int get_int_list(json_t *obj, const char *sect, const char *key, int *out, int *n, int cap,
                        jctx *c) {
    int64_t tmp[TIDE_MAX_LAYERS];
    if (cap > TIDE_MAX_LAYERS) cap = TIDE_MAX_LAYERS;
    if (get_i64_list(obj, sect, key, tmp, n, cap, c) != 0) return -1;
    for (int i = 0; i < *n; i++) {
        if (tmp[i] < INT_MIN / 2 || tmp[i] > INT_MAX / 2) {
            char f[160];
            field_name(f, sizeof f, sect, key);
            return tide_fail(c->st, TIDE_ERR_FORMAT, "%s: %s[%d] = %lld is out of range", c->origin,
                             f, i, (long long)tmp[i]);
        }
        out[i] = (int)tmp[i];
    }
    return 0;
}

static int get_obj(json_t *obj, const char *sect, const char *key, json_t **out, jctx *c) {
    json_t *v = need(obj, sect, key, c);
    if (!v) return -1;
    if (!json_is_object(v)) return bad_type(v, sect, key, "an object", c);
    *out = v;
    return 0;
}

/* ---------------------------------------------------------------- reading */

/* Fields the reference never reads (model.py's ModelArgs has no such key):
 * optional, with the one value tide implements as the default, so that a
 * config written for the reference loads. Present, they are checked as usual. */
static int opt_str(json_t *obj, const char *sect, const char *key, char *out, const char *dflt, jctx *c) {
    if (json_object_get(obj, key)) return get_str(obj, sect, key, out, c);
    snprintf(out, TIDE_CONFIG_STR, "%s", dflt);
    return 0;
}

static int opt_i64(json_t *obj, const char *sect, const char *key, int64_t *out, int64_t dflt, jctx *c) {
    if (json_object_get(obj, key)) return get_i64(obj, sect, key, out, c);
    *out = dflt;
    return 0;
}


static int read_rope_scaling(json_t *text, tide_rope_scaling *r, jctx *c) {
    json_t *o = NULL;
    const char *s = "text_config.rope_scaling";
    if (get_obj(text, "text_config", "rope_scaling", &o, c) != 0) return -1;
    if (opt_str(o, s, "rope_type", r->rope_type, "yarn", c) || get_f64(o, s, "factor", &r->factor, c) ||
        get_f64(o, s, "beta_fast", &r->beta_fast, c) || get_f64(o, s, "beta_slow", &r->beta_slow, c) ||
        get_i64(o, s, "original_max_position_embeddings", &r->original_max_position_embeddings, c))
        return -1;
    return 0;
}

static int read_attention(json_t *t, tide_text_config *x, jctx *c) {
    const char *s = "text_config";
    if (opt_str(t, s, "model_type", x->model_type, "", c) || get_i64(t, s, "vocab_size", &x->vocab_size, c) ||
        get_i64(t, s, "hidden_size", &x->hidden_size, c) ||
        get_i64(t, s, "num_hidden_layers", &x->num_hidden_layers, c) ||
        get_i64(t, s, "num_attention_heads", &x->num_attention_heads, c) ||
        opt_i64(t, s, "num_key_value_heads", &x->num_key_value_heads, 1, c) ||
        get_i64(t, s, "head_dim", &x->head_dim, c) ||
        get_i64(t, s, "qk_rope_head_dim", &x->qk_rope_head_dim, c) ||
        get_i64(t, s, "q_lora_rank", &x->q_lora_rank, c) || get_i64(t, s, "o_groups", &x->o_groups, c) ||
        get_i64(t, s, "o_lora_rank", &x->o_lora_rank, c) ||
        get_i64(t, s, "max_position_embeddings", &x->max_position_embeddings, c) ||
        get_f64(t, s, "rms_norm_eps", &x->rms_norm_eps, c))
        return -1;
    if (get_i64(t, s, "sliding_window", &x->sliding_window, c) ||
        get_int_list(t, s, "compress_ratios", x->compress_ratios, &x->n_compress_ratios,
                     TIDE_MAX_LAYERS, c) ||
        get_int_list(t, s, "kv_source_layer_ids", x->kv_source_layer_ids, &x->n_kv_source_layer_ids,
                     TIDE_MAX_LAYERS, c) ||
        get_int_list(t, s, "index_source_layer_ids", x->index_source_layer_ids,
                     &x->n_index_source_layer_ids, TIDE_MAX_LAYERS, c) ||
        get_i64(t, s, "candidate_source_layer_id", &x->candidate_source_layer_id, c) ||
        get_i64(t, s, "candidate_topk_blocks", &x->candidate_topk_blocks, c) ||
        get_i64(t, s, "candidate_block_size", &x->candidate_block_size, c) ||
        get_i64(t, s, "index_n_heads", &x->index_n_heads, c) ||
        get_i64(t, s, "index_head_dim", &x->index_head_dim, c) ||
        get_i64(t, s, "index_topk", &x->index_topk, c) || get_f64(t, s, "rope_theta", &x->rope_theta, c) ||
        get_f64(t, s, "compress_rope_theta", &x->compress_rope_theta, c) ||
        read_rope_scaling(t, &x->rope_scaling, c))
        return -1;
    return 0;
}

static int read_moe_hc(json_t *t, tide_text_config *x, jctx *c) {
    const char *s = "text_config";
    if (get_i64(t, s, "n_routed_experts", &x->n_routed_experts, c) ||
        get_i64(t, s, "num_experts_per_tok", &x->num_experts_per_tok, c) ||
        get_i64(t, s, "n_shared_experts", &x->n_shared_experts, c) ||
        get_i64(t, s, "moe_intermediate_size", &x->moe_intermediate_size, c) ||
        get_str(t, s, "scoring_func", x->scoring_func, c) || opt_str(t, s, "topk_method", x->topk_method, "noaux_tc", c) ||
        get_f64(t, s, "routed_scaling_factor", &x->routed_scaling_factor, c) ||
        get_bool(t, s, "norm_topk_prob", &x->norm_topk_prob, c) ||
        get_f64(t, s, "swiglu_limit", &x->swiglu_limit, c))
        return -1;
    /* The one optional field: the released config has no gate_temp and the
     * reference's ModelArgs defaults it to 1.0 (docs/model-config.md). */
    x->gate_temp = 1.0;
    if (json_object_get(t, "gate_temp") && get_f64(t, s, "gate_temp", &x->gate_temp, c)) return -1;
    if (get_i64(t, s, "hc_mult", &x->hc_mult, c) || get_i64(t, s, "hc_sinkhorn_iters", &x->hc_sinkhorn_iters, c) ||
        get_f64(t, s, "hc_eps", &x->hc_eps, c))
        return -1;
    return 0;
}

static int read_engram_dspark(json_t *t, tide_text_config *x, jctx *c) {
    const char *s = "text_config";
    if (get_int_list(t, s, "engram_layer_ids", x->engram_layer_ids, &x->n_engram_layer_ids,
                     TIDE_MAX_ENGRAM_LAYERS, c) ||
        get_i64_list(t, s, "engram_num_embeddings", x->engram_num_embeddings, &x->n_engram_num_embeddings,
                     TIDE_MAX_ENGRAM_LAYERS, c) ||
        get_i64(t, s, "engram_max_ngram_size", &x->engram_max_ngram_size, c) ||
        get_i64(t, s, "engram_n_heads", &x->engram_n_heads, c) ||
        get_i64(t, s, "engram_head_dim", &x->engram_head_dim, c) ||
        get_i64(t, s, "engram_vocab_size", &x->engram_vocab_size, c) ||
        get_i64(t, s, "engram_compressed_vocab_size", &x->engram_compressed_vocab_size, c) ||
        get_i64(t, s, "engram_pad_token_id", &x->engram_pad_token_id, c))
        return -1;
    if (get_i64(t, s, "num_nextn_predict_layers", &x->num_nextn_predict_layers, c) ||
        get_i64(t, s, "dspark_block_size", &x->dspark_block_size, c) ||
        get_int_list(t, s, "dspark_target_layer_ids", x->dspark_target_layer_ids,
                     &x->n_dspark_target_layer_ids, TIDE_MAX_DSPARK_TARGETS, c) ||
        get_i64(t, s, "dspark_markov_rank", &x->dspark_markov_rank, c) ||
        get_i64(t, s, "dspark_noise_token_id", &x->dspark_noise_token_id, c) ||
        get_i64(t, s, "dspark_n_routed_experts", &x->dspark_n_routed_experts, c) ||
        get_i64(t, s, "dspark_num_experts_per_tok", &x->dspark_num_experts_per_tok, c))
        return -1;
    return 0;
}

static int read_quant(json_t *root, tide_quant_config *q, jctx *c) {
    json_t *o, *bs;
    const char *s = "quantization_config";
    if (get_obj(root, "", "quantization_config", &o, c) || get_str(o, s, "quant_method", q->quant_method, c) ||
        get_str(o, s, "scale_fmt", q->scale_fmt, c) || get_str(o, s, "expert_dtype", q->expert_dtype, c))
        return -1;
    if (!(bs = need(o, s, "weight_block_size", c))) return -1;
    if (!json_is_array(bs) || json_array_size(bs) != 2 || !json_is_integer(json_array_get(bs, 0)) ||
        !json_is_integer(json_array_get(bs, 1)))
        return tide_fail(c->st, TIDE_ERR_FORMAT,
                         "%s: quantization_config.weight_block_size must be an array of two integers",
                         c->origin);
    q->weight_block_size[0] = (int)json_integer_value(json_array_get(bs, 0));
    q->weight_block_size[1] = (int)json_integer_value(json_array_get(bs, 1));
    return 0;
}

/* Optional as a whole: the reference builds no vision tower when
 * vision_n_layers is 0, which is what an absent vision_config means. */
static int read_vision(json_t *root, tide_vision_config *v, jctx *c) {
    json_t *o, *w;
    const char *s = "vision_config";
    memset(v, 0, sizeof *v);
    if (!json_object_get(root, "vision_config")) return 0;
    v->present = 1;
    if (get_obj(root, "", "vision_config", &o, c) || opt_str(o, s, "model_type", v->model_type, "", c) ||
        get_i64(o, s, "num_hidden_layers", &v->num_hidden_layers, c) ||
        get_i64(o, s, "hidden_size", &v->hidden_size, c) ||
        get_i64(o, s, "num_attention_heads", &v->num_attention_heads, c) ||
        get_i64(o, s, "intermediate_size", &v->intermediate_size, c) ||
        get_i64(o, s, "patch_size", &v->patch_size, c) || get_f64(o, s, "rope_theta", &v->rope_theta, c) ||
        get_i64(o, s, "downsample_ratio", &v->downsample_ratio, c) ||
        get_i64(o, s, "max_image_tokens", &v->max_image_tokens, c) ||
        get_i64(o, s, "min_pixels", &v->min_pixels, c))
        return -1;
    if (!(w = need(o, s, "max_wh_ratio", c))) return -1;
    if (json_is_null(w)) v->max_wh_ratio = 0;
    else if (json_is_integer(w)) v->max_wh_ratio = (int64_t)json_integer_value(w);
    else return bad_type(w, s, "max_wh_ratio", "an integer or null", c);
    return 0;
}

/* Optional: present only in checkpoints written by tide synth. */
static int read_synth(json_t *root, tide_synth_meta *m, jctx *c) {
    json_t *o = json_object_get(root, "tide_synthetic");
    memset(m, 0, sizeof *m);
    if (!o) return 0;
    if (!json_is_object(o)) return bad_type(o, "", "tide_synthetic", "an object", c);
    int64_t seed;
    const char *s = "tide_synthetic";
    char map[TIDE_CONFIG_STR];
    if (get_str(o, s, "shape", m->shape, c) || get_i64(o, s, "seed", &seed, c) ||
        get_i64(o, s, "written_layers", &m->written_layers, c) ||
        opt_str(o, s, "engram_token_map", map, "tokenizer", c))
        return -1;
    /* Written by tide synth: "synthetic" when it wrote no tokenizer.json, so
     * the engram layers hash through tide's stand-in map by the checkpoint's
     * own record, never because a file happens to be missing. */
    if (strcmp(map, "synthetic") && strcmp(map, "tokenizer"))
        return tide_fail(c->st, TIDE_ERR_FORMAT,
                         "%s: tide_synthetic.engram_token_map is \"%s\"; expected \"tokenizer\" or \"synthetic\"",
                         c->origin, map);
    m->synthetic_token_map = !strcmp(map, "synthetic");
    m->seed = (uint64_t)seed;
    m->is_synthetic = 1;
    return 0;
}

static int read_root(json_t *root, tide_config *cfg, jctx *c) {
    json_t *text = NULL;
    if (!json_is_object(root))
        return tide_fail(c->st, TIDE_ERR_FORMAT, "%s: the top level must be an object (found %s)",
                         c->origin, tide_json_kind(root));
    if (opt_str(root, "", "model_type", cfg->model_type, "", c) || get_obj(root, "", "text_config", &text, c))
        return -1;
    if (read_attention(text, &cfg->text, c) || read_moe_hc(text, &cfg->text, c) ||
        read_engram_dspark(text, &cfg->text, c) || read_quant(root, &cfg->quant, c) ||
        read_vision(root, &cfg->vision, c) || read_synth(root, &cfg->synth, c))
        return -1;
    /* The image token means something only to the vision path (model.py
     * reads it there alone): required with a vision tower, -1 (none) for a
     * text-only model that does not name it. */
    if (cfg->vision.num_hidden_layers > 0 || json_object_get(root, "image_token_id")) {
        if (!json_object_get(root, "image_token_id"))
            return tide_fail(c->st, TIDE_ERR_MISSING,
                             "%s: image_token_id is missing (required with a vision tower: "
                             "vision_config.num_hidden_layers = %lld)",
                             c->origin, (long long)cfg->vision.num_hidden_layers);
        if (get_i64(root, "", "image_token_id", &cfg->image_token_id, c)) return -1;
    } else {
        cfg->image_token_id = -1;
    }
    return 0;
}

int tide_config_from_json_text(const char *text, const char *origin, tide_config *cfg,
                               tide_status *st) {
    if (!origin) origin = "config.json";
    memset(cfg, 0, sizeof *cfg);
    if (!text) return tide_fail(st, TIDE_ERR_INVALID, "%s: no text", origin);
    json_error_t err;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", origin,
                         err.line, err.column, err.text);
    jctx c = {origin, st};
    int rc = read_root(root, cfg, &c);
    json_decref(root);
    if (rc != 0) return -1;
    if (tide_config_check(cfg, st) != 0) return tide_fail_ctx(st, "%s", origin);
    return 0;
}

static int read_file(const char *path, char **out, tide_status *st) {
    size_t len;
    if (tide_read_file(path, (size_t)64 << 20, out, &len, st) != 0) return -1;
    if (strlen(*out) != len) {
        free(*out);
        *out = NULL;
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: contains a NUL byte, not a JSON text", path);
    }
    return 0;
}

int tide_config_load(const char *path_or_dir, tide_config *cfg, tide_status *st) {
    struct stat sb;
    char path[4096];
    if (stat(path_or_dir, &sb) != 0)
        return tide_fail(st, TIDE_ERR_IO, "%s: %s", path_or_dir, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        if ((size_t)snprintf(path, sizeof path, "%s/config.json", path_or_dir) >= sizeof path)
            return tide_fail(st, TIDE_ERR_INVALID, "%s: path too long", path_or_dir);
    } else {
        snprintf(path, sizeof path, "%s", path_or_dir);
    }
    char *text = NULL;
    if (read_file(path, &text, st) != 0) return -1;
    int rc = tide_config_from_json_text(text, path, cfg, st);
    free(text);
    return rc;
}

/* ---------------------------------------------------------------- writing */

static json_t *int_array(const int *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *i64_array(const int64_t *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer((json_int_t)v[i]));
    return a;
}

#define SETI(o, k, v) json_object_set_new(o, k, json_integer((json_int_t)(v)))
#define SETF(o, k, v) json_object_set_new(o, k, json_real(v))
#define SETS(o, k, v) json_object_set_new(o, k, json_string(v))

static json_t *text_to_json(const tide_text_config *x) {
    json_t *t = json_object();
    if (x->model_type[0]) SETS(t, "model_type", x->model_type);
    SETI(t, "vocab_size", x->vocab_size);
    SETI(t, "hidden_size", x->hidden_size);
    SETI(t, "moe_intermediate_size", x->moe_intermediate_size);
    SETI(t, "num_hidden_layers", x->num_hidden_layers);
    SETI(t, "num_attention_heads", x->num_attention_heads);
    SETI(t, "num_key_value_heads", x->num_key_value_heads);
    SETI(t, "head_dim", x->head_dim);
    SETI(t, "qk_rope_head_dim", x->qk_rope_head_dim);
    SETI(t, "q_lora_rank", x->q_lora_rank);
    SETI(t, "o_lora_rank", x->o_lora_rank);
    SETI(t, "o_groups", x->o_groups);
    SETF(t, "rms_norm_eps", x->rms_norm_eps);
    SETI(t, "max_position_embeddings", x->max_position_embeddings);
    SETI(t, "n_routed_experts", x->n_routed_experts);
    SETI(t, "n_shared_experts", x->n_shared_experts);
    SETI(t, "num_experts_per_tok", x->num_experts_per_tok);
    SETS(t, "scoring_func", x->scoring_func);
    SETS(t, "topk_method", x->topk_method);
    json_object_set_new(t, "norm_topk_prob", json_boolean(x->norm_topk_prob));
    SETF(t, "routed_scaling_factor", x->routed_scaling_factor);
    SETF(t, "swiglu_limit", x->swiglu_limit);
    if (x->gate_temp != 1.0) SETF(t, "gate_temp", x->gate_temp);
    SETI(t, "sliding_window", x->sliding_window);
    json_object_set_new(t, "compress_ratios", int_array(x->compress_ratios, x->n_compress_ratios));
    json_object_set_new(t, "kv_source_layer_ids", int_array(x->kv_source_layer_ids, x->n_kv_source_layer_ids));
    json_object_set_new(t, "index_source_layer_ids",
                        int_array(x->index_source_layer_ids, x->n_index_source_layer_ids));
    SETI(t, "index_n_heads", x->index_n_heads);
    SETI(t, "index_head_dim", x->index_head_dim);
    SETI(t, "index_topk", x->index_topk);
    SETI(t, "candidate_source_layer_id", x->candidate_source_layer_id);
    SETI(t, "candidate_topk_blocks", x->candidate_topk_blocks);
    SETI(t, "candidate_block_size", x->candidate_block_size);
    SETF(t, "rope_theta", x->rope_theta);
    SETF(t, "compress_rope_theta", x->compress_rope_theta);
    json_t *r = json_object();
    SETS(r, "rope_type", x->rope_scaling.rope_type);
    SETF(r, "factor", x->rope_scaling.factor);
    SETF(r, "beta_fast", x->rope_scaling.beta_fast);
    SETF(r, "beta_slow", x->rope_scaling.beta_slow);
    SETI(r, "original_max_position_embeddings", x->rope_scaling.original_max_position_embeddings);
    json_object_set_new(t, "rope_scaling", r);
    SETI(t, "hc_mult", x->hc_mult);
    SETI(t, "hc_sinkhorn_iters", x->hc_sinkhorn_iters);
    SETF(t, "hc_eps", x->hc_eps);
    json_object_set_new(t, "engram_layer_ids", int_array(x->engram_layer_ids, x->n_engram_layer_ids));
    json_object_set_new(t, "engram_num_embeddings",
                        i64_array(x->engram_num_embeddings, x->n_engram_num_embeddings));
    SETI(t, "engram_max_ngram_size", x->engram_max_ngram_size);
    SETI(t, "engram_vocab_size", x->engram_vocab_size);
    SETI(t, "engram_n_heads", x->engram_n_heads);
    SETI(t, "engram_head_dim", x->engram_head_dim);
    SETI(t, "engram_compressed_vocab_size", x->engram_compressed_vocab_size);
    SETI(t, "engram_pad_token_id", x->engram_pad_token_id);
    SETI(t, "num_nextn_predict_layers", x->num_nextn_predict_layers);
    SETI(t, "dspark_block_size", x->dspark_block_size);
    json_object_set_new(t, "dspark_target_layer_ids",
                        int_array(x->dspark_target_layer_ids, x->n_dspark_target_layer_ids));
    SETI(t, "dspark_markov_rank", x->dspark_markov_rank);
    SETI(t, "dspark_noise_token_id", x->dspark_noise_token_id);
    SETI(t, "dspark_n_routed_experts", x->dspark_n_routed_experts);
    SETI(t, "dspark_num_experts_per_tok", x->dspark_num_experts_per_tok);
    return t;
}

static json_t *quant_to_json(const tide_quant_config *q) {
    json_t *o = json_object();
    SETS(o, "quant_method", q->quant_method);
    json_t *bs = json_array();
    json_array_append_new(bs, json_integer(q->weight_block_size[0]));
    json_array_append_new(bs, json_integer(q->weight_block_size[1]));
    json_object_set_new(o, "weight_block_size", bs);
    SETS(o, "scale_fmt", q->scale_fmt);
    SETS(o, "expert_dtype", q->expert_dtype);
    return o;
}

static json_t *vision_to_json(const tide_vision_config *v) {
    json_t *o = json_object();
    if (v->model_type[0]) SETS(o, "model_type", v->model_type);
    SETI(o, "num_hidden_layers", v->num_hidden_layers);
    SETI(o, "hidden_size", v->hidden_size);
    SETI(o, "num_attention_heads", v->num_attention_heads);
    SETI(o, "intermediate_size", v->intermediate_size);
    SETI(o, "patch_size", v->patch_size);
    SETF(o, "rope_theta", v->rope_theta);
    SETI(o, "downsample_ratio", v->downsample_ratio);
    SETI(o, "max_image_tokens", v->max_image_tokens);
    SETI(o, "min_pixels", v->min_pixels);
    json_object_set_new(o, "max_wh_ratio", v->max_wh_ratio ? json_integer(v->max_wh_ratio) : json_null());
    return o;
}

int tide_config_to_json_text(const tide_config *cfg, char **text, tide_status *st) {
    json_t *root = json_object();
    json_t *arch = json_array();
    json_array_append_new(arch, json_string("DeepseekV41ForCausalLM"));
    json_object_set_new(root, "architectures", arch);
    /* What was absent stays absent (the text-only layout of the reference). */
    if (cfg->model_type[0]) SETS(root, "model_type", cfg->model_type);
    if (cfg->image_token_id >= 0) SETI(root, "image_token_id", cfg->image_token_id);
    json_object_set_new(root, "text_config", text_to_json(&cfg->text));
    json_object_set_new(root, "quantization_config", quant_to_json(&cfg->quant));
    if (cfg->vision.present) json_object_set_new(root, "vision_config", vision_to_json(&cfg->vision));
    if (cfg->synth.is_synthetic) {
        json_t *m = json_object();
        SETS(m, "shape", cfg->synth.shape);
        SETI(m, "seed", (int64_t)cfg->synth.seed);
        SETI(m, "written_layers", cfg->synth.written_layers);
        SETS(m, "engram_token_map", cfg->synth.synthetic_token_map ? "synthetic" : "tokenizer");
        SETS(m, "note", "synthetic random weights written by tide synth; not a trained model");
        json_object_set_new(root, "tide_synthetic", m);
    }
    *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (!*text) return tide_fail(st, TIDE_ERR_NOMEM, "config: cannot serialise to JSON");
    return 0;
}

int tide_config_write_json(const tide_config *cfg, const char *path, tide_status *st) {
    char *text;
    if (tide_config_to_json_text(cfg, &text, st) != 0) return -1;
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(text);
        return tide_fail(st, TIDE_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    size_t len = strlen(text);
    int bad = fwrite(text, 1, len, f) != len || fputc('\n', f) == EOF;
    bad |= fclose(f) != 0;
    free(text);
    if (bad) return tide_fail(st, TIDE_ERR_IO, "%s: write failed", path);
    return 0;
}
