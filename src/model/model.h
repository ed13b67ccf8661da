/* The model: config, weights bound by name from a checkpoint, and the
 * per-layer constants the forward pass needs (RoPE frequencies). Plain
 * structs in the llama2.c manner; big matrices are views into the mmapped
 * safetensors (tide_weight, decoded per tile by the backend), small vectors
 * (norm weights, biases, sinks, hyper-connection parameters) are copied to
 * owned f32 arrays at load.
 *
 *     tide_model *m;
 *     if (tide_model_load("/models/tiny", &m, &st) != 0) ...
 *     ... tide_forward(m, ...) (model/forward.h) ...
 *     tide_model_free(m);
 *
 * Tensor names follow the reference module tree (spec section 2); DSpark
 * stages live under mtp.{stage}. and share embed / head with the backbone. */
#ifndef TIDE_MODEL_MODEL_H
#define TIDE_MODEL_MODEL_H

#include <stdint.h>

#include "backend/ops.h"
#include "base/status.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/engram.h"

typedef struct tide_attn_weights {
    tide_weight wq_a, wq_b, wkv, wo_a, wo_b;
    float *q_norm, *kv_norm, *sink;
    /* compressor (KV sources only) */
    int has_compressor;
    tide_weight cmp_wkv, cmp_wgate; /* wgate only when ratio > 1 */
    float *cmp_norm;
    /* indexer (index sources only); wk / k_norm only when it owns its keys */
    int has_indexer;
    tide_weight idx_wq_b, idx_wproj, idx_wk;
    float *idx_k_norm;
} tide_attn_weights;

typedef struct tide_ffn_weights {
    int n_experts, top_k;
    tide_weight gate;        /* [n_experts][dim], used in f32 */
    float *bias, *bias_vl;   /* bias_vl NULL without a vision tower */
    tide_weight *w1, *w2, *w3; /* [n_experts] FP4 */
    tide_weight sw1, sw2, sw3; /* shared expert, FP8 */
} tide_ffn_weights;

typedef struct tide_layer {
    const tide_layer_role *role;
    tide_attn_weights attn;
    tide_ffn_weights ffn;
    float *attn_norm, *ffn_norm;
    float *hc_attn_fn, *hc_attn_base, *hc_attn_scale;
    float *hc_ffn_fn, *hc_ffn_base, *hc_ffn_scale;
    float *rope_freq; /* [rope_dim / 2] this layer's RoPE frequencies */
    int has_engram;
    tide_engram_weights engram;
    float *engram_qk;        /* [hc][dim] q_weight * k_weight (f32) */
    /* DSpark stage extras */
    tide_weight main_proj;   /* stage 0 */
    float *main_norm;        /* stage 0 */
    float *final_norm;       /* last stage */
    tide_weight markov_embed, markov_head, conf_proj; /* last stage */
} tide_layer;

typedef struct tide_model {
    tide_config cfg;
    tide_st *ck;
    tide_weight embed, head;
    float *norm;
    int n_layers;            /* backbone + DSpark stages bound */
    int n_backbone;
    int has_dspark;
    tide_layer *layers;
    int has_engram;
    tide_engram_tables engram;
    tide_engram_dims engram_dims;
    /* kv sources in layer order: kv_src_slot[layer] is the index of a KV
     * source among them (-1 for other layers); the cache keeps one block
     * table per slot. */
    int n_kv_src;
    int kv_src_layer[TIDE_MAX_LAYERS];
    int kv_src_slot[TIDE_MAX_LAYERS];
    /* Expert parallelism (dist/ep.h): set by the rank driver, not owned;
     * NULL = every routed expert runs here. */
    struct tide_ep *ep;
    /* owned small arrays, freed with the model */
    void **owned;
    int n_owned, cap_owned;
} tide_model;

/* Opens DIR (config.json + safetensors), checks the config, binds every
 * tensor of every layer and DSpark stage, builds the engram tables (token
 * map from DIR/tokenizer.json, or the synthetic stand-in for a synthetic
 * checkpoint without one). */
int tide_model_load(const char *dir, tide_model **out, tide_status *st);
void tide_model_free(tide_model *m);

/* The RoPE frequencies of the reference's precompute_freqs_cis (YaRN ramp
 * when original_len > 0), evaluated in double and rounded once to f32: the
 * correctly rounded value, where torch's f32 pow varies by machine (model.c).
 * freq has dim/2 entries. */
void tide_rope_freqs(int dim, int64_t original_len, double base, double factor, double beta_fast,
                     double beta_slow, float *freq);
/* cos/sin pairs of position pos for n_freq frequencies: cs[2f], cs[2f+1]. */
void tide_rope_cs(const float *freq, int n_freq, int64_t pos, float *cs);

#endif
