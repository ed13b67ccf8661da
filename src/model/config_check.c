/* Consistency checks on a tide_config and the derivation of the per-layer
 * role table. This is the ONE place that decides what each layer does; the
 * rules mirror the reference (inference/model.py):
 *   - only backbone layers listed in kv_source_layer_ids run a compressor;
 *     the others with ratio > 0 read whatever compressed KV the stack last
 *     published, i.e. the nearest KV source at or below them;
 *   - only backbone layers in index_source_layer_ids run an indexer; the
 *     others reuse the top-k the nearest index source at or below published;
 *   - an indexer owns its keys (wk, k_norm) iff its layer is a KV source,
 *     otherwise it scores against the nearest KV source's keys;
 *   - the candidate source picks candidate blocks; index sources after it
 *     (0 <= candidate < layer) mask to them;
 *   - window-only layers rotate with rope_theta and no YaRN, layers with
 *     ratio > 0 with compress_rope_theta and YaRN;
 *   - DSpark stages are window-only blocks with their own MoE sizes.
 * Every message names the config field at fault. */
#include <stdio.h>
#include <string.h>

#include "model/config.h"
#include "num/prime.h"

#define T "text_config."

static int in_list(const int *v, int n, int x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return i;
    return -1;
}

static int check_positive(int64_t v, const char *name, tide_status *st) {
    if (v <= 0) return tide_fail(st, TIDE_ERR_INVALID, T "%s must be positive (found %lld)", name, (long long)v);
    return 0;
}

/* FP8 blocks and FP4 groups are 32 wide along the reduction dimension. */
static int check_mult32(int64_t v, const char *name, tide_status *st) {
    if (check_positive(v, name, st)) return -1;
    if (v % 32)
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "%s = %lld must be a multiple of 32 (FP8/FP4 quantisation blocks are 32 wide)",
                         name, (long long)v);
    return 0;
}

/* A layer-id list: strictly increasing, every id a backbone layer. */
static int check_layer_list(const int *v, int n, int64_t n_layers, const char *name, tide_status *st) {
    for (int i = 0; i < n; i++) {
        if (v[i] < 0 || v[i] >= n_layers)
            return tide_fail(st, TIDE_ERR_INVALID,
                             T "%s[%d] = %d is not a backbone layer (num_hidden_layers = %lld)", name, i,
                             v[i], (long long)n_layers);
        if (i > 0 && v[i] <= v[i - 1])
            return tide_fail(st, TIDE_ERR_INVALID,
                             T "%s must be strictly increasing (entry %d = %d follows %d)", name, i, v[i],
                             v[i - 1]);
    }
    return 0;
}

static int check_dims(const tide_config *cfg, tide_status *st) {
    const tide_text_config *x = &cfg->text;
    if (check_positive(x->vocab_size, "vocab_size", st) || check_mult32(x->hidden_size, "hidden_size", st) ||
        check_positive(x->num_attention_heads, "num_attention_heads", st) ||
        check_mult32(x->head_dim, "head_dim", st) || check_positive(x->qk_rope_head_dim, "qk_rope_head_dim", st) ||
        check_mult32(x->q_lora_rank, "q_lora_rank", st) || check_positive(x->o_groups, "o_groups", st) ||
        check_positive(x->o_lora_rank, "o_lora_rank", st) ||
        check_positive(x->max_position_embeddings, "max_position_embeddings", st) ||
        check_positive(x->sliding_window, "sliding_window", st) ||
        check_positive(x->index_n_heads, "index_n_heads", st) ||
        check_mult32(x->index_head_dim, "index_head_dim", st) || check_positive(x->index_topk, "index_topk", st))
        return -1;
    /* Generous bounds, so that no product of dimensions can overflow later. */
    if (x->hidden_size > (1 << 20) || x->head_dim > (1 << 16) || x->num_attention_heads > 4096 ||
        x->vocab_size > ((int64_t)1 << 31) || x->q_lora_rank > (1 << 20) || x->o_lora_rank > (1 << 20) ||
        x->index_n_heads > 4096 || x->index_head_dim > (1 << 16) || x->sliding_window > (1 << 24) ||
        x->index_topk > (1 << 24) || x->max_position_embeddings > ((int64_t)1 << 40))
        return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                         T "dimensions beyond what tide supports (hidden_size <= 2^20, head_dim <= 2^16, "
                           "heads <= 4096, vocab_size <= 2^31, ranks <= 2^20, sliding_window and index_topk "
                           "<= 2^24)");
    if (x->num_key_value_heads != 1)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                         T "num_key_value_heads = %lld: V4.1 attention has one shared K=V vector (must be 1)",
                         (long long)x->num_key_value_heads);
    if (x->qk_rope_head_dim > TIDE_MAX_ROPE_DIM)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, T "qk_rope_head_dim = %lld: tide's forward pass supports at most %d",
                         (long long)x->qk_rope_head_dim, TIDE_MAX_ROPE_DIM);
    if (x->qk_rope_head_dim % 2 || x->qk_rope_head_dim > x->head_dim || x->qk_rope_head_dim > x->index_head_dim)
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "qk_rope_head_dim = %lld must be even and fit in head_dim (%lld) and index_head_dim (%lld)",
                         (long long)x->qk_rope_head_dim, (long long)x->head_dim, (long long)x->index_head_dim);
    if (x->num_attention_heads % x->o_groups)
        return tide_fail(st, TIDE_ERR_INVALID, T "o_groups = %lld must divide num_attention_heads = %lld",
                         (long long)x->o_groups, (long long)x->num_attention_heads);
    if ((x->o_groups * x->o_lora_rank) % 32)
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "o_groups * o_lora_rank = %lld must be a multiple of 32 (input of the FP8 wo_b)",
                         (long long)(x->o_groups * x->o_lora_rank));
    if (!(x->rms_norm_eps > 0))
        return tide_fail(st, TIDE_ERR_INVALID, T "rms_norm_eps must be positive (found %g)", x->rms_norm_eps);
    /* -1: a text-only config that names no image token (config.c). */
    if (cfg->image_token_id < -1 || cfg->image_token_id >= x->vocab_size ||
        (cfg->image_token_id < 0 && cfg->vision.num_hidden_layers > 0))
        return tide_fail(st, TIDE_ERR_INVALID, "image_token_id = %lld is outside the vocabulary (%lld)",
                         (long long)cfg->image_token_id, (long long)x->vocab_size);
    return 0;
}

static int check_rope(const tide_text_config *x, tide_status *st) {
    const tide_rope_scaling *r = &x->rope_scaling;
    if (!(x->rope_theta > 0) || !(x->compress_rope_theta > 0))
        return tide_fail(st, TIDE_ERR_INVALID, T "rope_theta and compress_rope_theta must be positive");
    if (strcmp(r->rope_type, "yarn") != 0)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, T "rope_scaling.rope_type is \"%s\"; tide implements \"yarn\"",
                         r->rope_type);
    if (!(r->factor >= 1) || r->original_max_position_embeddings <= 0 || !(r->beta_fast > 0) ||
        !(r->beta_slow > 0))
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "rope_scaling needs factor >= 1, beta_fast > 0, beta_slow > 0 and "
                           "original_max_position_embeddings > 0");
    return 0;
}

static int check_moe(const tide_text_config *x, tide_status *st) {
    if (check_positive(x->n_routed_experts, "n_routed_experts", st) ||
        check_positive(x->num_experts_per_tok, "num_experts_per_tok", st) ||
        check_mult32(x->moe_intermediate_size, "moe_intermediate_size", st))
        return -1;
    if (x->n_routed_experts > 4096 || x->moe_intermediate_size > (1 << 20))
        return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                         T "n_routed_experts = %lld / moe_intermediate_size = %lld beyond what tide supports "
                           "(4096 / 2^20)",
                         (long long)x->n_routed_experts, (long long)x->moe_intermediate_size);
    if (x->num_experts_per_tok > x->n_routed_experts)
        return tide_fail(st, TIDE_ERR_INVALID, T "num_experts_per_tok = %lld exceeds n_routed_experts = %lld",
                         (long long)x->num_experts_per_tok, (long long)x->n_routed_experts);
    if (x->n_shared_experts != 1)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, T "n_shared_experts = %lld: the reference requires exactly 1",
                         (long long)x->n_shared_experts);
    if (strcmp(x->scoring_func, "sqrtsoftplus") && strcmp(x->scoring_func, "sigmoid") &&
        strcmp(x->scoring_func, "softmax"))
        return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                         T "scoring_func \"%s\" is not one of sqrtsoftplus, sigmoid, softmax", x->scoring_func);
    if (strcmp(x->topk_method, "noaux_tc") != 0)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, T "topk_method \"%s\": tide implements noaux_tc",
                         x->topk_method);
    if (!(x->routed_scaling_factor > 0) || !(x->swiglu_limit >= 0) || !(x->gate_temp > 0))
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "routed_scaling_factor and gate_temp must be positive, swiglu_limit >= 0");
    if (x->dspark_n_routed_experts < 0 || x->dspark_num_experts_per_tok < 0)
        return tide_fail(st, TIDE_ERR_INVALID, T "dspark expert counts must be >= 0 (0 = as the backbone)");
    return 0;
}

static int check_hc_quant(const tide_config *cfg, tide_status *st) {
    const tide_text_config *x = &cfg->text;
    if (x->hc_mult < 1 || x->hc_mult > 16 || x->hc_sinkhorn_iters < 1 || x->hc_sinkhorn_iters > 1000 ||
        !(x->hc_eps > 0))
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "hc_mult must be in 1..16, hc_sinkhorn_iters in 1..1000 and hc_eps positive");
    const tide_quant_config *q = &cfg->quant;
    if (strcmp(q->quant_method, "fp8") || q->weight_block_size[0] != 32 || q->weight_block_size[1] != 32 ||
        strcmp(q->scale_fmt, "ue8m0") || strcmp(q->expert_dtype, "fp4"))
        return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                         "quantization_config must be quant_method \"fp8\", weight_block_size [32, 32], "
                         "scale_fmt \"ue8m0\", expert_dtype \"fp4\" (found \"%s\", [%d, %d], \"%s\", \"%s\")",
                         q->quant_method, q->weight_block_size[0], q->weight_block_size[1], q->scale_fmt,
                         q->expert_dtype);
    const tide_vision_config *v = &cfg->vision;
    if (v->num_hidden_layers < 0)
        return tide_fail(st, TIDE_ERR_INVALID, "vision_config.num_hidden_layers must be >= 0");
    /* With a tower, the shapes src/vision runs (docs/vision.md): whole heads
     * of a width divisible by 4 (2-D RoPE rotates half of each head, split
     * between rows and columns), and bounds that keep every size in range. */
    if (v->num_hidden_layers > 0 &&
        (v->num_hidden_layers > 256 || v->hidden_size < 4 || v->hidden_size > 65536 || v->num_attention_heads < 1 ||
         v->hidden_size % v->num_attention_heads || (v->hidden_size / v->num_attention_heads) % 4 ||
         v->intermediate_size < 1 || v->intermediate_size > 262144 || v->patch_size < 1 || v->patch_size > 64 ||
         v->downsample_ratio < 1 || v->downsample_ratio > 16 || v->max_image_tokens < 3 ||
         v->max_image_tokens > 65536 || v->min_pixels < 0 || v->min_pixels > ((int64_t)1 << 28) ||
         v->max_wh_ratio < 0 || v->max_wh_ratio > 1000 || !(v->rope_theta > 1.0)))
        return tide_fail(st, TIDE_ERR_INVALID,
                         "vision_config: num_hidden_layers %lld (1..256), hidden_size %lld / num_attention_heads "
                         "%lld (head width a multiple of 4), intermediate_size %lld, patch_size %lld (1..64), "
                         "downsample_ratio %lld (1..16), max_image_tokens %lld (3..65536), min_pixels %lld, "
                         "max_wh_ratio %lld, rope_theta %g: out of range",
                         (long long)v->num_hidden_layers, (long long)v->hidden_size,
                         (long long)v->num_attention_heads, (long long)v->intermediate_size,
                         (long long)v->patch_size, (long long)v->downsample_ratio, (long long)v->max_image_tokens,
                         (long long)v->min_pixels, (long long)v->max_wh_ratio, v->rope_theta);
    return 0;
}

/* Layer lists and the compress ratios. */
static int check_layers(const tide_config *cfg, tide_status *st) {
    const tide_text_config *x = &cfg->text;
    int64_t L = x->num_hidden_layers, M = x->num_nextn_predict_layers;
    if (L < 1 || M < 0 || L > TIDE_MAX_LAYERS || M > TIDE_MAX_LAYERS || L + M > TIDE_MAX_LAYERS)
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "num_hidden_layers = %lld and num_nextn_predict_layers = %lld: need >= 1 and >= 0, "
                           "at most %d layers in all",
                         (long long)L, (long long)M, TIDE_MAX_LAYERS);
    if (x->n_compress_ratios != L + M)
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "compress_ratios has %d entries; expected num_hidden_layers + "
                           "num_nextn_predict_layers = %lld",
                         x->n_compress_ratios, (long long)(L + M));
    for (int i = 0; i < x->n_compress_ratios; i++) {
        int r = x->compress_ratios[i];
        if (r < 0 || r > TIDE_MAX_COMPRESS_RATIO)
            return tide_fail(st, r < 0 ? TIDE_ERR_INVALID : TIDE_ERR_UNSUPPORTED,
                             T "compress_ratios[%d] = %d must be in 0..%d (the forward pass holds one partial "
                               "group of at most that many tokens per sequence)",
                             i, r, TIDE_MAX_COMPRESS_RATIO);
        if (i >= L && r != 0)
            return tide_fail(st, TIDE_ERR_INVALID,
                             T "compress_ratios[%d] = %d: layer %d is DSpark stage %lld, which must be "
                               "window-only (ratio 0)",
                             i, r, i, (long long)(i - L));
    }
    if (check_layer_list(x->kv_source_layer_ids, x->n_kv_source_layer_ids, L, "kv_source_layer_ids", st) ||
        check_layer_list(x->index_source_layer_ids, x->n_index_source_layer_ids, L, "index_source_layer_ids",
                         st) ||
        check_layer_list(x->engram_layer_ids, x->n_engram_layer_ids, L, "engram_layer_ids", st))
        return -1;
    for (int i = 0; i < x->n_kv_source_layer_ids; i++)
        if (x->compress_ratios[x->kv_source_layer_ids[i]] == 0)
            return tide_fail(st, TIDE_ERR_INVALID,
                             T "kv_source_layer_ids[%d] = %d has compress ratio 0: a KV source must compress", i,
                             x->kv_source_layer_ids[i]);
    for (int i = 0; i < x->n_index_source_layer_ids; i++)
        if (x->compress_ratios[x->index_source_layer_ids[i]] == 0)
            return tide_fail(st, TIDE_ERR_INVALID,
                             T "index_source_layer_ids[%d] = %d has compress ratio 0: an index source must compress",
                             i, x->index_source_layer_ids[i]);
    return 0;
}

static int check_candidates(const tide_text_config *x, tide_status *st) {
    int64_t c = x->candidate_source_layer_id;
    if (c < 0) {
        if (c != -1)
            return tide_fail(st, TIDE_ERR_INVALID, T "candidate_source_layer_id = %lld: use -1 to turn it off",
                             (long long)c);
        return 0;
    }
    if (in_list(x->index_source_layer_ids, x->n_index_source_layer_ids, (int)c) < 0 || c >= x->num_hidden_layers)
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "candidate_source_layer_id = %lld is not in index_source_layer_ids", (long long)c);
    if (x->candidate_topk_blocks < 1 || x->candidate_block_size < 1 || x->candidate_topk_blocks > (1 << 24) ||
        x->candidate_block_size > (1 << 16))
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "candidate_topk_blocks (1..2^24) and candidate_block_size (1..2^16) must be set with a "
                           "candidate source");
    /* Later index sources mask their scores with the candidate source's mask,
     * which is laid over its compressed positions: same ratio or the mask means nothing. */
    for (int i = 0; i < x->n_index_source_layer_ids; i++) {
        int l = x->index_source_layer_ids[i];
        if (l > c && x->compress_ratios[l] != x->compress_ratios[c])
            return tide_fail(st, TIDE_ERR_INVALID,
                             T "index source %d (ratio %d) comes after candidate source %lld (ratio %d) and would "
                               "mask to its candidates; the ratios must match",
                             l, x->compress_ratios[l], (long long)c, x->compress_ratios[c]);
    }
    return 0;
}

/* Bucket primes (reference EngramLayout.from_args): for each layer and n-gram
 * size, n_heads primes; each is the smallest prime above `cur` not handed
 * out yet, where `cur` restarts at engram_vocab_size - 1 for every n-gram
 * size and then follows the head's own prime. The primes handed out so far
 * are always all the primes from engram_vocab_size up to the largest one (by
 * induction), so "smallest unseen prime above cur" is "smallest prime above
 * max(cur, largest handed out)": in effect consecutive primes, found here
 * without the reference's quadratic search. tests/test_engram.c checks this
 * against a literal transcription of that search. This is the one place the
 * list is computed: model/engram.c builds its tables from it. */
int tide_config_engram_primes(const tide_config *cfg, int64_t *primes, int cap, tide_status *st) {
    const tide_text_config *x = &cfg->text;
    if (x->engram_max_ngram_size < 1 || x->engram_max_ngram_size > 64 || x->engram_n_heads < 0 ||
        x->engram_n_heads > 4096 || x->n_engram_layer_ids < 0 || x->n_engram_layer_ids > TIDE_MAX_ENGRAM_LAYERS)
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "engram_max_ngram_size = %lld or engram_n_heads = %lld is out of range for the engram "
                           "bucket primes",
                         (long long)x->engram_max_ngram_size, (long long)x->engram_n_heads);
    int64_t per = (x->engram_max_ngram_size - 1) * x->engram_n_heads;
    int64_t total = per * x->n_engram_layer_ids;
    /* 2^40 keeps a layer's sum of primes (its table rows) far inside int64. */
    if (per < 0 || total > cap || x->engram_vocab_size < 1 || x->engram_vocab_size > ((int64_t)1 << 40))
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "engram bucket primes: need %lld slots (have %d) and 1 <= engram_vocab_size <= 2^40 "
                           "(found %lld)",
                         (long long)total, cap, (long long)x->engram_vocab_size);
    int64_t largest = 0;
    int k = 0;
    for (int layer = 0; layer < x->n_engram_layer_ids; layer++)
        for (int64_t n = 0; n < x->engram_max_ngram_size - 1; n++) {
            int64_t cur = x->engram_vocab_size - 1;
            for (int64_t h = 0; h < x->engram_n_heads; h++) {
                uint64_t from = (uint64_t)(cur > largest ? cur : largest);
                primes[k++] = cur = largest = (int64_t)tide_next_prime_u64(from);
            }
        }
    return 0;
}

#define MAX_PRIMES 4096

static int check_engram(const tide_text_config *x, const tide_config *cfg, tide_status *st) {
    if (x->n_engram_num_embeddings != x->n_engram_layer_ids)
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "engram_num_embeddings has %d entries but engram_layer_ids has %d",
                         x->n_engram_num_embeddings, x->n_engram_layer_ids);
    if (x->n_engram_layer_ids == 0) return 0;
    if (x->engram_max_ngram_size < 2 || x->engram_max_ngram_size > 16 || x->engram_n_heads < 1 ||
        x->engram_n_heads > 256)
        return tide_fail(st, TIDE_ERR_INVALID, T "engram_max_ngram_size must be in 2..16 and engram_n_heads in 1..256");
    if (x->engram_head_dim > (1 << 16) || x->engram_compressed_vocab_size > ((int64_t)1 << 31))
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, T "engram_head_dim <= 2^16 and engram_compressed_vocab_size <= 2^31");
    if (check_mult32(x->engram_head_dim, "engram_head_dim", st) ||
        check_positive(x->engram_compressed_vocab_size, "engram_compressed_vocab_size", st))
        return -1;
    if (x->engram_pad_token_id < 0 || x->engram_pad_token_id >= x->vocab_size)
        return tide_fail(st, TIDE_ERR_INVALID, T "engram_pad_token_id = %lld is outside the vocabulary",
                         (long long)x->engram_pad_token_id);
    int64_t primes[MAX_PRIMES];
    if (tide_config_engram_primes(cfg, primes, MAX_PRIMES, st)) return -1; /* its message names the field */
    int per = (int)((x->engram_max_ngram_size - 1) * x->engram_n_heads);
    for (int l = 0; l < x->n_engram_layer_ids; l++) {
        int64_t sum = 0;
        for (int j = 0; j < per; j++) sum += primes[l * per + j];
        if (sum != x->engram_num_embeddings[l])
            return tide_fail(st, TIDE_ERR_INVALID,
                             T "engram_num_embeddings[%d] = %lld, but the hash buckets of engram layer %d need "
                               "%lld rows (sum of its %d primes above engram_vocab_size - 1)",
                             l, (long long)x->engram_num_embeddings[l], x->engram_layer_ids[l], (long long)sum,
                             per);
    }
    return 0;
}

static int check_dspark(const tide_text_config *x, tide_status *st) {
    if (x->num_nextn_predict_layers == 0) return 0;
    if (x->dspark_block_size < 1 || x->dspark_block_size > 64)
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "dspark_block_size = %lld must be in 1..64 with DSpark stages present",
                         (long long)x->dspark_block_size);
    if (x->n_dspark_target_layer_ids < 1)
        return tide_fail(st, TIDE_ERR_INVALID, T "dspark_target_layer_ids is empty but DSpark stages are present");
    if (check_layer_list(x->dspark_target_layer_ids, x->n_dspark_target_layer_ids, x->num_hidden_layers,
                         "dspark_target_layer_ids", st) ||
        check_positive(x->dspark_markov_rank, "dspark_markov_rank", st))
        return -1;
    if (x->dspark_noise_token_id < 0 || x->dspark_noise_token_id >= x->vocab_size)
        return tide_fail(st, TIDE_ERR_INVALID, T "dspark_noise_token_id = %lld is outside the vocabulary",
                         (long long)x->dspark_noise_token_id);
    int64_t ne = x->dspark_n_routed_experts ? x->dspark_n_routed_experts : x->n_routed_experts;
    int64_t nk = x->dspark_num_experts_per_tok ? x->dspark_num_experts_per_tok : x->num_experts_per_tok;
    if (ne > 4096 || x->dspark_markov_rank > (1 << 20))
        return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                         T "dspark_n_routed_experts <= 4096 and dspark_markov_rank <= 2^20 are supported");
    if (nk > ne)
        return tide_fail(st, TIDE_ERR_INVALID,
                         T "dspark_num_experts_per_tok = %lld exceeds dspark_n_routed_experts = %lld", (long long)nk,
                         (long long)ne);
    return 0;
}

/* Nearest entry of list at or below layer, or -1. */
static int nearest_at_or_below(const int *v, int n, int layer) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (v[i] <= layer) best = v[i];
    return best;
}

static int derive_roles(tide_config *cfg, tide_status *st) {
    const tide_text_config *x = &cfg->text;
    int L = (int)x->num_hidden_layers;
    cfg->n_layers = L + (int)x->num_nextn_predict_layers;
    for (int i = 0; i < cfg->n_layers; i++) {
        tide_layer_role *r = &cfg->roles[i];
        memset(r, 0, sizeof *r);
        r->layer = i;
        r->is_dspark = i >= L;
        r->dspark_stage = r->is_dspark ? i - L : -1;
        r->compress_ratio = x->compress_ratios[i];
        r->kv_source = r->index_source = r->index_key_source = -1;
        r->engram_index = r->dspark_target_index = -1;
        r->rope_theta = r->compress_ratio ? x->compress_rope_theta : x->rope_theta;
        r->yarn = r->compress_ratio > 0;
        if (r->is_dspark) {
            r->n_routed_experts = (int)(x->dspark_n_routed_experts ? x->dspark_n_routed_experts : x->n_routed_experts);
            r->num_experts_per_tok =
                (int)(x->dspark_num_experts_per_tok ? x->dspark_num_experts_per_tok : x->num_experts_per_tok);
            continue;
        }
        r->n_routed_experts = (int)x->n_routed_experts;
        r->num_experts_per_tok = (int)x->num_experts_per_tok;
        r->engram_index = in_list(x->engram_layer_ids, x->n_engram_layer_ids, i);
        r->has_engram = r->engram_index >= 0;
        r->dspark_target_index = in_list(x->dspark_target_layer_ids, x->n_dspark_target_layer_ids, i);
        r->is_dspark_target = r->dspark_target_index >= 0 && x->num_nextn_predict_layers > 0;
        if (!r->is_dspark_target) r->dspark_target_index = -1;
        if (r->compress_ratio == 0) continue;

        r->is_kv_source = in_list(x->kv_source_layer_ids, x->n_kv_source_layer_ids, i) >= 0;
        r->kv_source = nearest_at_or_below(x->kv_source_layer_ids, x->n_kv_source_layer_ids, i);
        if (r->kv_source < 0)
            return tide_fail(st, TIDE_ERR_INVALID,
                             T "layer %d has compress ratio %d but no KV source at or below it "
                               "(kv_source_layer_ids)",
                             i, r->compress_ratio);
        if (x->compress_ratios[r->kv_source] != r->compress_ratio)
            return tide_fail(st, TIDE_ERR_INVALID,
                             T "layer %d (ratio %d) would read the compressed KV of layer %d (ratio %d), the "
                               "nearest KV source at or below it; the ratios must match",
                             i, r->compress_ratio, r->kv_source, x->compress_ratios[r->kv_source]);
        r->is_index_source = in_list(x->index_source_layer_ids, x->n_index_source_layer_ids, i) >= 0;
        r->index_source = nearest_at_or_below(x->index_source_layer_ids, x->n_index_source_layer_ids, i);
        if (r->index_source < 0 || cfg->roles[r->index_source].kv_source != r->kv_source)
            return tide_fail(st, TIDE_ERR_INVALID,
                             T "layer %d reads the compressed KV of layer %d but the nearest index source at or "
                               "below it (%d) selects positions of %s; every KV source's group needs its own "
                               "index source (index_source_layer_ids)",
                             i, r->kv_source, r->index_source,
                             r->index_source < 0 ? "nothing" : "another KV source");
        if (r->is_index_source) {
            r->index_key_source = r->kv_source;
            r->indexer_owns_keys = r->is_kv_source;
            r->is_candidate_source = x->candidate_source_layer_id == i;
            r->uses_candidates = x->candidate_source_layer_id >= 0 && x->candidate_source_layer_id < i;
        }
    }
    return 0;
}

int tide_config_check(tide_config *cfg, tide_status *st) {
    const tide_text_config *x = &cfg->text;
    if (check_dims(cfg, st) || check_rope(x, st) || check_moe(x, st) || check_hc_quant(cfg, st) ||
        check_layers(cfg, st) || check_candidates(x, st) || check_engram(x, cfg, st) || check_dspark(x, st) ||
        derive_roles(cfg, st))
        return -1;
    cfg->present_layers = (int)x->num_hidden_layers;
    if (cfg->synth.is_synthetic) {
        if (cfg->synth.written_layers < 1 || cfg->synth.written_layers > x->num_hidden_layers)
            return tide_fail(st, TIDE_ERR_INVALID,
                             "tide_synthetic.written_layers = %lld must be in 1..num_hidden_layers (%lld)",
                             (long long)cfg->synth.written_layers, (long long)x->num_hidden_layers);
        cfg->present_layers = (int)cfg->synth.written_layers;
    }
    return 0;
}

const tide_layer_role *tide_config_role(const tide_config *cfg, int layer) {
    if (!cfg || layer < 0 || layer >= cfg->n_layers) return NULL;
    return &cfg->roles[layer];
}

const char *tide_layer_role_describe(const tide_layer_role *r, char *buf, int cap) {
    if (cap <= 0) return buf;
    int n = 0;
    buf[0] = 0;
#define ADD(...)                                                               \
    do {                                                                       \
        if (n < cap) {                                                         \
            int k = snprintf(buf + n, (size_t)(cap - n), __VA_ARGS__);         \
            if (k > 0) n += k;                                                 \
        }                                                                      \
    } while (0)
    if (r->is_dspark) ADD("dspark-%d ", r->dspark_stage);
    if (r->compress_ratio == 0) ADD("window-only");
    else {
        if (r->is_kv_source) ADD("kv-source");
        else ADD("kv<-%d", r->kv_source);
        if (r->is_index_source) {
            if (r->indexer_owns_keys) ADD(" indexer");
            else ADD(" indexer(keys<-%d)", r->index_key_source);
        } else {
            ADD(" topk<-%d", r->index_source);
        }
        if (r->is_candidate_source) ADD(" candidate-source");
        if (r->uses_candidates) ADD(" masks-to-candidates");
    }
    if (r->has_engram) ADD(" engram");
    if (r->is_dspark_target) ADD(" dspark-target");
#undef ADD
    return buf;
}
