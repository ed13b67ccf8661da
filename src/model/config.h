/* The model description: every number tide needs from a checkpoint's HF-style
 * config.json (top level + text_config + quantization_config + vision_config),
 * the consistency checks that make a config safe to run, and the per-layer
 * role table derived from it in ONE place (tide_config_check fills roles[]).
 *
 * Field names are the HF names (snake_case) of the released config.json;
 * nested objects become nested structs: cfg.text.hidden_size is
 * config.json's text_config.hidden_size, cfg.quant.* is quantization_config,
 * cfg.vision.* is vision_config. The reference's flat names (dim, n_layers,
 * window_size, ...) are listed next to each field for readers of model.py.
 *
 * Loading rules: every field the model needs is required. An absent field, a
 * field of the wrong JSON type or an inconsistent value is an error whose
 * message names the field ("config.json: text_config.hidden_size is missing").
 * Optional (docs/model-config.md): what the reference's ModelArgs never reads
 * (model_type, topk_method, rope_scaling.rope_type, num_key_value_heads,
 * vision_config as a whole, image_token_id without a vision tower) and
 * text_config.gate_temp, which the reference defaults to 1.0.
 *
 * Layer numbering: backbone layers are 0 .. num_hidden_layers-1; the DSpark
 * draft stages follow as layers num_hidden_layers .. +num_nextn_predict_layers-1
 * (stored under mtp.{stage}.*), exactly as the reference numbers them. */
#ifndef TIDE_MODEL_CONFIG_H
#define TIDE_MODEL_CONFIG_H

#include <stdint.h>

#include "base/status.h"

#define TIDE_MAX_LAYERS 256      /* backbone + DSpark stages */
#define TIDE_MAX_ENGRAM_LAYERS 16
#define TIDE_MAX_DSPARK_TARGETS 16
#define TIDE_CONFIG_STR 64
/* Limits of tide's forward pass, checked by tide_config_check (so tide
 * inspect and tide run refuse the same configs, naming the field) and relied
 * on by model/forward.c: a sequence holds one partial compressor group of at
 * most TIDE_MAX_COMPRESS_RATIO tokens; RoPE tables hold TIDE_MAX_ROPE_DIM dims. */
#define TIDE_MAX_COMPRESS_RATIO 64
#define TIDE_MAX_ROPE_DIM 512

/* One layer's job, derived from the config by tide_config_check. For a
 * layer with compress_ratio 0 every source field is -1 and every flag 0. */
typedef struct tide_layer_role {
    int layer;          /* global index: backbone i, or num_hidden_layers + stage */
    int is_dspark;      /* a DSpark draft stage (tensors under mtp.{dspark_stage}.) */
    int dspark_stage;   /* 0.. for DSpark stages, -1 for backbone layers */

    int compress_ratio; /* compress_ratios[layer]: 0 = window only, r = r tokens per latent */

    /* Compressed KV (reference: Attention.is_kv_source / shared_attn.compress_kv).
     * A KV source runs the compressor and owns the compressed KV cache (and
     * its index keys); every other layer with ratio > 0 reads the cache of the
     * nearest KV source at or below it (the last one the stack ran). */
    int is_kv_source;
    int kv_source;      /* layer whose compressed KV this layer attends to (itself if source) */

    /* Indexer (reference: Attention.is_index_source / shared_attn.topk_idxs).
     * An index source runs an indexer and publishes its top-k; every other
     * layer with ratio > 0 reuses the top-k of the nearest index source at or
     * below it. */
    int is_index_source;
    int index_source;   /* layer whose top-k this layer uses (itself if index source) */
    /* For index sources: the KV source whose index keys the indexer scores
     * against (the nearest KV source at or below; == layer when the indexer
     * owns its keys, i.e. has wk/k_norm: reference Indexer.owns_k). -1 otherwise. */
    int index_key_source;
    int indexer_owns_keys;

    /* Two-level top-k (reference: Indexer.is_candidate_source / uses_candidates).
     * Only index sources have these flags. */
    int is_candidate_source; /* picks candidate_topk_blocks blocks of candidate_block_size */
    int uses_candidates;     /* index source after the candidate source: masks its scores to them */

    int has_engram;     /* engram applied before the block */
    int engram_index;   /* position in engram_layer_ids (table / hash row), -1 if none */

    int is_dspark_target;     /* its block INPUT (mean over hc copies) feeds DSpark */
    int dspark_target_index;  /* position in dspark_target_layer_ids, -1 if none */

    /* RoPE: window-only layers use rope_theta without YaRN; layers with
     * ratio > 0 use compress_rope_theta with YaRN (rope_scaling). */
    double rope_theta;
    int yarn;

    /* MoE of this layer (DSpark stages have their own expert counts). */
    int n_routed_experts;
    int num_experts_per_tok;
} tide_layer_role;

typedef struct tide_rope_scaling {
    char rope_type[TIDE_CONFIG_STR];          /* "yarn" (required) */
    double factor;                            /* rope_factor */
    double beta_fast;
    double beta_slow;
    int64_t original_max_position_embeddings; /* original_seq_len */
} tide_rope_scaling;

typedef struct tide_text_config {
    char model_type[TIDE_CONFIG_STR];   /* "deepseek_v41_text"; optional ("" when absent) */
    int64_t vocab_size;
    int64_t hidden_size;                /* dim */
    int64_t num_hidden_layers;          /* n_layers (backbone only) */
    int64_t num_attention_heads;        /* n_heads */
    int64_t num_key_value_heads;        /* must be 1 (one shared K=V vector) */
    int64_t head_dim;
    int64_t qk_rope_head_dim;           /* rope_head_dim: RoPE on the LAST dims */
    int64_t q_lora_rank;
    int64_t o_groups;
    int64_t o_lora_rank;
    int64_t max_position_embeddings;
    double rms_norm_eps;                /* norm_eps */

    int64_t sliding_window;             /* window_size */
    int n_compress_ratios;
    int compress_ratios[TIDE_MAX_LAYERS];   /* one per layer incl. DSpark stages */
    int n_kv_source_layer_ids;
    int kv_source_layer_ids[TIDE_MAX_LAYERS];   /* kv_source_layers */
    int n_index_source_layer_ids;
    int index_source_layer_ids[TIDE_MAX_LAYERS]; /* index_source_layers */
    int64_t candidate_source_layer_id;  /* candidate_source_layer; -1 = off */
    int64_t candidate_topk_blocks;
    int64_t candidate_block_size;
    int64_t index_n_heads;
    int64_t index_head_dim;
    int64_t index_topk;

    double rope_theta;
    double compress_rope_theta;
    tide_rope_scaling rope_scaling;

    int64_t n_routed_experts;
    int64_t num_experts_per_tok;        /* n_activated_experts */
    int64_t n_shared_experts;           /* must be 1 */
    int64_t moe_intermediate_size;      /* moe_inter_dim */
    char scoring_func[TIDE_CONFIG_STR]; /* score_func: softmax | sigmoid | sqrtsoftplus */
    char topk_method[TIDE_CONFIG_STR];  /* noaux_tc */
    double routed_scaling_factor;       /* route_scale */
    int norm_topk_prob;                 /* JSON bool */
    double swiglu_limit;
    double gate_temp;                   /* optional, 1.0 when absent (see header comment) */

    int64_t hc_mult;
    int64_t hc_sinkhorn_iters;
    double hc_eps;

    int n_engram_layer_ids;
    int engram_layer_ids[TIDE_MAX_ENGRAM_LAYERS];
    int n_engram_num_embeddings;
    int64_t engram_num_embeddings[TIDE_MAX_ENGRAM_LAYERS]; /* rows per table = sum of its primes */
    int64_t engram_max_ngram_size;
    int64_t engram_n_heads;
    int64_t engram_head_dim;
    int64_t engram_vocab_size;
    int64_t engram_compressed_vocab_size;
    int64_t engram_pad_token_id;        /* engram_pad_id */

    int64_t num_nextn_predict_layers;   /* n_mtp_layers: DSpark stages */
    int64_t dspark_block_size;
    int n_dspark_target_layer_ids;
    int dspark_target_layer_ids[TIDE_MAX_DSPARK_TARGETS];
    int64_t dspark_markov_rank;
    int64_t dspark_noise_token_id;
    int64_t dspark_n_routed_experts;
    int64_t dspark_num_experts_per_tok; /* dspark_n_activated_experts */
} tide_text_config;

typedef struct tide_quant_config {
    char quant_method[TIDE_CONFIG_STR]; /* "fp8" */
    int weight_block_size[2];           /* [32, 32] */
    char scale_fmt[TIDE_CONFIG_STR];    /* "ue8m0" */
    char expert_dtype[TIDE_CONFIG_STR]; /* "fp4" */
} tide_quant_config;

/* Kept minimal: tide does not run the vision tower yet; these are read so a
 * checkpoint's config is fully validated and written back faithfully.
 * num_hidden_layers == 0 means "no vision tower" (reference vision_enabled). */
typedef struct tide_vision_config {
    char model_type[TIDE_CONFIG_STR];   /* "deepseek_v41_vision" */
    int64_t num_hidden_layers;
    int64_t hidden_size;
    int64_t num_attention_heads;
    int64_t intermediate_size;
    int64_t patch_size;
    double rope_theta;
    int64_t downsample_ratio;
    int64_t max_image_tokens;
    int64_t min_pixels;
    int64_t max_wh_ratio;               /* JSON null -> 0 (no limit) */
    int present;                        /* vision_config was in config.json (absent: no tower) */
} tide_vision_config;

/* Written by tide synth under config.json's "tide_synthetic" object; absent in
 * real checkpoints (is_synthetic 0). */
typedef struct tide_synth_meta {
    int is_synthetic;
    char shape[TIDE_CONFIG_STR];
    uint64_t seed;
    /* Backbone layers whose tensors are present: num_hidden_layers unless the
     * checkpoint was written with --layers N (then only layers 0..N-1 + the
     * DSpark stages exist; such a checkpoint cannot run a forward pass). */
    int64_t written_layers;
    /* tide_synthetic.engram_token_map: "synthetic" (1) when synth wrote no
     * tokenizer.json and the engram layers use tide's stand-in token map;
     * "tokenizer" (0, also when absent) when DIR/tokenizer.json is required. */
    int synthetic_token_map;
} tide_synth_meta;

typedef struct tide_config {
    char model_type[TIDE_CONFIG_STR];   /* "deepseek_v41"; optional ("" when absent) */
    int64_t image_token_id;             /* top-level; required with a vision tower, else -1 when absent */
    tide_text_config text;
    tide_quant_config quant;
    tide_vision_config vision;
    tide_synth_meta synth;

    /* Derived by tide_config_check (never read from JSON). */
    int n_layers;                       /* num_hidden_layers + num_nextn_predict_layers */
    tide_layer_role roles[TIDE_MAX_LAYERS];
    int present_layers;                 /* backbone layers with tensors (synth.written_layers or all) */
} tide_config;

/* Reads DIR/config.json (or the file itself when path is a regular file),
 * then runs tide_config_check. */
int tide_config_load(const char *path_or_dir, tide_config *cfg, tide_status *st);
/* Parses a config.json text (NUL-terminated); `origin` names it in messages
 * (e.g. "config.json" or a path). Runs tide_config_check. */
int tide_config_from_json_text(const char *text, const char *origin, tide_config *cfg,
                               tide_status *st);
/* Consistency checks and the derivation of roles[] / n_layers / present_layers.
 * Idempotent; call again after editing fields by hand. */
int tide_config_check(tide_config *cfg, tide_status *st);

/* Named shapes for synthetic checkpoints: "tiny", "small", "flash",
 * "flash-ep8". Fills cfg (already checked). */
int tide_config_preset(const char *shape_name, tide_config *cfg, tide_status *st);
/* Turns cfg into the reference's text-only layout (what inference/model.py
 * builds with vision disabled): no vision_config, no image_token_id, no
 * model_type names (the reference reads none of them). No vision tower means
 * no ffn.gate.bias_vl either (model/manifest.h). Runs tide_config_check. */
int tide_config_drop_vision(tide_config *cfg, tide_status *st);
/* Gives cfg (a preset of that shape) a vision tower of the shape's width:
 * the released one for flash and flash-ep8, toy widths for tiny and small
 * (docs/vision.md). Runs tide_config_check. */
int tide_config_preset_vision(const char *shape_name, tide_config *cfg, tide_status *st);
/* NULL-terminated list of preset names. */
const char *const *tide_config_preset_names(void);

/* Writes cfg as an HF-form config.json (nested text_config etc., plus
 * "tide_synthetic" when cfg->synth.is_synthetic). */
int tide_config_write_json(const tide_config *cfg, const char *path, tide_status *st);
/* Same, into a malloc'd NUL-terminated string (caller frees). */
int tide_config_to_json_text(const tide_config *cfg, char **text, tide_status *st);

/* Role of layer i (0 <= i < cfg->n_layers), NULL when out of range. */
const tide_layer_role *tide_config_role(const tide_config *cfg, int layer);

/* Engram bucket primes, in the reference's order: for each engram layer k,
 * for each n-gram size n = 2..max_ngram_size, engram_n_heads primes. Writes
 * n_engram_layer_ids * (max_ngram_size-1) * engram_n_heads values into
 * primes (capacity `cap`). Primes are the smallest not yet handed out above
 * engram_vocab_size - 1 (restarting the search per n-gram size). */
int tide_config_engram_primes(const tide_config *cfg, int64_t *primes, int cap,
                              tide_status *st);

/* Short human-readable description of a layer role ("kv-src idx-src cand"),
 * into buf. Returns buf. */
const char *tide_layer_role_describe(const tide_layer_role *r, char *buf, int cap);

#endif
