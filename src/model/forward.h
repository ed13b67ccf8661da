/* The DeepSeek-V4.1 forward pass over a ragged batch.
 *
 * One call (tide_forward) runs one step: several sequences, each bringing n
 * new tokens at its own position (a prefill chunk, or one decode token), each
 * with its own cache state (cache/seq_cache.h) in a shared KV pool. Rows are
 * independent: a sequence's results do not depend on which others share the
 * step. The step returns logits for the rows asked for and, optionally, the
 * DSpark inputs (the recorded block inputs of the target layers).
 *
 *     tide_fwd_ctx *fx;  tide_fwd_ctx_create(model, ops, pool, n_threads, &opts, &fx, &st);
 *     tide_seq_cache sc; tide_fwd_seq_init(fx, &sc, &st);
 *     tide_step_seq s = { .cache = &sc, .tokens = ids, .n_tokens = n, .logits = TIDE_LOGITS_LAST };
 *     tide_forward(fx, &s, 1, &out, &st);       // out.logits: [1][vocab]
 *
 * Numerics and every deviation from the reference: docs/model.md. */
#ifndef TIDE_MODEL_FORWARD_H
#define TIDE_MODEL_FORWARD_H

#include <stdint.h>

#include "backend/ops.h"
#include "cache/kv_pool.h"
#include "cache/seq_cache.h"
#include "model/model.h"

typedef struct tide_fwd_opts {
    /* Lay out each query's attention entries as the reference does for its
     * own call kind: a chunk at position 0 gets the prefill layout (window
     * entries for the chunk's own rows only), anything else the decode
     * layout (the full ring, oldest first). Both are exact to the reference;
     * they differ in where the 64-wide online-softmax chunks fall. With 0,
     * every query uses the decode layout, which makes results independent of
     * how a prompt is chunked (bit-equal prefill / chunked / decode). */
    int ref_layout;
    /* The reference's index-key republish quirk (spec section 4): a
     * single-token step whose ratio-r group is incomplete scores against the
     * keys published last (by any layer). 0 = the "intended" behaviour: every
     * indexer scores against its own KV source's keys. */
    int index_key_quirk;
    /* Max compressed positions in the pool, in blocks of kv_block positions. */
    int kv_block;
    int64_t kv_max_blocks;
    /* Optional debugging hook: called with intermediate tensors of every
     * block ("h_in" [rows][hc*dim], "attn_out" [rows][dim], "ffn_out",
     * "h_out"), for comparing with the reference's per-layer dumps. */
    void (*dump)(void *ctx, const char *name, int layer, const float *x, int64_t rows, int64_t width);
    void *dump_ctx;
} tide_fwd_opts;

/* ref_layout 1, index_key_quirk 1, kv_block 64, kv_max_blocks 1<<20. */
tide_fwd_opts tide_fwd_default_opts(void);

typedef struct tide_fwd_ctx tide_fwd_ctx;

int tide_fwd_ctx_create(const tide_model *m, const tide_ops *ops, int n_threads,
                        const tide_fwd_opts *opts, tide_fwd_ctx **out, tide_status *st);
void tide_fwd_ctx_free(tide_fwd_ctx *fx);
const tide_model *tide_fwd_model(const tide_fwd_ctx *fx);
tide_pool *tide_fwd_pool(tide_fwd_ctx *fx);
/* The shared KV pool (for admission control: its capacity and free blocks). */
tide_kv_pool *tide_fwd_kv(tide_fwd_ctx *fx);

/* A fresh, empty sequence state shaped for the context's model. */
int tide_fwd_seq_init(tide_fwd_ctx *fx, tide_seq_cache *c, tide_status *st);
/* Releases its KV blocks and frees it. */
void tide_fwd_seq_free(tide_fwd_ctx *fx, tide_seq_cache *c);

/* Prefix-cache restore with SWA bounded replay (docs/replay.md). c is a
 * fresh sequence (tide_fwd_seq_init) whose block tables already hold the
 * blocks of the compressed positions of tokens [0, frozen) of every KV
 * source (shared in with tide_kv_share; the forward pass never writes
 * them). Sets the token history to tokens[0, start), pos = ring_lo = start,
 * frozen_tokens = frozen, n_comp and published as a prefill of
 * [0, start) leaves them. The caller then feeds tokens[start, ...) as
 * ordinary chunks: rows before frozen rebuild the window rings (seeing no
 * window entries below start: an approximation unless start = 0 or the
 * replay covers the receptive field). Fails, changing nothing, unless
 * 0 <= start <= frozen, frozen is a multiple of every compress ratio, the
 * tables hold frozen/ratio positions, the history ids are in the vocabulary
 * and c is fresh. */
int tide_fwd_seq_restore(tide_fwd_ctx *fx, tide_seq_cache *c, const int32_t *tokens, int64_t frozen,
                         int64_t start, tide_status *st);
/* The last KV source layer (layers above it are the decoder variant's
 * "upper" layers, run only on rows >= cache->tail_lo); -1 if none. */
int tide_fwd_last_kv_layer(const tide_fwd_ctx *fx);

enum { TIDE_LOGITS_NONE = 0, TIDE_LOGITS_LAST = 1, TIDE_LOGITS_ALL = 2 };

typedef struct tide_step_seq {
    tide_seq_cache *cache;  /* its position is cache->pos; advanced by n_tokens on success */
    const int32_t *tokens;  /* n_tokens >= 1 new token ids */
    int64_t n_tokens;
    int logits;             /* TIDE_LOGITS_* */
} tide_step_seq;

/* A sequence's image spans in a step (docs/vision.md): types[t] >= 0 marks
 * token t as a span position (its id must be image_token_id), and rows
 * ([n_tokens][hidden], only the span rows read) replaces those embeddings
 * (tide_vision_span_embeds). Span positions route with ffn.gate.bias_vl and
 * are dead to engram. types NULL: all text. */
typedef struct tide_step_image {
    const int8_t *types;
    const float *rows;
} tide_step_image;

typedef struct tide_step_out {
    /* [n_logit_rows][vocab], rows in sequence order (LAST: one row, ALL:
     * n_tokens rows). NULL if no sequence asks for logits. */
    float *logits;
    /* Optional: [total rows][n_targets * dim], the mean over hyper-connection
     * copies of the block input of each DSpark target layer, concatenated in
     * dspark_target_layer_ids order (BF16 values). NULL = not recorded. */
    float *dspark_in;
} tide_step_out;

/* Decode rows. A sequence whose active checkpoint has decode_rows set
 * (cache/seq_cache.h) is fed as if each of its rows were a one-token step
 * at its position (for verifying drafts outside the chunking-invariant
 * mode): with the index-key quirk each row reads the keys the republish
 * rule gives one-token steps (tide_seq_published_at from the state before
 * the step; keys such a step would not have yet read as zeros), and the
 * sequence's published layer ends as those steps leave it. Everything else
 * already agrees at a position > 0 (the decode layout; a chunk's trailing
 * empty top-k entries change no sum), so its logits equal the one-token
 * steps' bit for bit. Such a
 * chunk can only be that long where no row would read keys that a higher
 * layer makes later in the same step: tide_fwd_decode_rows_max gives how
 * many rows (<= n, >= 1) a chunk at c->pos can have. */
int64_t tide_fwd_decode_rows_max(const tide_fwd_ctx *fx, const tide_seq_cache *c, int64_t n);

/* Runs one step. Fails (state unchanged) on bad token ids (< 0 or >= vocab),
 * on the image token outside an image span (types / rows), on a sequence listed
 * twice, when the KV pool is exhausted, when logits are asked of rows below
 * cache->tail_lo (the decoder variant skipped them), or when a sequence
 * would be fed past its active checkpoint (tide_seq_checkpoint), or with
 * more decode rows than tide_fwd_decode_rows_max allows.
 * With the decoder variant, dspark_in rows below tail_lo hold zeros for the
 * target layers above the last KV source. */
int tide_forward(tide_fwd_ctx *fx, tide_step_seq *seqs, int n_seqs, tide_step_out *out,
                 tide_status *st);
/* The same with image spans: img [n_seqs] (NULL: all text). */
int tide_forward_images(tide_fwd_ctx *fx, tide_step_seq *seqs, int n_seqs, const tide_step_image *img,
                        tide_step_out *out, tide_status *st);

/* Number of logit rows a step produces (for sizing out->logits). */
int64_t tide_step_logit_rows(const tide_step_seq *seqs, int n_seqs);

#endif
