/* The checkpoint manifest: every tensor a checkpoint must hold for a config,
 * with its exact name, stored dtype and declared shape. It is the single
 * source of truth shared by tide synth (what to write), tide inspect (what to
 * verify) and weight binding (what to expect).
 *
 * Names follow the reference module tree (inference/model.py):
 *   embed.weight, norm.weight, head.weight
 *   layers.{i}.{attn_norm,ffn_norm}.weight
 *   layers.{i}.hc_{attn,ffn}_{fn,base,scale}
 *   layers.{i}.attn.{wq_a,q_norm,wq_b,wkv,kv_norm,wo_a,wo_b}.weight (+ .scale for FP8), attn.attn_sink
 *   layers.{i}.attn.compressor.{wkv,wgate,norm}.weight            (KV sources; wgate at ratio > 1)
 *   layers.{i}.attn.indexer.{wq_b,weights_proj}.weight, wq_b.scale (index sources)
 *   layers.{i}.attn.indexer.{wk,k_norm}.weight                     (index sources that are KV sources)
 *   layers.{i}.ffn.gate.{weight,bias,bias_vl}                      (bias_vl only with a vision tower)
 *   layers.{i}.ffn.experts.{e}.{w1,w2,w3}.{weight,scale}           (FP4)
 *   layers.{i}.ffn.shared_experts.{w1,w2,w3}.{weight,scale}        (FP8)
 *   layers.{i}.engram.embed.{weight,scale}, engram.wkv.{weight,scale}, engram.{q_weight,k_weight}
 *   mtp.{s}.*  the same block tensors for DSpark stage s (no compressor,
 *              indexer or engram), plus mtp.0.main_proj.{weight,scale},
 *              mtp.0.main_norm.weight and, on the last stage, norm.weight,
 *              markov_head.{embed,head}.weight, confidence_head.proj.weight.
 * DSpark stages share embed/head with the backbone: no mtp.*.embed / head.
 * With a vision tower (vision_config.num_hidden_layers > 0), last:
 *   vision.patch_embed.proj.{weight,bias}, vision.norm.weight,
 *   vision.blocks.{l}.{norm1,norm2}.weight, attn.{wqkv,wo}.{weight,bias}, mlp.{w1,w2}.weight
 *   aligner.{w1,w2}.{weight,bias}, image_start, image_end, image_newline (docs/vision.md)
 *
 * Stored dtypes (spec §2): FP8 linears are F8_E4M3 [out, in] + F8_E8M0
 * .scale [ceil(out/32), ceil(in/32)]; routed experts F4 declared [out, in]
 * (in/2 bytes per row) + F8_E8M0 .scale [out, in/32]; engram tables F8_E4M3
 * [rows, head_dim] + F8_E8M0 .scale [rows, head_dim/32]; attn_sink, gate
 * biases and hc_* F32; everything else BF16. */
#ifndef TIDE_MODEL_MANIFEST_H
#define TIDE_MODEL_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "io/safetensors.h"
#include "model/config.h"

#define TIDE_MANIFEST_NAME 96

/* What a tensor is, for writers and binders. A weight of kind FP8_WEIGHT,
 * FP4_WEIGHT or ENGRAM_TABLE is always immediately followed by its SCALE. */
typedef enum tide_wkind {
    TIDE_WK_PLAIN = 0,     /* BF16 / F32, used as stored */
    TIDE_WK_FP8_WEIGHT,    /* F8_E4M3 [out, in], 32x32 block scales */
    TIDE_WK_FP4_WEIGHT,    /* F4 [out, in], one scale per 32 values of a row */
    TIDE_WK_ENGRAM_TABLE,  /* F8_E4M3 [rows, head_dim], one scale per 32 values of a row */
    TIDE_WK_SCALE,         /* F8_E8M0 scale of the entry before it */
} tide_wkind;

/* How tide synth fills a tensor: value = init_mean + init_std * u, with u
 * uniform of unit variance (bounded: |u| <= sqrt(3)). The numbers keep a
 * random model's activations finite and of order one through every layer
 * (linears 1/sqrt(fan_in), norms ~1, sinks and biases ~0, hc_* small). */
typedef struct tide_manifest_entry {
    char name[TIDE_MANIFEST_NAME];
    tide_dtype dtype;
    int ndim;
    int64_t shape[2];  /* declared shape (F4: counts 4-bit values) */
    uint64_t nbytes;
    int layer;         /* global layer index (DSpark stages after the backbone), -1 = top level */
    tide_wkind kind;
    float init_mean, init_std;
} tide_manifest_entry;

typedef struct tide_manifest {
    size_t n, cap;
    tide_manifest_entry *e;  /* in a fixed order: top level, then layers, then mtp stages */
    uint64_t total_bytes;
    uint64_t bytes_by_dtype[TIDE_DT_COUNT];
    size_t count_by_dtype[TIDE_DT_COUNT];
    const tide_manifest_entry **by_name; /* the entries sorted by name, for tide_manifest_find */
} tide_manifest;

/* Builds the list for a checked config. Only backbone layers below
 * cfg->present_layers are listed (all of them for a full checkpoint). */
int tide_manifest_build(const tide_config *cfg, tide_manifest *m, tide_status *st);
void tide_manifest_free(tide_manifest *m);

/* Binary search by name; NULL if absent. */
const tide_manifest_entry *tide_manifest_find(const tide_manifest *m, const char *name);

/* "layers.{i}.{suffix}" for backbone layers, "mtp.{i - num_hidden_layers}.{suffix}"
 * for DSpark stages. Fails if it does not fit. */
int tide_manifest_layer_name(const tide_config *cfg, int layer, const char *suffix, char *buf,
                             size_t cap, tide_status *st);

/* Checks that every manifest tensor is in ck with the manifest dtype and
 * shape, and that ck holds no other text-model tensor (one the config does
 * not call for means config.json and the checkpoint disagree). The first
 * problem fails with a message naming the tensor (and its file);
 * *n_missing / *n_wrong (may be NULL) count the manifest's problems and
 * *n_extra the checkpoint tensors not in the manifest (vision tower tensors
 * included, which are not an error). tide inspect and tide_model_load both
 * run it (model/checkpoint.h). */
int tide_manifest_verify(const tide_manifest *m, const tide_st *ck, size_t *n_missing,
                         size_t *n_wrong, size_t *n_extra, tide_status *st);

/* A vision tower tensor (vision.*, aligner.*, image_*): tide does not run the
 * tower, so these are counted, never required, never an error. */
int tide_manifest_is_vision(const char *name);

#endif
