/* Named model shapes for synthetic checkpoints (tide synth --shape NAME).
 *
 *   tiny       every layer role at toy width (D 128, 10 backbone layers + 3
 *              DSpark stages); the shape the CPU and numpy tests run
 *   small      the same layer layout, wider (D 256, 16 experts)
 *   flash      the released DeepSeek-V4.1-Flash dimensions (spec §1)
 *   flash-ep8  released dimensions with one EP8 rank's share of routed experts
 *              (48 of 384 per layer, 16 of 128 per DSpark stage) and engram
 *              tables shrunk to a few GB
 *
 * The small shapes deliberately differ from the release in values that code
 * might hard-code (compress_rope_theta, YaRN factor, DSpark block size, ...)
 * so such code fails on them. Engram row counts are derived from the bucket
 * primes, as the reference's layout requires. docs/model-config.md has the
 * table of sizes. */
#include <string.h>

#include "model/config.h"

static const char *const preset_names[] = {"tiny", "small", "flash", "flash-ep8", NULL};

const char *const *tide_config_preset_names(void) { return preset_names; }

static void set_list(int *dst, int *n, const int *src, int count) {
    memcpy(dst, src, sizeof(int) * (size_t)count);
    *n = count;
}

/* Fields shared by every shape (the scale-independent released values). */
static void common(tide_config *c) {
    tide_text_config *x = &c->text;
    strcpy(c->model_type, "deepseek_v41");
    strcpy(x->model_type, "deepseek_v41_text");
    c->image_token_id = 129264;
    x->vocab_size = 129280;
    x->num_key_value_heads = 1;
    x->qk_rope_head_dim = 64;
    x->rms_norm_eps = 1e-20;
    x->n_shared_experts = 1;
    strcpy(x->scoring_func, "sqrtsoftplus");
    strcpy(x->topk_method, "noaux_tc");
    x->routed_scaling_factor = 1.5;
    x->norm_topk_prob = 1;
    x->swiglu_limit = 10.0;
    x->gate_temp = 1.0;
    x->rope_theta = 10000.0;
    strcpy(x->rope_scaling.rope_type, "yarn");
    x->rope_scaling.beta_fast = 32;
    x->rope_scaling.beta_slow = 1;
    x->hc_mult = 4;
    x->hc_sinkhorn_iters = 20;
    x->hc_eps = 1e-6;
    x->engram_pad_token_id = 2;
    x->engram_compressed_vocab_size = 99092;
    x->dspark_noise_token_id = 128799;
    strcpy(c->quant.quant_method, "fp8");
    c->quant.weight_block_size[0] = c->quant.weight_block_size[1] = 32;
    strcpy(c->quant.scale_fmt, "ue8m0");
    strcpy(c->quant.expert_dtype, "fp4");
    /* Synthetic checkpoints carry no vision tower (num_hidden_layers 0, the
     * reference's "vision disabled"); the other fields keep released values. */
    strcpy(c->vision.model_type, "deepseek_v41_vision");
    c->vision.present = 1;
    c->vision.num_hidden_layers = 0;
    c->vision.hidden_size = 1024;
    c->vision.num_attention_heads = 16;
    c->vision.intermediate_size = 2816;
    c->vision.patch_size = 14;
    c->vision.rope_theta = 10000.0;
    c->vision.downsample_ratio = 3;
    c->vision.max_image_tokens = 1024;
    c->vision.min_pixels = 544 * 544;
    c->vision.max_wh_ratio = 0;
}

/* The toy layer layout shared by tiny and small (10 backbone layers):
 *   0 window-only          5 ratio 2, reads KV/top-k of 4
 *   1 window-only, engram  6 ratio 1, KV source, indexer, candidate source
 *   2 ratio 2, KV source + indexer   7 ratio 1, reuses 6
 *   3 ratio 2, reads 2     8 ratio 1, indexer (keys of 6), masks to candidates
 *   4 ratio 2, KV source + indexer, engram   9 ratio 1, reuses 8
 * DSpark stages 10..12 read the inputs of layers 7, 8, 9. */
static void toy_layout(tide_text_config *x) {
    static const int ratios[] = {0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0};
    static const int kv[] = {2, 4, 6}, idx[] = {2, 4, 6, 8}, eng[] = {1, 4}, tgt[] = {7, 8, 9};
    x->num_hidden_layers = 10;
    x->num_nextn_predict_layers = 3;
    set_list(x->compress_ratios, &x->n_compress_ratios, ratios, 13);
    set_list(x->kv_source_layer_ids, &x->n_kv_source_layer_ids, kv, 3);
    set_list(x->index_source_layer_ids, &x->n_index_source_layer_ids, idx, 4);
    set_list(x->engram_layer_ids, &x->n_engram_layer_ids, eng, 2);
    set_list(x->dspark_target_layer_ids, &x->n_dspark_target_layer_ids, tgt, 3);
    x->candidate_source_layer_id = 6;
    x->compress_rope_theta = 40000.0;
    x->rope_scaling.factor = 8;
    x->rope_scaling.original_max_position_embeddings = 4096;
    x->max_position_embeddings = 32768;
    x->dspark_block_size = 4;
}

static void tiny(tide_config *c) {
    tide_text_config *x = &c->text;
    toy_layout(x);
    x->hidden_size = 128;
    x->num_attention_heads = 4;
    x->head_dim = 128; /* 64 nope + 64 rope */
    x->q_lora_rank = 64;
    x->o_groups = 2;
    x->o_lora_rank = 32;
    x->sliding_window = 8;
    x->candidate_topk_blocks = 3;
    x->candidate_block_size = 4;
    x->index_n_heads = 4;
    x->index_head_dim = 96;
    x->index_topk = 6;
    x->n_routed_experts = 8;
    x->num_experts_per_tok = 2;
    x->moe_intermediate_size = 64;
    x->engram_max_ngram_size = 3;
    x->engram_n_heads = 2;
    x->engram_head_dim = 64;
    x->engram_vocab_size = 1000;
    x->dspark_markov_rank = 32;
    x->dspark_n_routed_experts = 4;
    x->dspark_num_experts_per_tok = 2;
}

static void small(tide_config *c) {
    tide_text_config *x = &c->text;
    toy_layout(x);
    x->hidden_size = 256;
    x->num_attention_heads = 8;
    x->head_dim = 192;
    x->q_lora_rank = 128;
    x->o_groups = 4;
    x->o_lora_rank = 64;
    x->sliding_window = 16;
    x->candidate_topk_blocks = 4;
    x->candidate_block_size = 4;
    x->index_n_heads = 8;
    x->index_head_dim = 128;
    x->index_topk = 12;
    x->n_routed_experts = 16;
    x->num_experts_per_tok = 4;
    x->moe_intermediate_size = 128;
    x->engram_max_ngram_size = 4;
    x->engram_n_heads = 4;
    x->engram_head_dim = 128;
    x->engram_vocab_size = 3000;
    x->dspark_markov_rank = 64;
    x->dspark_n_routed_experts = 8;
    x->dspark_num_experts_per_tok = 3;
}

/* spec §1, the released text_config. */
static void flash(tide_config *c) {
    tide_text_config *x = &c->text;
    static const int kv[] = {2, 8, 14, 20}, idx[] = {2, 8, 14, 20, 24, 28, 32, 36}, eng[] = {1, 14},
                     tgt[] = {37, 38, 39};
    x->num_hidden_layers = 40;
    x->num_nextn_predict_layers = 3;
    x->n_compress_ratios = 43;
    for (int i = 0; i < 43; i++) x->compress_ratios[i] = i < 2 ? 0 : i < 20 ? 2 : i < 40 ? 1 : 0;
    set_list(x->kv_source_layer_ids, &x->n_kv_source_layer_ids, kv, 4);
    set_list(x->index_source_layer_ids, &x->n_index_source_layer_ids, idx, 8);
    set_list(x->engram_layer_ids, &x->n_engram_layer_ids, eng, 2);
    set_list(x->dspark_target_layer_ids, &x->n_dspark_target_layer_ids, tgt, 3);
    x->hidden_size = 5120;
    x->num_attention_heads = 64;
    x->head_dim = 512;
    x->q_lora_rank = 1280;
    x->o_groups = 8;
    x->o_lora_rank = 1024;
    x->max_position_embeddings = 1048576;
    x->sliding_window = 128;
    x->candidate_source_layer_id = 20;
    x->candidate_topk_blocks = 2048;
    x->candidate_block_size = 8;
    x->index_n_heads = 32;
    x->index_head_dim = 128;
    x->index_topk = 512;
    x->compress_rope_theta = 160000.0;
    x->rope_scaling.factor = 16;
    x->rope_scaling.original_max_position_embeddings = 65536;
    x->n_routed_experts = 384;
    x->num_experts_per_tok = 6;
    x->moe_intermediate_size = 2304;
    x->engram_max_ngram_size = 4;
    x->engram_n_heads = 8;
    x->engram_head_dim = 256;
    x->engram_vocab_size = 16000000;
    x->dspark_block_size = 5;
    x->dspark_markov_rank = 256;
    x->dspark_n_routed_experts = 128;
    x->dspark_num_experts_per_tok = 3;
}

static void flash_ep8(tide_config *c) {
    flash(c);
    c->text.n_routed_experts = 384 / 8;
    c->text.dspark_n_routed_experts = 128 / 8;
    /* 24 buckets of ~262k rows = ~6.3M rows of 264 B: ~1.7 GB per table. */
    c->text.engram_vocab_size = 262144;
}

int tide_config_preset(const char *shape_name, tide_config *cfg, tide_status *st) {
    memset(cfg, 0, sizeof *cfg);
    common(cfg);
    if (!shape_name) shape_name = "";
    if (!strcmp(shape_name, "tiny")) tiny(cfg);
    else if (!strcmp(shape_name, "small")) small(cfg);
    else if (!strcmp(shape_name, "flash")) flash(cfg);
    else if (!strcmp(shape_name, "flash-ep8")) flash_ep8(cfg);
    else
        return tide_fail(st, TIDE_ERR_INVALID, "unknown shape \"%s\" (known: tiny, small, flash, flash-ep8)",
                         shape_name);
    tide_text_config *x = &cfg->text;
    x->n_engram_num_embeddings = x->n_engram_layer_ids;
    int64_t primes[4096];
    if (tide_config_engram_primes(cfg, primes, 4096, st) != 0) return -1;
    int per = (int)((x->engram_max_ngram_size - 1) * x->engram_n_heads);
    for (int l = 0; l < x->n_engram_layer_ids; l++) {
        x->engram_num_embeddings[l] = 0;
        for (int j = 0; j < per; j++) x->engram_num_embeddings[l] += primes[l * per + j];
    }
    if (tide_config_check(cfg, st) != 0) return tide_fail_ctx(st, "preset %s", shape_name);
    return 0;
}

int tide_config_drop_vision(tide_config *cfg, tide_status *st) {
    memset(&cfg->vision, 0, sizeof cfg->vision);
    cfg->image_token_id = -1;
    cfg->model_type[0] = 0;
    cfg->text.model_type[0] = 0;
    return tide_config_check(cfg, st);
}

/* tide synth --vision: a tower of the shape's width (docs/vision.md). tiny and
 * small differ from the release in rope_theta, downsample_ratio and the
 * budgets, so code that hard-codes the released values fails on them. */
int tide_config_preset_vision(const char *shape_name, tide_config *cfg, tide_status *st) {
    tide_vision_config *v = &cfg->vision;
    if (!shape_name) shape_name = "";
    if (!strcmp(shape_name, "tiny")) {
        v->num_hidden_layers = 2, v->hidden_size = 64, v->num_attention_heads = 4, v->intermediate_size = 96;
        v->rope_theta = 1000.0, v->downsample_ratio = 3, v->max_image_tokens = 64, v->min_pixels = 112 * 112;
    } else if (!strcmp(shape_name, "small")) {
        v->num_hidden_layers = 4, v->hidden_size = 128, v->num_attention_heads = 8, v->intermediate_size = 256;
        v->rope_theta = 10000.0, v->downsample_ratio = 2, v->max_image_tokens = 256, v->min_pixels = 224 * 224;
    } else if (!strcmp(shape_name, "flash") || !strcmp(shape_name, "flash-ep8")) {
        v->num_hidden_layers = 32, v->hidden_size = 1024, v->num_attention_heads = 16, v->intermediate_size = 2816;
        v->rope_theta = 10000.0, v->downsample_ratio = 3, v->max_image_tokens = 1024, v->min_pixels = 544 * 544;
    } else {
        return tide_fail(st, TIDE_ERR_INVALID, "unknown shape \"%s\" for a vision tower", shape_name);
    }
    strcpy(v->model_type, "deepseek_v41_vision");
    v->present = 1;
    v->patch_size = 14;
    v->max_wh_ratio = 0;
    if (cfg->image_token_id < 0) cfg->image_token_id = 129264;
    return tide_config_check(cfg, st);
}
