/* libtide: the public API of the inference engine.
 *
 * An engine owns a model, a KV pool and a scheduler. Callers submit requests
 * (prompt token ids + sampling parameters + stop conditions), then drive the
 * engine one scheduler step at a time (or until idle). Each step packs prefill
 * chunks and decode tokens of many requests into one ragged batch under a
 * token budget, runs the forward pass, samples, and reports new tokens.
 *
 *     tide_engine_config cfg = tide_engine_config_default();
 *     cfg.model_dir = "/models/tiny";
 *     tide_engine *e;
 *     if (tide_engine_create(&cfg, &e, &st) != 0) ...       // st.msg says why
 *     tide_request r = tide_request_default();
 *     r.prompt = ids; r.n_prompt = n; r.sampling.max_tokens = 16;
 *     tide_request_id id;
 *     if (tide_engine_submit(e, &r, &id, &st) != 0) ...     // bad request: st.msg
 *     tide_engine_run(e, &st);                              // or tide_engine_step() in a loop
 *     tide_request_info info; tide_engine_get(e, id, &info, &st);
 *     ... info.output[0 .. info.n_output) ...
 *     tide_engine_release(e, id);
 *     tide_engine_destroy(e);
 *
 * Tokens stream out through the optional event callback (one event per
 * generated token, one when a request finishes) or by polling
 * tide_engine_get. A request's tokens depend only on its prompt, its
 * parameters and its seed, never on what shares its batch, nor on
 * preemption (docs/engine.md, "Engine"), except that a request whose prefix
 * hits the prefix cache (an earlier request's pages, or its own after a
 * preemption) follows the SWA bounded-replay semantics unless prefix_replay
 * is -1 in the chunking-invariant mode (docs/engine.md, "The prefix cache in
 * the scheduler").
 *
 * Errors: every fallible function returns 0 or -1 and fills a tide_status
 * (base/status.h) with a message that says what was wrong. Not thread-safe:
 * one thread drives an engine (the engine itself uses a worker pool and,
 * with cfg.overlap, a thread for the forward pass inside each step). */
#ifndef TIDE_H
#define TIDE_H

#include <stdint.h>

#include "base/status.h"
#include "engine/sampling_params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tide_engine tide_engine;
struct tide_kv_tier; /* cache/kv_tier.h: the tiers behind the prefix cache */
typedef int64_t tide_request_id; /* > 0, unique within an engine, never reused */

typedef enum tide_finish_reason {
    TIDE_FINISH_NONE = 0,  /* still waiting or running */
    TIDE_FINISH_STOP,      /* produced one of its stop tokens (included in the output) */
    TIDE_FINISH_LENGTH,    /* produced max_tokens tokens */
    TIDE_FINISH_CANCELLED, /* tide_engine_cancel */
    TIDE_FINISH_ERROR,     /* failed while running; tide_request_info.error says why */
} tide_finish_reason;

/* "stop", "length", "cancelled", "error" ("" for NONE). */
const char *tide_finish_reason_name(tide_finish_reason r);

typedef enum tide_event_kind {
    TIDE_EVENT_TOKEN = 1, /* a request produced a token */
    TIDE_EVENT_FINISHED,  /* a request finished (after its last TOKEN event) */
} tide_event_kind;

typedef struct tide_event {
    tide_event_kind kind;
    tide_request_id id;
    void *user;                /* the request's user pointer */
    int32_t token;             /* TOKEN: the new token */
    const int32_t *output;     /* all tokens generated so far (valid during the callback) */
    int64_t n_output;
    int64_t n_prompt;
    tide_finish_reason reason; /* FINISHED */
    const char *error;         /* FINISHED with ERROR: the message; else NULL */
    int64_t n_cached;          /* tokens served by the prefix cache (tide_request_info.n_cached) */
    /* TOKEN, when the request's sampling asked (want_logprobs / top_logprobs):
     * the token's log probability under the raw logits and the n_top best
     * tokens with theirs (valid during the callback); else 0 / NULL. */
    float logprob;
    int32_t n_top;
    const int32_t *top_ids;
    const float *top_logprobs;
    /* Speculative decoding: the request's drafts verified and accepted so
     * far (0 when off) */
    int64_t n_spec_verified, n_spec_accepted;
} tide_event;

/* Called from inside tide_engine_step / _run / _cancel. It must not call the
 * engine back. */
typedef void (*tide_event_fn)(void *ctx, const tide_event *ev);

typedef struct tide_engine_config {
    const char *model_dir;     /* checkpoint directory (config.json + safetensors) */
    int n_threads;             /* worker threads incl. the caller; default 2 */
    /* KV pool: capacity in blocks of kv_block compressed positions of one KV
     * source of one sequence. Admission and preemption are decided by it. */
    int64_t kv_blocks;         /* default 1 << 20 */
    int kv_block;              /* default 64 */
    int max_seqs;              /* requests running at once; default 64 */
    int64_t max_step_tokens;   /* token budget of one step (prefill + decode); default 512 */
    int64_t prefill_chunk;     /* tokens of one prefill chunk, <= max_step_tokens; 0 = the budget */
    /* Forward-pass modes (docs/model.md). canonical_layout = 1 and
     * index_key_quirk = 0 make results independent of chunking, which lets
     * the scheduler cut chunks to fit the budget; otherwise chunk sizes are a
     * fixed function of the request (so results still never depend on the
     * batch). */
    int canonical_layout;      /* default 0 (the reference's layouts) */
    int index_key_quirk;       /* default 1 (the reference's behaviour) */
    uint64_t seed;             /* requests without a seed get one derived from this */
    /* Prefix cache (docs/engine.md section 4): full pages of page_tokens
     * tokens keep their global KV (compressed latents and index keys) after
     * a request ends; a request whose prompt starts with cached pages shares
     * them instead of computing them, and rebuilds its window rings by
     * recomputing the last prefix_replay tokens before the hit ("SWA bounded
     * replay"). Cached pages nobody uses are evicted, least recently used
     * first, when the KV pool needs their blocks. */
    int prefix_cache;          /* 1 = on (default), 0 = off */
    /* Tokens per page: a multiple of every KV source's compress ratio times
     * kv_block. 0 (default) = the smallest such multiple >= 128 (128 for the
     * released shape with kv_block 64). */
    int64_t page_tokens;
    /* Tokens recomputed before the hit on a cache hit; default 140 (the
     * window of 128 + backtracking). -1 = the whole prefix: only the global KV
     * writes are saved, and in the chunking-invariant mode the result is
     * exactly that of a cold prefill. */
    int64_t prefix_replay;
    /* Pages a request computes after a bounded-replay hit (prefix_replay >=
     * 0 and the hit longer than it) follow the replay's approximation of
     * the window rings, and so do those after a hit on such a page. 0
     * (default): they stay private to the request, so the approximation
     * never spreads to later requests; 1: they are cached too (marked
     * inexact; counted in tide_engine_stats). docs/engine.md, "Inexact
     * pages". */
    int prefix_cache_inexact;
    /* The decoder variant (docs/replay.md section 2, docs/engine.md
     * "The decoder variant"): when a request's sequence is prefilled
     * (at admission, and again after a preemption), only its last
     * decoder_tail tokens run the layers above the last KV source (they
     * make no global KV, so the cache and its pages are unaffected). 0 =
     * off (default); N > 0: a tail of N tokens (shorter tails are
     * approximate); -1 = the shortest exact tail, n_upper x (window - 1) +
     * 1 tokens (bit-identical tokens in the chunking-invariant mode). */
    int64_t decoder_tail;
    tide_event_fn on_event;    /* optional */
    void *event_ctx;
    /* Overlapped scheduling (docs/engine.md, "Overlapped scheduling"):
     * 1 = plan step N+1 (admission, preemption, prefix lookups, block
     * counts) while step N's forward pass runs (on an engine thread here),
     * 0 (default) = the same plans made after the pass, on one thread.
     * Outputs are identical either way. Off by default on the CPU backend:
     * there the gap between passes is the sampler, and planning is too
     * cheap for the thread to pay (docs/engine.md has the figures). */
    int overlap;
    /* Tiers behind the prefix cache (host memory, SSD, a shared store:
     * docs/kvstore.md), e.g. tide_kvtiers_hooks(); NULL (default) = none.
     * Pages the cache registers are handed to it (written behind the
     * request); a submitted request's pages the cache lacks are fetched
     * from it. Borrowed: it must outlive the engine. */
    const struct tide_kv_tier *kv_tier;
    /* The ops table the forward pass runs on (src/backend/ops.h): NULL
     * (default) = the CPU ops; the CUDA table of a tide_cuda_ops_ctx runs
     * every op on the GPU (today staging each op's activations through the
     * host; src/cli/backend.h opens one from a --backend name). Borrowed: it
     * must outlive the engine. */
    const struct tide_ops *ops;
    /* Speculative decoding with the DSpark draft head (docs/spec.md):
     * TIDE_SPEC_OFF (default), TIDE_SPEC_FIXED (every decoding sequence
     * verifies spec_k drafts, capped at the draft block) or TIDE_SPEC_DSPARK
     * (the confidence-scheduled budget). Needs a checkpoint with DSpark
     * stages; in every layout mode the outputs are identical to
     * TIDE_SPEC_OFF's (verify rows compute what decode steps would). */
    int spec_mode;
    int spec_k;
    /* The budget's cost model in seconds (verify pass fixed, per row, draft
     * per sequence); all 0 (default) = profiled on the running backend when
     * the engine starts (tide_engine_stats reports the figures). */
    double spec_cost[3];
} tide_engine_config;

enum { TIDE_SPEC_OFF = 0, TIDE_SPEC_FIXED = 1, TIDE_SPEC_DSPARK = 2 };

tide_engine_config tide_engine_config_default(void);

int tide_engine_create(const tide_engine_config *cfg, tide_engine **out, tide_status *st);
/* Frees every request, finished or not (no events). NULL is fine. */
void tide_engine_destroy(tide_engine *e);

typedef struct tide_request {
    const int32_t *prompt;     /* n_prompt >= 1 token ids (copied) */
    int64_t n_prompt;
    /* Sampling and stop conditions (tide_sampling_params_default(); arrays
     * are copied). max_tokens must be >= 1. stop_tokens end the request. */
    tide_sampling_params sampling;
    /* 1: the model's end-of-sequence ids (tide_engine_eos_tokens) end the
     * request too, as if appended to stop_tokens; 0 (default): only
     * stop_tokens and max_tokens do ("ignore_eos"). */
    int stop_at_eos;
    int has_seed;              /* 0: the engine derives a seed (reported in tide_request_info) */
    void *user;                /* handed back in events */
    /* Prefix-cache isolation: requests share cached pages only with requests
     * of the same salt (e.g. a hash of the tenant id). Default 0. */
    uint64_t cache_salt;
    /* Optional output constraint (src/constrain/constrain.h, docs/
     * structured.md): a cursor whose vocabulary is the engine's. Each
     * sampled token is drawn from the tokens it allows (end tokens only
     * where the output is complete) and advances it; the request stops
     * (TIDE_FINISH_STOP) when nothing but an end can follow. The engine owns
     * it from the call on: freed with the request, or at once when
     * tide_engine_submit fails. */
    struct tide_cons *constraint;
    /* Persistent KV store (docs/kvstore.md): the traffic class of the pages
     * this request writes, which sets how long they are kept
     * (TIDE_KV_CLASS_*; default: the tiers' own class). */
    int kv_class;
    /* Images in the prompt (docs/vision.md; a model with a vision tower):
     * image i's span starts at prompt position images[i].pos, in increasing
     * order, and is exactly the tide_image_plan_grid span of its size, every
     * position the image token. The engine encodes each one with the tower
     * at submit (the pixels are not kept) and keys the span's prefix-cache
     * pages on a hash of the pixels. */
    const struct tide_request_image *images;
    int n_images;
} tide_request;

typedef struct tide_request_image {
    int64_t pos;               /* first position of its span in the prompt */
    int w, h;                  /* decoded size in pixels */
    const uint8_t *rgb;        /* [h][w][3] 8-bit RGB (tide_image_decode) */
} tide_request_image;

enum { TIDE_KV_CLASS_DEFAULT = 0, TIDE_KV_CLASS_CHAT = 1 /* 7 days */, TIDE_KV_CLASS_AGENT = 2 /* 3 days */ };

tide_request tide_request_default(void);

/* Validates and queues a request. Fails (nothing queued) on an empty prompt,
 * a token outside the vocabulary, the image token outside an image span, an
 * image that does not match its span, max_tokens < 1, bad sampling
 * parameters, or a request longer than the model's context or the whole KV
 * pool. */
int tide_engine_submit(tide_engine *e, const tide_request *r, tide_request_id *id, tide_status *st);

/* Runs one scheduler step (a no-op when idle). A failure inside the step
 * fails the requests it concerns, not the call: they finish with
 * TIDE_FINISH_ERROR and a message in tide_request_info.error (non-finite
 * logits say so; a forward pass that fails in a batch is retried with each
 * of its requests alone, so only a request that fails by itself is
 * failed, and the others keep their exact tokens: docs/engine.md, "When a
 * step fails"), and the engine goes on serving the rest. Returns -1 (st
 * set) only when e is NULL. */
int tide_engine_step(tide_engine *e, tide_status *st);
/* Steps until no request is waiting or running. */
int tide_engine_run(tide_engine *e, tide_status *st);
/* The model's end-of-sequence ids: generation_config.json's eos_token_id,
 * else config.json's (model/gen_config.h); *ids stays valid for the
 * engine's life. Returns how many (0: the checkpoint names none). */
int tide_engine_eos_tokens(const tide_engine *e, const int32_t **ids);
/* Whether any request is waiting or running. */
int tide_engine_busy(const tide_engine *e);

/* Finishes a waiting or running request with TIDE_FINISH_CANCELLED (its
 * tokens so far are kept). Cancelling a finished request does nothing;
 * an unknown id fails. */
int tide_engine_cancel(tide_engine *e, tide_request_id id, tide_status *st);

typedef enum tide_request_state {
    TIDE_REQ_WAITING = 1, /* queued (also after preemption) */
    TIDE_REQ_RUNNING,
    TIDE_REQ_FINISHED,
} tide_request_state;

typedef struct tide_request_info {
    tide_request_state state;
    tide_finish_reason reason;
    const char *error;         /* ERROR: the message; else NULL */
    int64_t n_prompt;
    const int32_t *output;     /* valid until the next engine call */
    int64_t n_output;
    uint64_t seed;             /* the seed used (given or derived) */
    int64_t n_preempted;       /* times it was preempted and recomputed */
    /* Tokens whose global KV came from the prefix cache when the request was
     * (last) admitted: a multiple of page_tokens, at most its length - 1.
     * After a preemption the request may hit its own pages, so this can
     * cover generated tokens too. */
    int64_t n_cached;
    /* Speculative decoding: drafts verified, and of those accepted */
    int64_t n_spec_verified, n_spec_accepted;
} tide_request_info;

/* Finished requests stay until released. Unknown id: fails. */
int tide_engine_get(const tide_engine *e, tide_request_id id, tide_request_info *info, tide_status *st);
/* Forgets a finished request (an unfinished one is cancelled first, without
 * an event). Unknown ids are ignored. */
void tide_engine_release(tide_engine *e, tide_request_id id);

typedef struct tide_engine_stats {
    int64_t n_waiting, n_running, n_finished; /* finished = not yet released */
    int64_t kv_blocks_used, kv_blocks_total;
    int64_t steps;
    int64_t tokens_fed;        /* tokens through the forward pass (prefill, recompute, decode) */
    int64_t tokens_generated;  /* tokens sampled */
    int64_t preemptions;       /* includes the retries of failed passes */
    int64_t failed_passes;     /* forward passes that failed (their requests retried alone or failed) */
    double step_seconds;       /* total time inside steps */
    double last_step_seconds;
    int64_t last_step_seqs;    /* sequences in the last step's batch */
    int64_t last_step_tokens;  /* tokens fed in the last step */
    double tokens_per_s;       /* tokens_fed / step_seconds */
    double generated_per_s;    /* tokens_generated / step_seconds */
    /* Prefix cache (all 0 when it is off). Counted once per admission
     * (readmissions after preemption included). */
    int64_t prefix_lookup_tokens; /* tokens looked up: the sequence less its last token */
    int64_t prefix_hit_tokens;    /* of those, found in cached pages (their KV was not computed) */
    double prefix_hit_rate;       /* prefix_hit_tokens / prefix_lookup_tokens (0 when none) */
    int64_t prefix_replay_tokens; /* tokens recomputed to rebuild the windows of hits */
    int64_t prefix_hits;          /* admissions with at least one page found */
    int64_t page_tokens;          /* tokens per page in use */
    int64_t prefix_pages_total;   /* page ids the index can hold */
    int64_t prefix_pages_in_use;  /* pages referenced by running requests */
    int64_t prefix_pages_cached;  /* pages with an entry (reusable), in use or not */
    int64_t prefix_pages_idle;    /* cached pages nobody uses: evictable */
    int64_t prefix_evictions;     /* cached pages evicted (their blocks reclaimed) */
    int64_t prefix_inexact_admissions; /* admissions after a bounded replay or an inexact hit */
    int64_t prefix_pages_withheld;     /* inexact pages kept out of the cache (prefix_cache_inexact 0) */
    int64_t prefix_pages_inexact;      /* inexact pages registered (prefix_cache_inexact 1) */
    int64_t decoder_tail;              /* the decoder variant's tail in use (0 = off) */
    int64_t decoder_rows_skipped;      /* prefill rows that skipped the layers above the last KV source */
    int64_t kv_blocks_cached;     /* blocks held only by idle cached pages (reclaimable) */
    int64_t kv_tier_fetched;      /* pages brought into the cache from cfg.kv_tier */
    int64_t kv_tier_stored;       /* pages handed to cfg.kv_tier */
    /* The KV pool's storage (packed: FP4 latents with E4M3 scales per 16,
     * FP4 index keys with UE8M0 scales per 32; docs/model.md): bytes of
     * one block, and bytes per token of context (over the KV sources, one
     * latent and key per ratio tokens). The window rings are per sequence:
     * kv_ring_bytes each. */
    int64_t kv_block_bytes;
    double kv_bytes_per_token;
    int64_t kv_ring_bytes;
    /* Step phases (docs/engine.md, "Overlapped scheduling"): wall-clock
     * seconds on the thread that drives the engine. prepare = planning
     * (admission, preemption, prefix lookups, the batch's descriptors);
     * forward = the launch (KV blocks reserved) and the forward pass (on
     * the CPU backend the worker pool runs it: the "device"), up to the
     * join with overlap on; complete = page registration, sampling,
     * appending, events, stop checks. prepare + forward + complete =
     * step_seconds (and last_* likewise); with overlap on, the planning
     * done while the pass ran is not in prepare but in overlap_seconds (it
     * hid inside forward). */
    double prepare_seconds, forward_seconds, complete_seconds;
    double last_prepare_seconds, last_forward_seconds, last_complete_seconds;
    double host_seconds;          /* prepare + complete: time per step outside the forward */
    double last_host_seconds;
    /* The sampler's share of complete (on the worker pool here; a device
     * backend samples on the device, so host_seconds - sample_seconds is
     * the host's own scheduling and bookkeeping time) */
    double sample_seconds, last_sample_seconds;
    double overlap_seconds, last_overlap_seconds; /* planning hidden behind a pass (overlap on) */
    int64_t forwards;             /* steps that ran a forward pass */
    /* The device's idle gap: from the end of one forward pass to the start
     * of the next while the engine stays busy (whatever the caller does
     * between tide_engine_step calls counts too; a gap is not counted across
     * a moment when the engine was idle). */
    double idle_gap_seconds;      /* total */
    double last_idle_gap_seconds; /* before the last step's forward pass (0 if not counted) */
    int64_t idle_gaps;            /* gaps counted */
    /* idle_gap_seconds / (idle_gap_seconds + the forward time of the passes
     * that ended a counted gap): the device's idle share (0 when none) */
    double idle_fraction;
    /* Speculative decoding (0 when off): passes that verified drafts,
     * rows sampled (sequence-steps), drafts made (sequences x block),
     * verified and accepted; the budget's cost model in seconds (spec.h).
     * Tokens per sequence-step (the accepted length) = 1 + accepted /
     * spec_seq_steps; verified per sequence-step = verified / spec_seq_steps. */
    int64_t spec_steps, spec_seq_steps, spec_drafted, spec_verified, spec_accepted;
    double spec_verify_fixed_s, spec_verify_token_s, spec_draft_seq_s;
    double spec_draft_seconds;    /* time in the draft head (inside complete) */
} tide_engine_stats;

void tide_engine_get_stats(const tide_engine *e, tide_engine_stats *s);

/* Evicts every cached page that no running request uses (their KV blocks
 * return to the pool); returns how many. */
int64_t tide_engine_clear_prefix_cache(tide_engine *e);

/* The vocabulary size of the loaded model (for callers that validate). */
int64_t tide_engine_vocab_size(const tide_engine *e);
/* The model's context in tokens (prompt + generated), max_position_embeddings;
 * <= 0 when the config sets none. */
int64_t tide_engine_context(const tide_engine *e);

#ifdef __cplusplus
}
#endif

#endif
