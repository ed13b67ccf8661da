/* Private to the forward pass: the context, the per-step state (what the
 * reference keeps in module globals: shared_attn's compressed KV / index keys
 * / top-k / candidates) and the sub-layer entry points. */
#ifndef TIDE_MODEL_FORWARD_INTERNAL_H
#define TIDE_MODEL_FORWARD_INTERNAL_H

#include "model/forward.h"

/* The step's activation buffers, in the backend's memory (ops->alloc):
 * sized for the largest step so far by tide_fwd_reserve, never freed
 * between steps. Only ops touch them. */
enum {
    FB_H = 0,   /* [rows][hc][dim] the residual stream */
    FB_PRE_MIX, /* [rows][hc] the previous sub-layer's pre coefficients */
    FB_PRE,     /* [rows][hc] */
    FB_POST,    /* [rows][hc] */
    FB_COMB,    /* [rows][hc][hc] */
    FB_X,       /* [rows][dim] a sub-layer's normalised input */
    FB_Y,       /* [rows][dim] a sub-layer's output */
    FB_RES,     /* [rows][hc][dim] the residual copy (and the rows' compaction scratch) */
    FB_GATE,    /* [rows][max experts] router logits */
    FB_ACC,     /* [rows][dim] routed experts' f32 sum */
    FB_XE,      /* [rows][dim] one expert's rows */
    FB_YE,      /* [rows][dim] their outputs */
    FB_WE,      /* [rows] their routing weights */
    FB_G,       /* [rows][max inter] */
    FB_U,       /* [rows][max inter] */
    FB_EKV,     /* [rows][(hc+1)*dim] the engram layer's keys and value */
    FB_COUNT
};

struct tide_fwd_ctx {
    const tide_model *m;
    const tide_ops *ops;
    tide_pool *pool;
    tide_fwd_opts opt;
    tide_kv_pool kv;
    void *buf[FB_COUNT];
    float *host_x, *host_y; /* [buf_rows][dim] host copies for the attention sub-layer (hc.c) */
    int64_t buf_rows;       /* rows the buffers hold */
};

/* Grows the activation buffers to hold a step of `rows` rows (no-op when
 * they already do). 0, or -1 when the backend is out of memory. */
int tide_fwd_reserve(tide_fwd_ctx *fx, int64_t rows, tide_status *st);

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
    /* Per sequence: the position of its first row in this step (cache->pos,
     * or later once the decoder variant has dropped rows) and the position
     * below which the current layer has no window entries (ring_lo, or
     * tail_lo above the last KV source). */
    int64_t *seq_pos0;
    int64_t *win_lo;
    /* Per sequence: its rows compute what one-token steps would (an active
     * checkpoint with decode_rows: forward.h), and its published layer
     * before the step (what those rows' republish rule starts from). */
    uint8_t *dec;
    int32_t *pub0;
    /* the latest index source's top-k: compressed positions, ascending, then
     * -1 for picks the query cannot see (the reference's layout: its
     * trailing -1 entries change where the softmax sums' zeros fall) */
    int32_t *topk;      /* [rows][index_topk] */
    int32_t *topk_n;    /* [rows] entries, -1s included */
    int32_t *topk_valid; /* [rows] entries before the first -1 */
    /* the candidate source's blocks, expanded to positions: [rows][cand_w] */
    uint8_t *cand;
    int64_t cand_w;
    int has_cand;
    const tide_step_image *img; /* [n_seqs] image spans, NULL: all text */
    uint8_t *row_img;   /* [rows] 1: an image-span position (bias_vl); NULL: all text */
} tide_step;

/* Sub-layers (x: [rows][dim] normalised input; out: [rows][dim]). */
void tide_attention(tide_step *s, int layer, const float *x, float *out);
void tide_moe(tide_step *s, const tide_ffn_weights *f, const float *x, float *out);
/* Routed expert e of f over n rows x with weights wt: y = w2(bf16(wt *
 * swiglu(w1 x, w3 x))) (BF16 values); row-independent. x, wt, y and the
 * scratch g, u ([n][inter]) in the backend's memory; uses s->m, ops, pool
 * only. For dist/ep.c. */
void tide_moe_expert(tide_step *s, const tide_ffn_weights *f, int e, const float *x, int64_t n, const float *wt,
                     float *y, float *g, float *u);
/* One block with its hyper-connections: h [rows][hc][dim] in/out, pre_mix
 * [rows][hc] in (the previous block's FFN pre) / out (this block's), both
 * in the backend's memory (the forward's FB_H / FB_PRE_MIX); x and out of
 * the MoE too. The attention sub-layer (attn, or tide_attention) runs on
 * HOST arrays: its caches (rings, pools, compressor state) are host
 * structures, so the block hands it a host copy of its input and uploads
 * its output: the one place a step crosses to the host (issue 9 moves the
 * caches to the backend and removes it). */
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

/* Level one of the two-level top-k for one query (the reference's
 * select_candidate_blocks): score[0..n) with -inf where invisible, cl = the
 * query's visible count. mask[j] = 1 for positions in the topk_blocks best
 * blocks of bs (block score = max; the block holding position cl-1 pinned
 * in; -inf blocks dropped; ties toward the lower block). Scratch: bscore and
 * bidx of ceil(n/bs) entries. */
void tide_candidate_mask(const tide_ops *ops, const float *score, int64_t n, int64_t cl, int64_t topk_blocks,
                         int64_t bs, uint8_t *mask, float *bscore, int32_t *bidx);

/* RoPE helper: rotates the last rope dims of n_vec vectors of width `width`
 * at stride `width` by position pos with the layer's frequencies. */
void tide_rope_tail(const tide_step *s, int layer, float *x, int64_t n_vec, int64_t width,
                    int64_t pos, int inverse);

/* The two ends of an attention sub-layer, shared by the backbone and the
 * DSpark stages. tide_attn_project: qr [rows][q_lora] (normalised low-rank
 * q), q [rows][heads][head_dim] and kv [rows][head_dim] (RoPE'd, kv FP8
 * simulated); when kvp is not NULL, also each kv row's packed window entry
 * (kv_pack.h) at kvp + r * ring_bytes, what the ring stores. tide_attn_output: sparse attention of q over each row's
 * entries, inverse RoPE, grouped wo_a, wo_b into out [rows][dim]; o is
 * [rows][heads][head_dim] scratch that holds the attention output after. */
void tide_attn_project(tide_step *s, int layer, const float *x, float *qr, float *q, float *kv, uint8_t *kvp);
void tide_attn_output(tide_step *s, int layer, const float *q, const tide_attn_row *ar, float *o, float *out);

void *tide_xmalloc(size_t n); /* aborts on failure: only for step scratch */

#endif
