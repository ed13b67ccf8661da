/* Private to the forward pass: the context, the per-step state (what the
 * reference keeps in module globals: shared_attn's compressed KV / index keys
 * / top-k / candidates) and the sub-layer entry points. */
#ifndef TIDE_MODEL_FORWARD_INTERNAL_H
#define TIDE_MODEL_FORWARD_INTERNAL_H

#include "model/forward.h"

struct tide_fwd_ctx {
    const tide_model *m;
    const tide_ops *ops;
    tide_pool *pool;
    tide_fwd_opts opt;
    tide_kv_pool kv;
};

typedef struct tide_step {
    tide_fwd_ctx *fx;
    const tide_model *m;
    const tide_ops *ops;
    tide_pool *pool;
    tide_step_seq *seqs;
    int n_seqs;
    int64_t rows;
    int64_t *seq_row0;  /* [n_seqs + 1] first row of each sequence */
    int32_t *row_seq;   /* [rows] */
    int64_t *row_pos;   /* [rows] absolute position */
    /* the latest index source's top-k: compressed positions, ascending */
    int32_t *topk;      /* [rows][index_topk] */
    int32_t *topk_n;    /* [rows] */
    /* the candidate source's blocks, expanded to positions: [rows][cand_w] */
    uint8_t *cand;
    int64_t cand_w;
    int has_cand;
    /* DSpark stage steps: the draft rows attend to the ring and to each other */
    int dspark;
    const float *dspark_main_kv; /* unused placeholder for symmetry */
} tide_step;

/* Sub-layers (x: [rows][dim] normalised input; out: [rows][dim]). */
void tide_attention(tide_step *s, int layer, const float *x, float *out);
void tide_moe(tide_step *s, const tide_ffn_weights *f, const float *x, float *out);
/* One block with its hyper-connections: h [rows][hc][dim] in/out, pre_mix
 * [rows][hc] in (the previous block's FFN pre) / out (this block's). */
typedef void (*tide_attn_fn)(tide_step *s, int layer, const float *x, float *out, void *arg);
void tide_block(tide_step *s, int layer, float *h, float *pre_mix, tide_attn_fn attn, void *arg);

/* Compressor of a KV source: pools the step's completed groups. lat gets
 * [n_new][head_dim] latents before RoPE (BF16), in sequence order; first[q]
 * / count[q] give each sequence's first new compressed position and count. */
void tide_compress(tide_step *s, int layer, const float *x, float *lat, int64_t *first,
                   int64_t *count);
/* Indexer of an index source: publishes keys from lat (if it owns them) and
 * computes the step's top-k (s->topk) and candidates. */
void tide_indexer(tide_step *s, int layer, const float *x, const float *qr, const float *lat,
                  const int64_t *first, const int64_t *count);

/* RoPE helper: rotates the last rope dims of n_vec vectors of width `width`
 * at stride `width` by position pos with the layer's frequencies. */
void tide_rope_tail(const tide_step *s, int layer, float *x, int64_t n_vec, int64_t width,
                    int64_t pos, int inverse);

void *tide_xmalloc(size_t n); /* aborts on failure: only for step scratch */

#endif
