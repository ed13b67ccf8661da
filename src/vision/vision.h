/* The V4.1 vision encoder on the CPU: the ViT tower and the aligner, with the
 * release's semantics (docs/vision.md has them in full, with citations).
 *
 *   patches [N = n_h * n_w][3][p][p] (BF16-exact, (pixel/255 - 0.5) / 0.5)
 *     -> patch_embed (linear + bias) -> blocks (pre-RMSNorm attention with
 *        2-D RoPE, full bidirectional; pre-RMSNorm SiLU-gated MLP) -> norm
 *     -> aligner: zero-pad the n_h x n_w grid to multiples of r, concatenate
 *        each r x r cell (index c*r*r + kh*r + kw), linear + bias, exact GELU,
 *        linear + bias
 *   -> [ceil(n_h/r) * ceil(n_w/r)][text hidden] in reading order.
 *
 * The weights are views into the checkpoint (BF16, as stored); the big GEMMs
 * and the norms go through the ops table, the rest is elementwise here.
 * Every op rounds to BF16 where the reference's BF16 tensors do. */
#ifndef TIDE_VISION_VISION_H
#define TIDE_VISION_VISION_H

#include <stdint.h>

#include "backend/ops.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "vision/image.h"

typedef struct tide_vision_block {
    const float *norm1, *norm2;        /* [Dv] f32 copies */
    tide_weight wqkv, wo, w1, w2;      /* BF16 views */
    const float *bqkv, *bo;            /* [3Dv], [Dv] f32 copies */
} tide_vision_block;

typedef struct tide_vision {
    tide_vision_config cfg;
    int64_t text_dim;                  /* the aligner's output width (text hidden_size) */
    tide_weight patch;                 /* [Dv][3 p p] */
    const float *patch_b, *norm;       /* [Dv] */
    tide_vision_block *blocks;         /* num_hidden_layers */
    tide_weight a1, a2;                /* aligner [D][Dv r r], [D][D] */
    const float *a1_b, *a2_b;          /* [D] */
    const float *image_start, *image_end, *image_newline; /* [D] */
    float *owned;                      /* every f32 copy above, one allocation */
} tide_vision;

/* Binds the tower of cfg (vision_config.num_hidden_layers > 0) to the
 * checkpoint's tensors, checking each name, dtype and shape. */
int tide_vision_bind(tide_vision *v, const tide_config *cfg, const tide_st *ck, tide_status *st);
void tide_vision_free(tide_vision *v);

/* The tower alone: patches [n_h*n_w][3*p*p] -> out [n_h*n_w][Dv] (BF16-exact). */
int tide_vision_tower(const tide_vision *v, const tide_ops *ops, tide_pool *pool, const float *patches,
                      int64_t n_h, int64_t n_w, float *out, tide_status *st);

/* The aligner alone: tower output [n_h*n_w][Dv] -> out [ceil(n_h/r)*ceil(n_w/r)][D]. */
int tide_vision_align(const tide_vision *v, const tide_ops *ops, tide_pool *pool, const float *feat,
                      int64_t n_h, int64_t n_w, float *out, tide_status *st);

/* Tower then aligner (the reference's encode_image). */
int tide_vision_encode(const tide_vision *v, const tide_ops *ops, tide_pool *pool, const float *patches,
                       int64_t n_h, int64_t n_w, float *out, tide_status *st);

/* One image's prompt span as the text model's input rows (the reference's
 * merge_image_embeddings): out [tide_image_span_len(p)][D], the delimiters'
 * rows the learned image_start / image_newline / image_end, the IMAGE rows
 * the aligner's in reading order. patches as tide_image_patches makes them. */
int tide_vision_span_embeds(const tide_vision *v, const tide_ops *ops, tide_pool *pool, const float *patches,
                            const tide_image_plan *p, float *out, tide_status *st);

#endif
