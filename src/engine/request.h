/* One request inside the engine: what was asked (prompt, sampling
 * parameters with owned copies of their arrays, seed) and where it stands
 * (state, generated tokens, the sequence cache while it runs).
 *
 * The prompt and the generated tokens live in one array, `tokens`: the
 * sequence the model sees. The cache has consumed tokens[0, cache.pos);
 * a running request feeds tokens[pos, n_tokens) over one or more steps and,
 * when pos reaches n_tokens, samples the next token. So decode, chunked
 * prefill and recompute after preemption are one mechanism. */
#ifndef TIDE_ENGINE_REQUEST_H
#define TIDE_ENGINE_REQUEST_H

#include <stdint.h>

#include "cache/seq_cache.h"
#include "engine/spec.h"
#include "model/config.h"
#include "tide.h"

typedef struct tide_req {
    tide_request_id id;
    void *user;
    tide_sampling_params sp;  /* logit_bias / stop_tokens point at owned copies */
    tide_request_state state;
    tide_finish_reason reason;
    char *error;              /* ERROR: owned message */
    int32_t *tokens;          /* prompt ++ output */
    int64_t n_prompt, n_tokens, cap_tokens;
    int has_cache;
    tide_seq_cache cache;     /* valid while has_cache */
    int64_t n_preempted;
    /* it was in a batch whose forward pass failed: its next pass runs it
     * alone, to tell whether it is the one that fails (sched.h) */
    int solo;
    /* Prefix cache (sched.c): the tenant salt, and while the request runs the
     * pages it references in order (page i = tokens [i*P, (i+1)*P)): the hit
     * pages its tables share, then the pages it filled itself. */
    uint64_t salt;
    int kv_class;             /* TIDE_KV_CLASS_* of the pages it hands to the tiers */
    uint64_t tier_ticket;     /* a read-ahead of its pages by the tiers, until admission (sched.c) */
    int32_t *pages;
    int64_t n_pages, cap_pages;
    int64_t n_cached;         /* tokens whose KV came from the cache at the last admission */
    /* pages [0, exact_pages) of its own are exact: the later ones follow a
     * bounded replay (sched.h, "Inexact pages"); INT64_MAX when all are */
    int64_t exact_pages;
    int64_t n_withheld;       /* of its inexact pages, those kept out of the cache so far */
    struct tide_cons *cons;   /* output constraint (owned), NULL none */
    /* Speculative decoding (engine/spec.h): the draft made after its last
     * step, valid while n_tokens == draft_at (it continues tokens[draft_at
     * - 1]); the rollback checkpoint of a verifying step; its counts. */
    int32_t draft[TIDE_SPEC_MAX_BLOCK];
    float surv[TIDE_SPEC_MAX_BLOCK];
    int n_draft;
    int64_t draft_at;
    int n_verify;             /* drafts the step in flight verifies */
    tide_seq_ckpt ck;
    int64_t n_spec_verified, n_spec_accepted;
    /* Image spans (docs/vision.md), NULL without images: per prompt position
     * its span type (TIDE_IMG_*, -1 text) and its row in img_rows (the
     * span's input rows, [n_img_rows][hidden], filled by the engine's tower
     * at submit); keys, the prefix cache's view of tokens (grown with them):
     * span positions carry a hash of the image's pixels and their place in
     * the span instead of the image token, so that pages are shared only
     * between requests with the same images. */
    int8_t *img_types;
    int32_t *img_row;
    float *img_rows;
    int64_t n_img_rows;
    int32_t *keys;
} tide_req;

/* What a request is checked against and completed with. */
typedef struct tide_req_model {
    int64_t vocab;
    int32_t image_token;   /* only inside image spans; < 0: none */
    const tide_vision_config *vision; /* the tower's, NULL: none (images refused) */
    int64_t max_len;       /* the context (<= 0: only the forward pass's own limit) */
    const int32_t *eos;    /* appended to the stop tokens when the request stops at EOS */
    int n_eos;
} tide_req_model;

/* Validates r against a model (vocabulary, image token, context length) and
 * makes a WAITING request with owned copies of everything (its stop tokens
 * followed by the model's EOS ids when r->stop_at_eos). seed is used when r
 * has none. */
int tide_req_create(const tide_request *r, const tide_req_model *m, uint64_t seed, tide_req **out,
                    tide_status *st);
/* Frees the request; its cache must already be released. */
void tide_req_free(tide_req *q);

static inline int64_t tide_req_n_output(const tide_req *q) { return q->n_tokens - q->n_prompt; }
static inline const int32_t *tide_req_output(const tide_req *q) { return q->tokens + q->n_prompt; }
/* The tokens as the prefix cache keys them (see keys). */
static inline const int32_t *tide_req_keys(const tide_req *q) { return q->keys ? q->keys : q->tokens; }

/* Appends a generated token. */
int tide_req_push(tide_req *q, int32_t token, tide_status *st);
/* Records a failure message (keeps the first). */
void tide_req_set_error(tide_req *q, const char *msg);

#endif
