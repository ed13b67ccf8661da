/* Engram: the n-gram hash memory added into the residual stream before the
 * blocks of a few layers (config engram_layer_ids; layers 1 and 14 in the
 * released model). Reference: inference/engram.py (NgramHashState,
 * EngramLayout, build_compressed_token_map, compute_hash_multipliers) and the
 * Engram / ParallelEngramEmbedding modules of inference/model.py.
 * docs/engram.md explains every rule below in detail.
 *
 * Three pieces: two built once per model, the third used every step:
 *
 *  1. The token map (tide_engram_token_map): tokenizer id -> compressed id.
 *     Every vocabulary entry is decoded (byte-level), normalised (NFKC, NFD,
 *     strip marks, lowercase, collapse [ \t\r\n]+, strip, lone space kept),
 *     and ids whose keys are equal share a compressed id, numbered in order
 *     of first appearance. Ids >= n_tokens have no entry: rejected.
 *
 *  2. The tables (tide_engram_tables): per engram layer, max_ngram_size odd
 *     64-bit multipliers from numpy default_rng(10007 * layer_id), and for
 *     each (n-gram size, head) a distinct prime bucket count and the row
 *     offset of its range in the layer's embedding table.
 *
 *  3. Per step:
 *     - tide_engram_hash: the row index of each of the n_cols = (max_ngram-1)
 *       * n_heads hash columns, for every engram layer, of a run of positions.
 *       The caller passes the (max_ngram_size - 1) tokens that precede the run
 *       (fewer when the sequence starts inside that window), so prefill
 *       chunks and decode steps need no hidden state here.
 *     - tide_engram_forward: gather the rows, dequantise (FP8 e4m3 with one
 *       E8M0 scale per 32 values, rounded to BF16), wkv (FP8 linear) into
 *       hc_mult keys and one value, per-copy gate
 *       sigmoid(signed_sqrt(normalised dot)), x += gate * value; the result is
 *       rounded to BF16. Dead (image) positions are left untouched.
 *       The pieces (gather / mix) are exported separately so a backend can
 *       run the wkv GEMM itself.
 *
 * Activations are float arrays that hold BF16 values (the reference keeps the
 * residual stream in BF16); outputs are rounded to BF16 the same way. */
#ifndef TIDE_MODEL_ENGRAM_H
#define TIDE_MODEL_ENGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "base/threadpool.h"
#include "model/config.h"

/* Compressed id of a position that takes no part in any n-gram (an image
 * span): the reference's NgramHashState.DEAD. */
#define TIDE_ENGRAM_DEAD (-1)

/* ---- 1. token map ------------------------------------------------------- */

typedef struct tide_engram_token_map {
    int32_t *map;         /* [n_tokens] compressed id of each tokenizer id */
    int64_t n_tokens;     /* the tokenizer's size (len(tokenizer) in the reference) */
    int64_t n_compressed; /* number of distinct keys: must equal the config's
                           * engram_compressed_vocab_size */
} tide_engram_token_map;

/* Builds the map from the tokenizer's raw vocabulary strings, as stored in
 * tokenizer.json (byte-level alphabet, e.g. "Ġthe"; added tokens as written).
 * tokens[i] / lens[i] is id i's string (UTF-8, need not be NUL-terminated);
 * tokens[i] == NULL marks an id with no token (it decodes to ""). n = the
 * tokenizer's size. Decoding follows the ByteLevel decoder: a string whose
 * every character is in the GPT-2 byte alphabet becomes those bytes, any
 * other string stays as its own UTF-8. */
int tide_engram_token_map_build(const char *const *tokens, const size_t *lens, int64_t n,
                                tide_engram_token_map *out, tide_status *st);

/* Reads tokenizer.json (path to the file, or a directory holding it), takes
 * model.vocab and added_tokens, and builds the map. The tokenizer's size is
 * the number of distinct token strings (tokenizers' get_vocab_size(true)). */
int tide_engram_token_map_from_tokenizer_json(const char *path, tide_engram_token_map *out,
                                              tide_status *st);

/* Same from the text of a tokenizer.json already in memory (len bytes);
 * `origin` names it in messages. */
int tide_engram_token_map_from_tokenizer_text(const char *text, size_t len, const char *origin,
                                              tide_engram_token_map *out, tide_status *st);

/* A stand-in map for synthetic checkpoints that come without a tokenizer:
 * id i -> i % n_compressed (n_compressed <= n_tokens). */
int tide_engram_token_map_synthetic(int64_t n_tokens, int64_t n_compressed,
                                    tide_engram_token_map *out, tide_status *st);

void tide_engram_token_map_free(tide_engram_token_map *m);

/* ---- 2. tables ---------------------------------------------------------- */

typedef struct tide_engram_tables {
    int n_layers;        /* number of engram layers (config engram_layer_ids) */
    int layer_ids[TIDE_MAX_ENGRAM_LAYERS];
    int64_t num_embeddings[TIDE_MAX_ENGRAM_LAYERS]; /* rows of each layer's table */
    int max_ngram;       /* engram_max_ngram_size: n-grams of 2 .. max_ngram tokens */
    int n_heads;         /* engram_n_heads */
    int n_cols;          /* (max_ngram - 1) * n_heads hash columns per position */
    int head_dim;        /* engram_head_dim: width of one table row */
    int64_t pad_id;      /* compressed id of engram_pad_token_id: fills missing history */
    /* [n_layers][max_ngram]: odd multipliers, multiplier[k][j] applies to the
     * token j positions back (j = 0 is the current token). */
    int64_t *multipliers;
    int64_t *primes;     /* [n_layers][n_cols]: column c = (ngram size 2 + c / n_heads, head c % n_heads) */
    int64_t *offsets;    /* [n_layers][n_cols]: first row of each column's range */
    tide_engram_token_map tmap; /* own copy */
} tide_engram_tables;

/* Builds the tables for cfg (which must have engram layers) and a token map
 * (copied). Fails if the map's n_compressed differs from the config's
 * engram_compressed_vocab_size (every multiplier derives from it), if a
 * layer's primes do not fit in its engram_num_embeddings rows, or if the pad
 * token has no map entry. */
int tide_engram_tables_build(const tide_config *cfg, const tide_engram_token_map *tmap,
                             tide_engram_tables *t, tide_status *st);
void tide_engram_tables_free(tide_engram_tables *t);

/* ---- 3a. hashing -------------------------------------------------------- */

/* Compressed ids of n tokens: dead[i] != 0 (dead may be NULL) gives
 * TIDE_ENGRAM_DEAD. Fails on ids < 0 or >= tmap.n_tokens. */
int tide_engram_compress(const tide_engram_tables *t, const int32_t *tokens, const uint8_t *dead,
                         int64_t n, int32_t *out, tide_status *st);

/* Row indices for a run of n positions of one sequence.
 *   ids:   n_hist + n token ids: the n_hist tokens just before the run, oldest
 *          first, then the run itself. n_hist = min(start_pos, max_ngram - 1):
 *          a smaller n_hist means the sequence starts at ids[0] (history
 *          before it does not exist, as at position 0). Larger n_hist values
 *          are accepted; only the last max_ngram - 1 history tokens are used.
 *   dead:  NULL, or n_hist + n flags: image-span positions (history included).
 *   rows:  out, [n][n_layers][n_cols] absolute row indices into each layer's
 *          table (offset + hash % prime).
 * Look-back stops at the start of the sequence and at a dead position: from
 * there on the n-gram is filled with pad_id. Fails (leaving rows undefined)
 * on token ids outside the map. */
int tide_engram_hash(const tide_engram_tables *t, const int32_t *ids, const uint8_t *dead,
                     int64_t n_hist, int64_t n, int64_t *rows, tide_status *st);

/* Same from compressed ids (TIDE_ENGRAM_DEAD allowed), no failure modes
 * beyond a NULL argument. */
void tide_engram_hash_compressed(const tide_engram_tables *t, const int32_t *cids, int64_t n_hist,
                                 int64_t n, int64_t *rows);

/* ---- 3b. the layer's contribution ---------------------------------------- */

/* One engram layer's tensors, bound from the checkpoint by the caller:
 *   layers.{i}.engram.embed.weight  F8_E4M3 [num_embeddings][head_dim]
 *   layers.{i}.engram.embed.scale   F8_E8M0 [num_embeddings][head_dim / 32]
 *   layers.{i}.engram.wkv.weight    F8_E4M3 [(hc_mult + 1) * dim][n_cols * head_dim]
 *   layers.{i}.engram.wkv.scale     F8_E8M0 [ceil(out / 32)][ceil(in / 32)]
 *   layers.{i}.engram.q_weight      [hc_mult][dim] (BF16 in the checkpoint; pass as f32)
 *   layers.{i}.engram.k_weight      [hc_mult][dim] (same) */
typedef struct tide_engram_weights {
    const uint8_t *embed;
    const uint8_t *embed_scale;
    int64_t num_embeddings;
    const uint8_t *wkv;
    const uint8_t *wkv_scale;
    const float *q_weight;
    const float *k_weight;
} tide_engram_weights;

typedef struct tide_engram_dims {
    int dim;       /* hidden_size */
    int hc_mult;   /* hyper-connection copies */
    int n_cols;    /* hash columns per position */
    int head_dim;  /* row width */
    float eps;     /* rms_norm_eps (1e-20 in the release) */
} tide_engram_dims;

tide_engram_dims tide_engram_dims_of(const tide_config *cfg);

/* Gathers and dequantises the n_cols rows of each of n positions:
 * emb[i][c * head_dim + j] = bf16(e4m3(row)[j] * e8m0(scale)[j / 32]).
 * rows: [n][row_stride] (row_stride >= n_cols; use n_layers * n_cols with
 * rows + layer_index * n_cols to read tide_engram_hash output directly).
 * Fails on a row outside the table. */
int tide_engram_gather(const tide_engram_weights *w, const tide_engram_dims *d,
                       const int64_t *rows, int64_t row_stride, int64_t n, float *emb,
                       tide_status *st);

/* The gate and update, given kv = bf16(wkv(emb)) as [n][(hc_mult + 1) * dim]
 * (keys of copies 0..hc-1, then the value). x: [n][hc_mult][dim] BF16 values,
 * updated in place and rounded to BF16. dead: NULL or n flags; dead
 * positions are left unchanged (the reference's gate 0). */
void tide_engram_mix(const tide_engram_weights *w, const tide_engram_dims *d, const float *kv,
                     const uint8_t *dead, int64_t n, float *x);

/* The whole contribution on the CPU (reference semantics: gather,
 * activation FP8 quantisation in blocks of 32, FP8 GEMM with f32
 * accumulation per 32-block, BF16 output, mix). Allocates its scratch.
 * Positions go through in passes of 64, so scratch stays small for long
 * prefill chunks. Fails, with x untouched, on a row outside the table.
 * tide_engram_forward runs on the calling thread; the _pool variant splits
 * the wkv GEMM over the pool's threads (NULL = inline) with bit-identical
 * results. */
int tide_engram_forward(const tide_engram_weights *w, const tide_engram_dims *d,
                        const int64_t *rows, int64_t row_stride, const uint8_t *dead, int64_t n,
                        float *x, tide_status *st);
int tide_engram_forward_pool(tide_pool *pool, const tide_engram_weights *w,
                             const tide_engram_dims *d, const int64_t *rows, int64_t row_stride,
                             const uint8_t *dead, int64_t n, float *x, tide_status *st);

#endif
