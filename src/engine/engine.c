/* The engine: libtide's public request lifecycle (include/tide.h).
 *
 * One step reads top to bottom the way a request travels, in three phases
 * (the split a device backend with an asynchronous launch needs: docs/
 * engine.md, "Overlapped scheduling"):
 *   prepare:  the scheduler plans the step (sched.h); the plan for step N+1
 *             is made while step N is in flight, so that with cfg.overlap
 *             it runs during step N's forward pass (on an engine thread);
 *   launch:   the KV blocks the batch writes are reserved (host side), the
 *             batch's descriptors built, then the forward pass runs the
 *             ragged batch (model/forward.h);
 *   complete: the rows that reached the end of their sequence are sampled
 *             (sampler.h; the RNG is keyed by the request's seed and the
 *             token's position, so nothing depends on the batch) and the
 *             tokens appended, the scheduler registers the pages the step
 *             completed with the prefix cache (so a request that finishes
 *             leaves them cached), then each new token is reported and
 *             checked against the stop conditions.
 * Speculative decoding (spec.h, docs/spec.md) adds to this: after planning,
 * the budget grows decode items by draft tokens to verify (spec_attach);
 * sampling walks each verifying sequence's rows and rolls its cache back to
 * the tokens that stand (sample_rows); after reporting, the DSpark head
 * drafts the next block for every sequence that goes on (draft_rows). The
 * next step is then planned afresh rather than during the pass.
 * Each phase is timed, and so is the forward pass's idle gap between steps
 * (tide_engine_stats).
 *
 * Threads. The caller's thread does everything except the forward pass's
 * and the sampler's parallel loops (the worker pool) and, with the overlap
 * on, the forward pass itself, which runs on the engine's forward thread
 * (started once with the engine, handed each pass at launch and waited for
 * inside the same tide_engine_step call; run_forward says what it touches;
 * the scheduler's planning touches none of it). */
#include "tide.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "constrain/constrain.h"
#include "engine/engine.h"
#include "engine/request.h"
#include "engine/rng.h"
#include "engine/sampler.h"
#include "engine/sched.h"
#include "engine/spec.h"
#include "model/dspark.h"
#include "model/forward.h"
#include "model/gen_config.h"
#include "model/model.h"
#include "vision/vision.h"

struct tide_engine {
    tide_engine_config cfg;
    const tide_model *m;
    tide_model *own_model;    /* loaded by tide_engine_create; NULL when borrowed */
    tide_fwd_ctx *fx;
    tide_sched sched;
    int64_t vocab;
    tide_gen_config gen;      /* the model's EOS ids */
    tide_sampler_ws *ws;      /* one per pool thread */
    int n_ws;
    uint32_t *allow;          /* every token but the image token (it cannot be fed back) */
    uint32_t *cmask;          /* [max_seqs][words] constrained rows' masks */
    float *logits;            /* [max_seqs][vocab] */
    tide_step_seq *seqs;      /* [max_seqs] */
    tide_sampler_input *in;   /* [max_seqs] */
    tide_sample_result *res;  /* [max_seqs] */
    const tide_sampling_params **par; /* [max_seqs] */
    tide_req **rows;          /* [max_seqs] the request of each sampled row */
    void **users;             /* [max_seqs] the user pointers of the pass's requests (fault hook) */
    tide_engine_fault_fn fault; /* tests: tide_engine_set_fault */
    void *fault_ctx;
    tide_req **all;           /* every unreleased request, ascending id */
    int64_t n_all, cap_all;
    int64_t next_id, n_finished;
    int64_t steps, tokens_fed, tokens_generated, failed_passes;
    double step_seconds, last_step_seconds;
    /* phase timing (tide_engine_stats); fwd_end < 0: no forward pass to
     * measure an idle gap from (none yet, or the engine went idle since) */
    double prepare_s, forward_s, complete_s, last_prepare_s, last_forward_s, last_complete_s;
    double sample_s, last_sample_s; /* inside complete */
    double gap_s, last_gap_s, gap_forward_s, fwd_end;
    double hidden_s, last_hidden_s; /* planning done while a pass was in flight */
    int64_t forwards, gaps;
    int64_t last_seqs, last_tokens;  /* of the last launched step */
    /* the pass in flight: written by whoever runs it (the forward thread
     * when overlapping), read by the driving thread after the wait; the
     * mutex orders both. job: 0 idle, 1 handed to the thread, 2 done. */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int thread_on, job, quit;
    int n_seqs, frc;
    tide_status fst;
    double fwd_done;
    /* speculative decoding (spec.h; docs/spec.md) */
    int spec, spec_k, block;  /* mode, fixed K, the draft block (0 when off) */
    int draft_off, draft_skips; /* dspark: drafting did not pay last time; steps skipped since */
    int draft_period;           /* dspark, drafting off: a probe every this many steps (8 .. 64) */
    tide_spec_costs costs;
    int32_t *spec_tok;        /* [max_seqs][block + 1] the verify chunks, by plan item */
    float *dsp_in;            /* [rows][targets x dim] the pass's DSpark inputs */
    int64_t dsp_cap, logit_cap; /* rows dsp_in / logits hold */
    int32_t *d_ids;           /* the drafts' outputs: [max_seqs][block + 1] */
    float *d_logits, *d_conf; /* [block][vocab] (the profile's), [max_seqs][block] */
    tide_dspark_job *djob;    /* [max_seqs] the step's drafts, drafted together */
    int *dj_item;             /* [max_seqs] their flight items */
    float *surv;              /* [max_seqs][block] the budget's candidates */
    int *cand, *avail, *take; /* [max_seqs] */
    /* a sampled row's outcome, by flight item: tokens in res[i * (block + 1) ..] */
    int *n_new, *why;         /* why: 0 continues, else the tide_finish_reason */
    tide_sample_result *rres; /* [max_seqs] one sampling round */
    tide_engine_draft_fn draft_hook;
    void *draft_ctx;
    /* images (docs/vision.md): the tower, when the model has one; the
     * flight's image spans by item, and its span rows by fed row */
    int has_vision;
    tide_vision vis;
    tide_step_image *imgs;    /* [max_seqs] */
    int8_t *img_types;        /* [img_cap] */
    float *img_rows;          /* [img_cap][hidden] */
    int64_t img_cap;
    int n_img;                /* items of the flight with span positions */
    int64_t spec_steps, spec_seq_steps, spec_drafted, spec_verified, spec_accepted;
    double draft_s;
};

static void *forward_thread(void *arg);

/* The default of cfg.overlap; a build can flip it (-DTIDE_ENGINE_OVERLAP_DEFAULT=1)
 * to run every engine test with the overlap on. */
#ifndef TIDE_ENGINE_OVERLAP_DEFAULT
#define TIDE_ENGINE_OVERLAP_DEFAULT 0
#endif

tide_engine_config tide_engine_config_default(void) {
    tide_engine_config c = {0};
    c.n_threads = 2;
    c.kv_blocks = 1 << 20;
    c.kv_block = 64;
    c.max_seqs = 64;
    c.max_step_tokens = 512;
    c.index_key_quirk = 1;
    c.prefix_cache = 1;
    c.page_tokens = 0;
    c.prefix_replay = 140;
    c.overlap = TIDE_ENGINE_OVERLAP_DEFAULT;
    return c;
}

tide_request tide_request_default(void) {
    tide_request r = {0};
    r.sampling = tide_sampling_params_default();
    return r;
}

const char *tide_finish_reason_name(tide_finish_reason r) {
    switch (r) {
    case TIDE_FINISH_STOP: return "stop";
    case TIDE_FINISH_LENGTH: return "length";
    case TIDE_FINISH_CANCELLED: return "cancelled";
    case TIDE_FINISH_ERROR: return "error";
    default: return "";
    }
}

static int check_config(const tide_engine_config *c, int have_model, tide_status *st) {
    if (!c) return tide_fail(st, TIDE_ERR_INVALID, "engine: no configuration");
    if (!have_model && !c->model_dir) return tide_fail(st, TIDE_ERR_INVALID, "engine: no model directory");
    if (c->n_threads < 1 || c->n_threads > 256)
        return tide_fail(st, TIDE_ERR_INVALID, "engine: n_threads %d is outside 1..256", c->n_threads);
    if (c->kv_block < 1 || c->kv_block > 4096)
        return tide_fail(st, TIDE_ERR_INVALID, "engine: kv_block %d is outside 1..4096", c->kv_block);
    if (c->kv_blocks < 1 || c->kv_blocks > INT32_MAX)
        return tide_fail(st, TIDE_ERR_INVALID, "engine: kv_blocks %lld is outside 1..2^31-1", (long long)c->kv_blocks);
    if (c->max_seqs < 1 || c->max_seqs > 4096)
        return tide_fail(st, TIDE_ERR_INVALID, "engine: max_seqs %d is outside 1..4096", c->max_seqs);
    if (c->max_step_tokens < 1 || c->max_step_tokens > (1 << 24))
        return tide_fail(st, TIDE_ERR_INVALID, "engine: max_step_tokens %lld is outside 1..2^24",
                         (long long)c->max_step_tokens);
    if (c->prefill_chunk < 0 || c->prefill_chunk > c->max_step_tokens)
        return tide_fail(st, TIDE_ERR_INVALID, "engine: prefill_chunk %lld is outside 0..max_step_tokens (%lld)",
                         (long long)c->prefill_chunk, (long long)c->max_step_tokens);
    if (c->prefix_cache != 0 && c->prefix_cache != 1)
        return tide_fail(st, TIDE_ERR_INVALID, "engine: prefix_cache %d is not 0 (off) or 1 (on)", c->prefix_cache);
    if (c->prefix_cache_inexact != 0 && c->prefix_cache_inexact != 1)
        return tide_fail(st, TIDE_ERR_INVALID, "engine: prefix_cache_inexact %d is not 0 (off) or 1 (on)",
                         c->prefix_cache_inexact);
    if (c->decoder_tail < -1 || c->decoder_tail > (1 << 30))
        return tide_fail(st, TIDE_ERR_INVALID, "engine: decoder_tail %lld: use 0 (off), N > 0 tokens or -1 (exact)",
                         (long long)c->decoder_tail);
    if (c->overlap != 0 && c->overlap != 1)
        return tide_fail(st, TIDE_ERR_INVALID, "engine: overlap %d is not 0 (off) or 1 (on)", c->overlap);
    if (c->spec_mode != TIDE_SPEC_OFF && c->spec_mode != TIDE_SPEC_FIXED && c->spec_mode != TIDE_SPEC_DSPARK)
        return tide_fail(st, TIDE_ERR_INVALID, "engine: spec_mode %d is not off (0), fixed (1) or dspark (2)",
                         c->spec_mode);
    if (c->spec_mode == TIDE_SPEC_FIXED && (c->spec_k < 1 || c->spec_k > TIDE_SPEC_MAX_BLOCK))
        return tide_fail(st, TIDE_ERR_INVALID, "engine: spec_k %d is outside 1..%d", c->spec_k, TIDE_SPEC_MAX_BLOCK);
    for (int i = 0; i < 3; i++)
        if (!(c->spec_cost[i] >= 0) || c->spec_cost[i] > 1e6)
            return tide_fail(st, TIDE_ERR_INVALID, "engine: spec_cost[%d] %g is not a time in seconds", i,
                             c->spec_cost[i]);
    /* page_tokens and prefix_replay need the model: checked by the scheduler */
    return 0;
}

/* Grows a float buffer to hold rows x width values (out of memory aborts,
 * as the forward pass's own buffers do). */
static void grow(float **buf, int64_t *cap, int64_t rows, int64_t width) {
    if (rows <= *cap) return;
    free(*buf);
    *buf = malloc((size_t)rows * (size_t)width * sizeof **buf);
    if (!*buf) abort();
    *cap = rows;
}

/* The budget's cost model, measured on the running backend with a scratch
 * sequence (its blocks go back to the pool): a pass of 1 row and one of
 * block + 1 rows give the fixed and per-row costs, one draft the draft's;
 * the best of two runs each. cfg.spec_cost replaces it. If it fails (a KV
 * pool too small for the scratch sequence), verification counts as free:
 * every draft is verified, as fixed:block would. */
static void spec_profile(tide_engine *e) {
    tide_status sst = {0}, *st = &sst;
    const double *c = e->cfg.spec_cost;
    if (c[0] > 0 || c[1] > 0 || c[2] > 0) {
        e->costs = (tide_spec_costs){c[0], c[1], c[2]};
        return;
    }
    int32_t tok[TIDE_SPEC_MAX_BLOCK + 9];
    for (int i = 0; i < TIDE_SPEC_MAX_BLOCK + 9; i++) {
        tok[i] = (int32_t)((i * 7919 + 1) % e->vocab);
        if (tok[i] == e->m->cfg.image_token_id) tok[i] = (tok[i] + 1) % (int32_t)e->vocab;
    }
    int64_t width = e->m->cfg.text.n_dspark_target_layer_ids * e->m->cfg.text.hidden_size;
    grow(&e->logits, &e->logit_cap, e->block + 1, e->vocab);
    grow(&e->dsp_in, &e->dsp_cap, 8 + e->block + 1, width);
    tide_seq_cache sc;
    tide_seq_ckpt ck = {0};
    if (tide_fwd_seq_init(e->fx, &sc, st) != 0) {
        e->costs = (tide_spec_costs){1.0, 0.0, 0.0};
        return;
    }
    tide_step_seq q = {&sc, tok, 8, TIDE_LOGITS_NONE};
    tide_step_out out = {e->logits, e->dsp_in};
    int rc = tide_forward(e->fx, &q, 1, &out, st);
    if (rc == 0) rc = tide_dspark_seed(e->fx, &sc, e->dsp_in, 7, 0, st);
    double t[3] = {1e30, 1e30, 1e30};
    for (int rep = 0; rep < 2 && rc == 0; rep++)
        for (int k = 0; k < 2 && rc == 0; k++) {
            int64_t n = k ? e->block + 1 : 1;
            q = (tide_step_seq){&sc, tok + 8, n, TIDE_LOGITS_ALL};
            if ((rc = tide_seq_checkpoint(&sc, &ck, (int)n, st)) != 0) break;
            double t0 = tide_now_seconds();
            rc = tide_forward(e->fx, &q, 1, &out, st);
            double dt = tide_now_seconds() - t0;
            if (dt < t[k]) t[k] = dt;
            if (rc == 0) rc = tide_seq_rollback(&sc, &ck, 0, st);
        }
    for (int rep = 0; rep < 2 && rc == 0; rep++) {
        tide_dspark_out d = {e->d_ids, e->d_logits, e->d_conf};
        double t0 = tide_now_seconds();
        rc = tide_dspark_draft(e->fx, &sc, e->dsp_in + 7 * width, 7, tok[8], NULL, &d, st);
        double dt = tide_now_seconds() - t0;
        if (dt < t[2]) t[2] = dt;
    }
    tide_seq_ckpt_free(&ck);
    tide_fwd_seq_free(e->fx, &sc);
    if (rc != 0) { /* e.g. a KV pool too small for the scratch sequence */
        tide_log(TIDE_LOG_WARN, "engine: profiling the speculative cost model failed (%s): verification is taken "
                 "as free (every draft verified)", st->msg);
        e->costs = (tide_spec_costs){1.0, 0.0, 0.0};
        return;
    }
    double per = (t[1] - t[0]) / e->block;
    if (per < 0) per = 0;
    e->costs = (tide_spec_costs){t[0] - per > 0 ? t[0] - per : 0, per, t[2]};
    tide_log(TIDE_LOG_INFO, "engine: speculative cost model: pass %.3g s + %.3g s per row, draft %.3g s per sequence",
             e->costs.verify_fixed, e->costs.verify_per_token, e->costs.draft_per_seq);
}

/* The decoder variant's tail in tokens: -1 = the shortest exact one,
 * n_upper x (window - 1) + 1 (docs/replay.md section 2); 0 = off, also
 * when the model has no layer above its last KV source. */
static int64_t decoder_tail(const tide_fwd_ctx *fx, int64_t want) {
    const tide_model *m = tide_fwd_model(fx);
    int last = tide_fwd_last_kv_layer(fx);
    int64_t n_upper = last < 0 ? 0 : m->n_backbone - 1 - last;
    if (want == 0 || n_upper <= 0) return 0;
    if (want > 0) return want;
    int64_t w = m->cfg.text.sliding_window;
    return n_upper * (w > 1 ? w - 1 : 0) + 1;
}

static int alloc_buffers(tide_engine *e, tide_status *st) {
    size_t n = (size_t)e->cfg.max_seqs;
    e->logits = malloc(n * (size_t)e->vocab * sizeof *e->logits);
    e->seqs = malloc(n * sizeof *e->seqs);
    e->in = malloc(n * sizeof *e->in);
    e->res = malloc(n * sizeof *e->res);
    e->par = malloc(n * sizeof *e->par);
    e->rows = malloc(n * sizeof *e->rows);
    e->users = malloc(n * sizeof *e->users);
    e->logit_cap = (int64_t)n;
    e->n_new = malloc(n * sizeof *e->n_new);
    e->why = malloc(n * sizeof *e->why);
    e->cand = malloc(n * sizeof *e->cand);
    e->avail = malloc(n * sizeof *e->avail);
    e->take = malloc(n * sizeof *e->take);
    e->rres = malloc(n * sizeof *e->rres);
    free(e->res);
    e->res = malloc(n * (size_t)(e->block + 1) * sizeof *e->res);
    if (!e->n_new || !e->why || !e->cand || !e->avail || !e->take || !e->rres || !e->res)
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory (step buffers for %d sequences)", e->cfg.max_seqs);
    if (e->spec) {
        size_t b = (size_t)e->block;
        e->spec_tok = malloc(n * (b + 1) * sizeof *e->spec_tok);
        e->surv = malloc(n * b * sizeof *e->surv);
        e->d_ids = malloc(n * (b + 1) * sizeof *e->d_ids);
        e->d_conf = malloc(n * b * sizeof *e->d_conf);
        e->d_logits = malloc(b * (size_t)e->vocab * sizeof *e->d_logits);
        e->djob = malloc(n * sizeof *e->djob);
        e->dj_item = malloc(n * sizeof *e->dj_item);
        if (!e->spec_tok || !e->surv || !e->d_ids || !e->d_conf || !e->d_logits || !e->djob || !e->dj_item)
            return tide_fail(st, TIDE_ERR_NOMEM, "out of memory (speculative decoding buffers)");
    }
    size_t words = ((size_t)e->vocab + 31) / 32;
    e->allow = malloc(words * sizeof *e->allow);
    e->cmask = malloc(n * words * sizeof *e->cmask);
    if (!e->logits || !e->seqs || !e->in || !e->res || !e->par || !e->rows || !e->users || !e->allow || !e->cmask)
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory (step buffers for %d sequences x %lld logits)",
                         e->cfg.max_seqs, (long long)e->vocab);
    memset(e->allow, 0xff, words * sizeof *e->allow);
    int32_t img = e->m->cfg.image_token_id;
    if (img >= 0 && img < e->vocab) e->allow[img >> 5] &= ~(1u << (img & 31));
    e->n_ws = tide_pool_size(tide_fwd_pool(e->fx));
    e->ws = calloc((size_t)e->n_ws, sizeof *e->ws);
    if (!e->ws) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory (sampler workspaces)");
    for (int i = 0; i < e->n_ws; i++)
        if (tide_sampler_ws_init(&e->ws[i], (int32_t)e->vocab, st) != 0) return -1;
    return 0;
}

static int create(const tide_engine_config *cfg, const tide_model *borrowed, tide_engine **out,
                  tide_status *st) {
    *out = NULL;
    if (check_config(cfg, borrowed != NULL, st) != 0) return -1;
    tide_engine *e = calloc(1, sizeof *e);
    if (!e) return tide_fail(st, TIDE_ERR_NOMEM, "engine: out of memory");
    e->cfg = *cfg;
    e->cfg.model_dir = NULL; /* borrowed: not kept */
    e->next_id = 1;
    e->fwd_end = -1;
    if (borrowed) e->m = borrowed;
    else if (tide_model_load(cfg->model_dir, &e->own_model, st) != 0) goto fail;
    else e->m = e->own_model;
    e->vocab = e->m->cfg.text.vocab_size;
    if (cfg->model_dir && tide_gen_config_read(cfg->model_dir, e->vocab, &e->gen, st) != 0) goto fail;
    if (cfg->model_dir && e->gen.n_eos == 0)
        tide_log(TIDE_LOG_WARN, "engine: %s names no eos_token_id (generation_config.json, config.json): "
                 "requests end only at max_tokens or their own stop tokens", cfg->model_dir);
    tide_fwd_opts o = tide_fwd_default_opts();
    o.ref_layout = !cfg->canonical_layout;
    o.index_key_quirk = cfg->index_key_quirk;
    o.kv_block = cfg->kv_block;
    o.kv_max_blocks = cfg->kv_blocks;
    const tide_ops *ops = cfg->ops ? cfg->ops : tide_cpu_ops();
    if (ops->bind_weights && ops->bind_weights(ops, e->m->ck, st) != 0) goto fail;
    if (tide_fwd_ctx_create(e->m, ops, cfg->n_threads, &o, &e->fx, st) != 0) goto fail;
    tide_sched_cfg sc = {cfg->max_seqs,
                         cfg->max_step_tokens,
                         cfg->prefill_chunk > 0 ? cfg->prefill_chunk : cfg->max_step_tokens,
                         cfg->canonical_layout && !cfg->index_key_quirk,
                         cfg->prefix_cache,
                         cfg->page_tokens,
                         cfg->prefix_replay,
                         cfg->prefix_cache_inexact,
                         decoder_tail(e->fx, cfg->decoder_tail),
                         cfg->kv_tier};
    if (tide_sched_init(&e->sched, &sc, e->fx, st) != 0) goto fail;
    if (cfg->spec_mode != TIDE_SPEC_OFF) {
        const tide_text_config *tc = &e->m->cfg.text;
        if (!e->m->has_dspark) {
            tide_fail(st, TIDE_ERR_UNSUPPORTED, "speculative decoding: this checkpoint has no DSpark stages");
            goto fail;
        }
        if (tc->dspark_block_size > TIDE_SPEC_MAX_BLOCK) {
            tide_fail(st, TIDE_ERR_UNSUPPORTED, "speculative decoding: draft block %lld is longer than %d",
                      (long long)tc->dspark_block_size, TIDE_SPEC_MAX_BLOCK);
            goto fail;
        }
        e->spec = cfg->spec_mode;
        e->draft_period = 8;
        e->block = (int)tc->dspark_block_size;
        e->spec_k = cfg->spec_k < e->block ? cfg->spec_k : e->block;
    }
    if (alloc_buffers(e, st) != 0) goto fail;
    if (e->m->cfg.vision.num_hidden_layers > 0) {
        if (tide_vision_bind(&e->vis, &e->m->cfg, e->m->ck, st) != 0) goto fail;
        e->has_vision = 1;
        e->imgs = calloc((size_t)cfg->max_seqs, sizeof *e->imgs);
        if (!e->imgs) {
            tide_fail(st, TIDE_ERR_NOMEM, "out of memory (image spans)");
            goto fail;
        }
    }
    if (e->spec) spec_profile(e);
    /* the overlap's forward thread; without one the passes run inline */
    if (cfg->overlap && pthread_mutex_init(&e->mu, NULL) == 0) {
        if (pthread_cond_init(&e->cv, NULL) != 0) pthread_mutex_destroy(&e->mu);
        else if (pthread_create(&e->thread, NULL, forward_thread, e) == 0) e->thread_on = 1;
        else {
            pthread_cond_destroy(&e->cv);
            pthread_mutex_destroy(&e->mu);
        }
    }
    *out = e;
    return 0;
fail:
    tide_engine_destroy(e);
    return tide_fail_ctx(st, "engine");
}

int tide_engine_create(const tide_engine_config *cfg, tide_engine **out, tide_status *st) {
    return create(cfg, NULL, out, st);
}

int tide_engine_create_with_model(const tide_engine_config *cfg, const tide_model *m, tide_engine **out,
                                  tide_status *st) {
    if (!m) return tide_fail(st, TIDE_ERR_INVALID, "engine: no model");
    return create(cfg, m, out, st);
}

void tide_engine_destroy(tide_engine *e) {
    if (!e) return;
    if (e->thread_on) { /* nothing is in flight between calls */
        pthread_mutex_lock(&e->mu);
        e->quit = 1;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
        pthread_cond_destroy(&e->cv);
        pthread_mutex_destroy(&e->mu);
    }
    for (int64_t i = 0; i < e->n_all; i++) {
        if (e->all[i]->has_cache) tide_fwd_seq_free(e->fx, &e->all[i]->cache);
        tide_req_free(e->all[i]);
    }
    free(e->all);
    if (e->sched.running) tide_sched_free(&e->sched);
    if (e->ws)
        for (int i = 0; i < e->n_ws; i++) tide_sampler_ws_free(&e->ws[i]);
    free(e->ws);
    free(e->allow);
    free(e->cmask);
    free(e->logits);
    free(e->seqs);
    free(e->in);
    free(e->res);
    free(e->par);
    free(e->rows);
    free(e->users);
    free(e->n_new);
    free(e->why);
    free(e->cand);
    free(e->avail);
    free(e->take);
    free(e->rres);
    free(e->spec_tok);
    free(e->surv);
    free(e->d_ids);
    free(e->d_conf);
    free(e->djob);
    free(e->dj_item);
    free(e->d_logits);
    free(e->dsp_in);
    if (e->has_vision) tide_vision_free(&e->vis);
    free(e->imgs);
    free(e->img_types);
    free(e->img_rows);
    tide_fwd_ctx_free(e->fx);
    tide_model_free(e->own_model);
    free(e);
}

int64_t tide_engine_vocab_size(const tide_engine *e) { return e->vocab; }

const tide_vision_config *tide_engine_vision(const tide_engine *e) {
    return e->has_vision ? &e->m->cfg.vision : NULL;
}

int64_t tide_engine_context(const tide_engine *e) { return e->m->cfg.text.max_position_embeddings; }

int tide_engine_eos_tokens(const tide_engine *e, const int32_t **ids) {
    *ids = e->gen.eos;
    return e->gen.n_eos;
}

static tide_req *find(const tide_engine *e, tide_request_id id) {
    int64_t lo = 0, hi = e->n_all;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (e->all[mid]->id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < e->n_all && e->all[lo]->id == id ? e->all[lo] : NULL;
}

/* A request's images through the tower, once, at submit (nothing is in
 * flight between engine calls, so the pool and the ops are free): each
 * span's input rows into q->img_rows (docs/vision.md). The pixels are not
 * kept. */
static int encode_images(tide_engine *e, const tide_request *r, tide_req *q, tide_status *st) {
    int64_t D = e->m->cfg.text.hidden_size, p = e->m->cfg.vision.patch_size;
    const tide_ops *ops = e->cfg.ops ? e->cfg.ops : tide_cpu_ops();
    q->img_rows = malloc((size_t)q->n_img_rows * (size_t)D * sizeof *q->img_rows);
    if (!q->img_rows) return tide_fail(st, TIDE_ERR_NOMEM, "request: out of memory (%lld image rows)",
                                       (long long)q->n_img_rows);
    for (int i = 0; i < r->n_images; i++) {
        const tide_request_image *ri = &r->images[i];
        tide_image im = {ri->w, ri->h, (uint8_t *)ri->rgb};
        tide_image_plan pl;
        if (tide_image_plan_grid(ri->w, ri->h, &e->m->cfg.vision, &pl, st) != 0) return -1;
        float *patches = malloc((size_t)(pl.n_vit_h * pl.n_vit_w * 3 * p * p) * sizeof *patches);
        if (!patches) return tide_fail(st, TIDE_ERR_NOMEM, "request: out of memory (image %d's patches)", i);
        int rc = tide_image_patches(&im, &pl, p, patches, st);
        if (rc == 0)
            rc = tide_vision_span_embeds(&e->vis, ops, tide_fwd_pool(e->fx), patches, &pl,
                                         q->img_rows + (int64_t)q->img_row[ri->pos] * D, st);
        free(patches);
        if (rc != 0) return tide_fail_ctx(st, "request: image %d", i);
    }
    return 0;
}

int tide_engine_submit(tide_engine *e, const tide_request *r, tide_request_id *id, tide_status *st) {
    if (id) *id = 0;
    if (!tide_engine_busy(e)) e->fwd_end = -1; /* idle until now: no gap to measure */
    uint64_t seed = tide_rng_derive_seed(e->cfg.seed, (uint64_t)e->next_id);
    tide_req *q;
    const tide_req_model rm = {e->vocab, (int32_t)e->m->cfg.image_token_id,
                               e->has_vision ? &e->m->cfg.vision : NULL, e->m->cfg.text.max_position_embeddings,
                               e->gen.eos, e->gen.n_eos};
    if (r && r->constraint && tide_cons_vocab_size_of(r->constraint) != e->vocab) {
        int n = (int)tide_cons_vocab_size_of(r->constraint);
        tide_cons_free(r->constraint);
        return tide_fail(st, TIDE_ERR_INVALID, "request: the constraint's vocabulary has %d tokens, the model %lld", n,
                         (long long)e->vocab);
    }
    if (tide_req_create(r, &rm, seed, &q, st) != 0) {
        if (r) tide_cons_free(r->constraint);
        return -1;
    }
    if (q->n_img_rows > 0 && encode_images(e, r, q, st) != 0) {
        tide_req_free(q);
        return -1;
    }
    /* the last token is never fed, so the cache holds n_prompt + max_tokens - 1 positions */
    int64_t nb = tide_sched_blocks_for(&e->sched, q->n_prompt + q->sp.max_tokens - 1);
    if (nb > e->cfg.kv_blocks) {
        tide_req_free(q);
        return tide_fail(st, TIDE_ERR_INVALID,
                         "request: prompt + max_tokens need %lld KV blocks; the pool has %lld",
                         (long long)nb, (long long)e->cfg.kv_blocks);
    }
    if (e->n_all == e->cap_all) {
        int64_t cap = e->cap_all ? 2 * e->cap_all : 64;
        tide_req **a = realloc(e->all, (size_t)cap * sizeof *a);
        if (!a) {
            tide_req_free(q);
            return tide_fail(st, TIDE_ERR_NOMEM, "engine: out of memory");
        }
        e->all = a;
        e->cap_all = cap;
    }
    if (tide_sched_enqueue(&e->sched, q, st) != 0) {
        tide_req_free(q);
        return -1;
    }
    q->id = e->next_id++;
    e->all[e->n_all++] = q;
    if (id) *id = q->id;
    return 0;
}

static void emit(tide_engine *e, tide_event_kind kind, const tide_req *q, int32_t token) {
    if (!e->cfg.on_event) return;
    tide_event ev = {kind, q->id, q->user, token, tide_req_output(q), tide_req_n_output(q),
                     q->n_prompt, q->reason, q->reason == TIDE_FINISH_ERROR ? q->error : NULL, q->n_cached,
                     0, 0, NULL, NULL, q->n_spec_verified, q->n_spec_accepted};
    e->cfg.on_event(e->cfg.event_ctx, &ev);
}

/* A TOKEN event with the sampler's log probabilities; n_output counts the
 * output up to this token (a verifying step appends several at once). */
static void emit_token(tide_engine *e, const tide_req *q, const tide_sample_result *r, int64_t n_output) {
    if (!e->cfg.on_event) return;
    tide_event ev = {TIDE_EVENT_TOKEN, q->id, q->user, r->token, tide_req_output(q), n_output,
                     q->n_prompt, q->reason, NULL, q->n_cached, r->logprob, r->n_top, r->top_ids, r->top_logprobs,
                     q->n_spec_verified, q->n_spec_accepted};
    e->cfg.on_event(e->cfg.event_ctx, &ev);
}

/* Takes q out of the scheduler (dropping its cache) and reports the end. */
static void finish(tide_engine *e, tide_req *q, tide_finish_reason reason) {
    tide_sched_remove(&e->sched, q);
    q->state = TIDE_REQ_FINISHED;
    q->reason = reason;
    if (reason == TIDE_FINISH_ERROR && !q->error) tide_req_set_error(q, "unknown error");
    e->n_finished++;
    emit(e, TIDE_EVENT_FINISHED, q, -1);
}

static void fail_all(tide_engine *e, const tide_sched_plan *p, const char *msg) {
    /* copy first: finishing removes from the running set the plan points into */
    for (int i = 0; i < p->n_items; i++) e->rows[i] = p->items[i].req;
    int n = p->n_items;
    for (int i = 0; i < n; i++) {
        tide_req_set_error(e->rows[i], msg);
        finish(e, e->rows[i], TIDE_FINISH_ERROR);
    }
}

/* Records an error on q when its logits hold a NaN or an infinity (the
 * model never produces one from sound weights: the sampler would only see
 * "no finite logit"); returns whether it did. The caller finishes q. */
static int bad_logits(tide_engine *e, tide_req *q, const float *logits) {
    int64_t bad = 0, first = -1;
    for (int64_t t = 0; t < e->vocab; t++)
        if (!isfinite(logits[t])) {
            if (first < 0) first = t;
            bad++;
        }
    if (bad == 0) return 0;
    char msg[256];
    snprintf(msg, sizeof msg,
             "request %lld: the model's logits at position %lld are not finite (%lld of %lld, the first for token "
             "%lld is %g): the checkpoint's weights are likely bad (NaN or Inf)",
             (long long)q->id, (long long)q->n_tokens - 1, (long long)bad, (long long)e->vocab, (long long)first,
             (double)logits[first]);
    tide_log(TIDE_LOG_ERROR, "engine: %s", msg);
    tide_req_set_error(q, msg);
    return 1;
}

/* The allowed tokens of a constrained row k: the constraint's mask (its
 * end tokens are the request's stop tokens) within the engine's own; sets
 * the request's error and returns 1 when the constraint cannot go on (the
 * caller ends it). */
static int constraint_mask(tide_engine *e, tide_req *q, int k, const uint32_t **allow) {
    size_t words = ((size_t)e->vocab + 31) / 32;
    uint32_t *m = e->cmask + (size_t)k * words;
    tide_status st = {0};
    if (tide_cons_mask(q->cons, m, q->sp.stop_tokens, q->sp.n_stop_tokens, &st) != 0) {
        char msg[TIDE_STATUS_MSG + 64];
        snprintf(msg, sizeof msg, "request %lld: %s", (long long)q->id, st.msg);
        tide_req_set_error(q, msg);
        return 1;
    }
    for (size_t w = 0; w < words; w++) m[w] &= e->allow[w];
    *allow = m;
    return 0;
}

/* While the flight's forward pass runs on the forward thread: the masks its
 * constrained rows will need, computed now so that sampling finds them in
 * the constraints' caches (a mask depends only on the tokens accepted so
 * far). A failure is left for sampling to report. */
static void prefetch_masks(tide_engine *e) {
    const tide_sched_plan *f = &e->sched.flight;
    for (int i = 0; i < f->n_items; i++) {
        tide_req *q = f->items[i].req;
        if (f->items[i].logits != TIDE_LOGITS_LAST || !q->cons) continue;
        tide_status st = {0};
        tide_cons_mask(q->cons, e->cmask, q->sp.stop_tokens, q->sp.n_stop_tokens, &st);
    }
}

/* Logit rows of a flight item: every fed row when it verifies drafts, the
 * last when it samples, none otherwise. */
static int64_t logit_rows(const tide_sched_item *it) {
    if (it->logits != TIDE_LOGITS_LAST) return 0;
    return it->req->n_verify > 0 ? it->n_tokens : 1;
}

/* Samples the rows that reached the end of their sequence and appends the
 * tokens (reporting and stopping come after the pages are registered:
 * report_rows). A plain row gives one token. A verifying row (its
 * sequence fed [last, d0 .. d(k-1)]) samples row j at position pos + 1 + j
 * with the request's (seed, position) exactly as plain decoding would, in
 * rounds: row j + 1 only if row j's token equals d_j. So the tokens are
 * those of plain decoding (greedy or sampled), and a draft token is
 * accepted with the target's probability of it, which is the standard
 * speculative rule for a draft that puts all its mass on one token (the
 * DSpark head drafts greedily): docs/spec.md. The cache is then rolled back
 * to the rows whose token was kept. Rows with non-finite logits, sampling
 * and append failures end their request (why = ERROR). */
static void sample_rows(tide_engine *e, const tide_sched_plan *p) {
    int stride = e->block + 1, rounds = 1;
    int64_t row = 0;
    for (int i = 0; i < p->n_items; i++) {
        const tide_sched_item *it = &p->items[i];
        e->n_new[i] = e->why[i] = 0;
        e->cand[i] = it->logits == TIDE_LOGITS_LAST ? (int)row : -1; /* first logit row */
        row += logit_rows(it);
        if (it->req->n_verify + 1 > rounds) rounds = it->req->n_verify + 1;
    }
    tide_status st = {0};
    double t0 = tide_now_seconds();
    for (int j = 0; j < rounds; j++) {
        int n = 0;
        for (int i = 0; i < p->n_items; i++) {
            tide_req *q = p->items[i].req;
            if (e->cand[i] < 0 || e->why[i] || e->n_new[i] != j || j > q->n_verify) continue; /* done */
            if (j > 0 && e->res[i * stride + j - 1].token != q->draft[j - 1]) continue;
            const float *lg = e->logits + (e->cand[i] + j) * e->vocab;
            if (bad_logits(e, q, lg)) {
                e->why[i] = TIDE_FINISH_ERROR;
                continue;
            }
            /* an output constraint: round j's mask follows the tokens that
             * stand (accepted below round by round), so a draft token it
             * forbids is never sampled, and nothing needs rolling back */
            const uint32_t *allow = e->allow;
            if (q->cons && constraint_mask(e, q, n, &allow)) {
                e->why[i] = TIDE_FINISH_ERROR;
                continue;
            }
            e->take[n] = i;
            e->par[n] = &q->sp;
            e->in[n] = (tide_sampler_input){.logits = lg,
                                            .allow = allow,
                                            .prompt = q->tokens,
                                            .n_prompt = q->n_prompt,
                                            .output = tide_req_output(q),
                                            .n_output = tide_req_n_output(q),
                                            .position = (uint64_t)q->n_tokens};
            n++;
        }
        if (n == 0) break;
        tide_sample_batch(tide_fwd_pool(e->fx), e->ws, e->par, e->in, e->rres, n, &st);
        for (int r = 0; r < n; r++) {
            int i = e->take[r];
            tide_req *q = p->items[i].req;
            int32_t t = e->rres[r].token;
            if (t < 0) {
                char msg[TIDE_STATUS_MSG + 64];
                snprintf(msg, sizeof msg, "request %lld: sampling failed: %s", (long long)q->id,
                         st.msg[0] ? st.msg : "no token");
                tide_req_set_error(q, msg);
                e->why[i] = TIDE_FINISH_ERROR;
                continue;
            }
            tide_status pst = {0};
            if (tide_req_push(q, t, &pst) != 0) {
                tide_req_set_error(q, pst.msg);
                e->why[i] = TIDE_FINISH_ERROR;
                continue;
            }
            if (q->cons && tide_cons_accept(q->cons, t, q->sp.stop_tokens, q->sp.n_stop_tokens, &pst) != 0) {
                tide_req_set_error(q, pst.msg); /* the mask allowed it: a bug */
                e->why[i] = TIDE_FINISH_ERROR;
                continue;
            }
            e->res[i * stride + e->n_new[i]++] = e->rres[r];
            tide_stop_reason why = tide_sampling_stop(&q->sp, t, tide_req_n_output(q));
            if (why == TIDE_STOP_TOKEN) e->why[i] = TIDE_FINISH_STOP;
            else if (why == TIDE_STOP_LENGTH) e->why[i] = TIDE_FINISH_LENGTH;
            else if (q->cons && tide_cons_done(q->cons)) e->why[i] = TIDE_FINISH_STOP; /* nothing else can follow */
        }
    }
    e->last_sample_s = tide_now_seconds() - t0;
    e->sample_s += e->last_sample_s;
    int verified = 0;
    for (int i = 0; i < p->n_items; i++) {
        tide_req *q = p->items[i].req;
        e->tokens_generated += e->n_new[i];
        if (e->spec && e->cand[i] >= 0) e->spec_seq_steps++;
        if (q->n_verify == 0) continue;
        int k = q->n_verify, acc = 0;
        while (acc < e->n_new[i] && acc < k && e->res[i * stride + acc].token == q->draft[acc]) acc++;
        q->n_spec_verified += k;
        q->n_spec_accepted += acc;
        e->spec_verified += k;
        e->spec_accepted += acc;
        verified = 1;
        /* the fed rows whose tokens stand: last, then the accepted drafts
         * that were followed by a token (the newest token is fed next) */
        tide_status rst = {0};
        if (q->has_cache && tide_seq_rollback(&q->cache, &q->ck, e->n_new[i], &rst) != 0) {
            tide_req_set_error(q, rst.msg);
            e->why[i] = TIDE_FINISH_ERROR;
        }
        q->n_draft = 0;
    }
    e->spec_steps += verified;
}

/* Reports the tokens sample_rows appended, one TOKEN event each, and ends
 * the requests that stopped or failed. */
static void report_rows(tide_engine *e, const tide_sched_plan *p) {
    int stride = e->block + 1;
    int n = p->n_items;
    for (int i = 0; i < n; i++) e->rows[i] = p->items[i].req; /* finishing edits the plan's owner */
    for (int i = 0; i < n; i++) {
        tide_req *q = e->rows[i];
        int64_t base = tide_req_n_output(q) - e->n_new[i];
        for (int j = 0; j < e->n_new[i]; j++) emit_token(e, q, &e->res[i * stride + j], base + j + 1);
        if (e->why[i]) finish(e, q, (tide_finish_reason)e->why[i]);
    }
}

/* The draft head after a pass (spec on): every committed row seeds the
 * DSpark stages' window rings, and every request that sampled and goes on
 * gets its next draft block from its last committed row (the row of
 * position sp = cache.pos - 1, whose token was just sampled); the blocks of
 * the step are drafted together (tide_dspark_draft_many), in groups of at
 * most DRAFT_GROUP sequences (its scratch holds their vocabulary logits). */
#define DRAFT_GROUP 16
static void draft_done(tide_engine *e, tide_req *q, const float *conf) {
    tide_spec_survival(conf, e->block, q->surv);
    q->n_draft = e->block;
    q->draft_at = q->n_tokens;
    e->spec_drafted += e->block;
}

static void draft_rows(tide_engine *e, const tide_sched_plan *p) {
    int64_t row = 0, width = e->m->cfg.text.n_dspark_target_layer_ids * e->m->cfg.text.hidden_size;
    double t0 = tide_now_seconds();
    int nj = 0;
    for (int i = 0; i < p->n_items; i++) {
        const tide_sched_item *it = &p->items[i];
        tide_req *q = e->rows[i];
        const float *h = e->dsp_in + row * width;
        row += it->n_tokens;
        if (q->state != TIDE_REQ_RUNNING || !q->has_cache) continue;
        int sampled = it->logits == TIDE_LOGITS_LAST;
        int64_t keep = q->n_verify > 0 ? e->n_new[i] : it->n_tokens, sp = it->pos + keep - 1;
        /* dspark while drafting does not pay: no draft but a probe every
         * draft_period steps */
        int skip = sampled && e->spec == TIDE_SPEC_DSPARK && e->draft_off &&
                   e->draft_skips % e->draft_period != e->draft_period - 1;
        int64_t seed = sampled && !skip ? keep - 1 : keep; /* the last row drafts (seeding its position) */
        tide_status st = {0};
        if (seed > 0 && tide_dspark_seed(e->fx, &q->cache, h, seed, it->pos, &st) != 0) goto bad;
        if (seed == keep) {
            if (skip) q->n_draft = 0;
            continue;
        }
        if (e->draft_hook) { /* tests: drafts from elsewhere; the rings are seeded all the same */
            if (tide_dspark_seed(e->fx, &q->cache, h + (keep - 1) * width, 1, sp, &st) != 0) goto bad;
            memset(e->d_conf, 0, (size_t)e->block * sizeof *e->d_conf);
            e->draft_hook(e->draft_ctx, q->user, q->tokens, q->n_tokens, q->draft, e->d_conf, e->block);
            draft_done(e, q, e->d_conf);
            continue;
        }
        e->dj_item[nj] = i;
        e->djob[nj] = (tide_dspark_job){&q->cache, h + (keep - 1) * width, sp, q->tokens[q->n_tokens - 1], NULL,
                                        {e->d_ids + (int64_t)nj * (e->block + 1), NULL,
                                         e->d_conf + (int64_t)nj * e->block}};
        nj++;
        continue;
    bad: /* the draft is only a guess: go on without one */
        tide_log(TIDE_LOG_WARN, "engine: request %lld: no draft: %s", (long long)q->id, st.msg);
        q->n_draft = 0;
    }
    for (int g = 0; g < nj; g += DRAFT_GROUP) {
        int n = nj - g < DRAFT_GROUP ? nj - g : DRAFT_GROUP;
        tide_status st = {0};
        int rc = tide_dspark_draft_many(e->fx, e->djob + g, n, &st);
        for (int j = g; j < g + n; j++) {
            tide_req *q = e->rows[e->dj_item[j]];
            if (rc != 0) { /* the draft is only a guess: go on without one */
                tide_log(TIDE_LOG_WARN, "engine: request %lld: no draft: %s", (long long)q->id, st.msg);
                q->n_draft = 0;
                continue;
            }
            memcpy(q->draft, e->djob[j].out.draft_ids + 1, (size_t)e->block * sizeof *q->draft);
            draft_done(e, q, e->djob[j].out.confidence);
        }
    }
    if (e->spec == TIDE_SPEC_DSPARK && e->draft_off) e->draft_skips++;
    e->draft_s += tide_now_seconds() - t0;
}

/* Before launch (spec on): the budget picks how many drafts each sampling
 * sequence verifies; the plan's items grow by them (as the token budget and
 * the KV pool allow), each verifying sequence takes a rollback checkpoint,
 * and the buffers grow to the pass's rows. */
static void spec_attach(tide_engine *e) {
    tide_sched *s = &e->sched;
    tide_sched_plan *p = &s->plan;
    int n = 0, win = e->m->cfg.text.sliding_window;
    for (int i = 0; i < p->n_items; i++) {
        const tide_sched_item *it = &p->items[i];
        tide_req *q = it->req;
        q->n_verify = 0;
        if (it->logits != TIDE_LOGITS_LAST || it->n_tokens != 1 || q->n_draft == 0 || q->draft_at != q->n_tokens ||
            it->pos != q->n_tokens - 1)
            continue;
        /* at most window - 1 drafts (rollback), none past max_tokens, and
         * as many decode rows as the forward can verify here */
        int64_t lim = q->n_draft, left = q->sp.max_tokens - tide_req_n_output(q) - 1;
        if (lim > win - 1) lim = win - 1;
        if (lim > left) lim = left;
        if (lim > 0) lim = tide_fwd_decode_rows_max(e->fx, &q->cache, 1 + lim) - 1;
        if (lim <= 0) continue;
        e->cand[n] = i;
        e->avail[n] = (int)lim;
        memcpy(e->surv + (int64_t)n * e->block, q->surv, (size_t)e->block * sizeof *q->surv);
        n++;
    }
    if (n > 0) {
        int64_t B = tide_spec_budget(&e->costs, e->spec, e->spec_k, n, e->surv, e->block, e->avail, p->n_tokens,
                                     e->cfg.max_step_tokens - p->n_tokens, e->take);
        /* dspark: did drafting pay this step? if not, draft_rows stops
         * drafting (probing now and then) */
        double sb = 0;
        for (int c = 0; c < n; c++)
            for (int j = 0; j < e->take[c]; j++) sb += e->surv[(int64_t)c * e->block + j];
        int off = e->spec == TIDE_SPEC_DSPARK && !tide_spec_draft_pays(&e->costs, n, sb, p->n_tokens, B);
        /* a probe that did not pay either: probe half as often (8 .. 64 steps) */
        e->draft_period = !off ? 8 : e->draft_off && e->draft_period < 64 ? 2 * e->draft_period : e->draft_period;
        e->draft_off = off;
        e->draft_skips = 0;
    }
    for (int c = 0; c < n; c++) {
        if (e->take[c] == 0) continue;
        tide_req *q = p->items[e->cand[c]].req;
        tide_status st = {0};
        if (tide_seq_checkpoint(&q->cache, &q->ck, 1 + e->take[c], &st) != 0) continue;
        q->ck.decode_rows = 1; /* the verify rows compute what decode steps would */
        int g = (int)tide_sched_extend(s, e->cand[c], e->take[c]);
        q->n_verify = g;
        int32_t *t = e->spec_tok + (int64_t)e->cand[c] * (e->block + 1);
        t[0] = q->tokens[q->n_tokens - 1];
        memcpy(t + 1, q->draft, (size_t)g * sizeof *t);
        if (g == 0) q->cache.ckpt = NULL; /* nothing granted: plain decoding */
    }
    int64_t rows = 0;
    for (int i = 0; i < p->n_items; i++) rows += logit_rows(&p->items[i]);
    int64_t width = e->m->cfg.text.n_dspark_target_layer_ids * e->m->cfg.text.hidden_size;
    grow(&e->logits, &e->logit_cap, rows, e->vocab);
    grow(&e->dsp_in, &e->dsp_cap, p->n_tokens, width);
}

/* ---- one step: prepare, launch, complete ----------------------------------- */

/* Prepare: plans the next step (while the one in flight runs, if any:
 * sched.h says what the planner reads of it) and reports the requests
 * planning dropped. */
static void step_prepare(tide_engine *e) {
    tide_sched *s = &e->sched;
    tide_sched_make_plan(s);
    const tide_sched_plan *p = &s->plan;
    for (int i = 0; i < p->n_failed; i++) {
        tide_req *q = p->failed[i];
        q->state = TIDE_REQ_FINISHED; /* already out of the scheduler */
        q->reason = TIDE_FINISH_ERROR;
        e->n_finished++;
        emit(e, TIDE_EVENT_FINISHED, q, -1);
    }
}

/* The pass in flight. When overlapping it runs on the forward thread and
 * touches only e->seqs (read), e->logits, the flight's sequence caches and
 * the KV blocks they hold (written), and frc / fst / fwd_done; the wait
 * publishes them to the driving thread. */
static void run_forward(tide_engine *e) {
    tide_step_out out = {e->logits, e->spec ? e->dsp_in : NULL};
    if (e->fault && e->fault(e->fault_ctx, e->users, e->n_seqs, &e->fst) != 0) e->frc = -1;
    else e->frc = tide_forward_images(e->fx, e->seqs, e->n_seqs, e->n_img ? e->imgs : NULL, &out, &e->fst);
    /* a backend's device error (sticky: every later pass fails too) fails
     * the pass's requests like any failed pass */
    const tide_ops *ops = e->cfg.ops;
    if (e->frc == 0 && ops && ops->error && ops->error(ops, &e->fst) != 0) e->frc = -1;
    e->fwd_done = tide_now_seconds();
}

/* The forward thread: one per overlapping engine, for its whole life (no
 * thread is created per step). */
static void *forward_thread(void *arg) {
    tide_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (e->job != 1 && !e->quit) pthread_cond_wait(&e->cv, &e->mu);
        if (e->quit) break;
        pthread_mutex_unlock(&e->mu);
        run_forward(e);
        pthread_mutex_lock(&e->mu);
        e->job = 2;
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static void forward_wait(tide_engine *e) {
    pthread_mutex_lock(&e->mu);
    while (e->job != 2) pthread_cond_wait(&e->cv, &e->mu);
    e->job = 0;
    pthread_mutex_unlock(&e->mu);
}

/* The flight's image spans: for every item whose chunk holds span
 * positions, their types and input rows (the request's, by position), so a
 * span may be split across chunks (the forward pass's rows are
 * independent) and a recompute or a bounded replay feeds them again. */
static void flight_images(tide_engine *e, const tide_sched_plan *f) {
    int64_t D = e->m->cfg.text.hidden_size, row = 0, need = 0;
    e->n_img = 0;
    for (int i = 0; i < f->n_items; i++) {
        const tide_sched_item *it = &f->items[i];
        if (it->req->img_types && it->pos < it->req->n_prompt) need += it->n_tokens;
    }
    if (need > e->img_cap) {
        int8_t *t = realloc(e->img_types, (size_t)need);
        if (t) e->img_types = t;
        float *r = t ? realloc(e->img_rows, (size_t)(need * D) * sizeof *r) : NULL;
        if (!r) abort(); /* out of memory: as the step's other buffers (grow) */
        e->img_rows = r;
        e->img_cap = need;
    }
    for (int i = 0; i < f->n_items; i++) {
        const tide_sched_item *it = &f->items[i];
        const tide_req *q = it->req;
        e->imgs[i] = (tide_step_image){NULL, NULL};
        if (!q->img_types || it->pos >= q->n_prompt) continue;
        int8_t *ty = e->img_types + row;
        float *rw = e->img_rows + row * D;
        int any = 0;
        for (int64_t t = 0; t < it->n_tokens; t++) {
            int64_t at = it->pos + t;
            ty[t] = at < q->n_prompt ? q->img_types[at] : -1;
            if (ty[t] < 0) continue;
            memcpy(rw + t * D, q->img_rows + (int64_t)q->img_row[at] * D, (size_t)D * sizeof *rw);
            any = 1;
        }
        row += it->n_tokens;
        if (!any) continue;
        e->imgs[i] = (tide_step_image){ty, rw};
        e->n_img++;
    }
}

/* Launch: the host side first (the batch's KV blocks are reserved, so the
 * pass leaves the pool's free list alone; the plan becomes the flight and
 * its descriptors are built), then the pass: on the forward thread when
 * overlapping (returns 1: join it), else inline (returns 0). */
static int step_launch(tide_engine *e) {
    tide_sched *s = &e->sched;
    e->fst = (tide_status){0};
    int rc = tide_sched_reserve(s, &e->fst);
    tide_sched_launch(s);
    const tide_sched_plan *f = &s->flight;
    e->last_seqs = f->n_items;
    e->last_tokens = f->n_tokens;
    if (rc != 0) {
        e->frc = -1;
        e->fwd_done = tide_now_seconds();
        return 0;
    }
    for (int i = 0; i < f->n_items; i++) {
        tide_req *q = f->items[i].req;
        e->seqs[i] = (tide_step_seq){&q->cache, q->tokens + f->items[i].pos, f->items[i].n_tokens, f->items[i].logits};
        if (q->n_verify > 0) { /* [last, drafts]: every row's logits */
            e->seqs[i].tokens = e->spec_tok + (int64_t)i * (e->block + 1);
            e->seqs[i].logits = TIDE_LOGITS_ALL;
        }
        e->users[i] = q->user;
    }
    e->n_seqs = f->n_items;
    if (e->has_vision) flight_images(e, f);
    if (e->thread_on) {
        pthread_mutex_lock(&e->mu);
        e->job = 1;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        return 1;
    }
    run_forward(e); /* overlap off, or no thread to be had: the same result, later */
    return 0;
}

/* A failed pass. Alone, its request fails with the message. In a batch
 * the culprit is unknown (the pass may have failed for one request, or for
 * the batch's size): every request goes back to the queue without its
 * cache and is retried in a pass of its own (tide_sched_retry_alone), where
 * it either succeeds (and batches again) or fails alone. The others never
 * notice: recomputation gives the same tokens. */
static void pass_failed(tide_engine *e) {
    const tide_sched_plan *f = &e->sched.flight;
    tide_log(TIDE_LOG_ERROR, "engine: step %lld: the forward pass of %d request(s) failed: %s", (long long)e->steps,
             f->n_items, e->fst.msg);
    e->failed_passes++;
    if (f->n_items == 1) {
        char msg[TIDE_STATUS_MSG + 64];
        snprintf(msg, sizeof msg, "the forward pass failed: %s", e->fst.msg);
        fail_all(e, f, msg);
        return;
    }
    /* copy first: requeueing removes from the running set the flight points into */
    int n = f->n_items;
    for (int i = 0; i < n; i++) e->rows[i] = f->items[i].req;
    for (int i = n - 1; i >= 0; i--) tide_sched_retry_alone(&e->sched, e->rows[i]);
}

/* Complete: after a failed pass, pass_failed; otherwise pages are
 * registered (before a finish drops them), then the rows are sampled and
 * reported. A request that finishes leaves the next plan too. */
static void step_complete(tide_engine *e) {
    tide_sched *s = &e->sched;
    if (e->frc != 0) {
        pass_failed(e);
    } else {
        e->tokens_fed += s->flight.n_tokens;
        for (int i = 0; i < s->flight.n_items; i++) s->flight.items[i].req->solo = 0; /* it passed */
        sample_rows(e, &s->flight); /* appends, rolls back rejected drafts */
        tide_sched_after_step(s);
        report_rows(e, &s->flight);
        if (e->spec) draft_rows(e, &s->flight);
    }
    tide_sched_land(s);
}

/* Books a step's phase times: t0 start, t1 launch, tc start of complete
 * (t1 = tc when no pass ran), t3 end; plan: planning time outside the pass
 * window, hidden: planning inside it (overlap); done: when the pass ended. */
static void account(tide_engine *e, double t0, double t1, double tc, double t3, double plan, double hidden,
                    double done, int ran) {
    e->last_prepare_s = plan;
    e->last_forward_s = tc - t1 - (plan - (t1 - t0));
    e->last_complete_s = t3 - tc;
    e->last_hidden_s = hidden;
    e->prepare_s += e->last_prepare_s;
    e->forward_s += e->last_forward_s;
    e->complete_s += e->last_complete_s;
    e->hidden_s += hidden;
    e->last_gap_s = 0;
    if (ran) {
        e->forwards++;
        if (e->fwd_end >= 0) {
            e->last_gap_s = t1 - e->fwd_end;
            e->gap_s += e->last_gap_s;
            e->gap_forward_s += done - t1;
            e->gaps++;
        }
        e->fwd_end = done;
    }
    e->last_step_seconds = t3 - t0;
    e->step_seconds += e->last_step_seconds;
}

/* One call: a fresh plan if none is pending (nothing was in flight when the
 * last call planned, or it planned nothing), launch it, plan the next step
 * meanwhile, wait for the pass, complete it. The next plan stays pending
 * for the next call; nothing is in flight between calls, so the API calls
 * in between (submit, cancel, release) never race with a pass. With the
 * overlap off the same happens in the same order on one thread, so the
 * plans, and the tokens, are the same either way. */
int tide_engine_step(tide_engine *e, tide_status *st) {
    if (!e) return tide_fail(st, TIDE_ERR_INVALID, "engine step: no engine");
    if (!tide_engine_busy(e)) return 0;
    tide_sched *s = &e->sched;
    double t0 = tide_now_seconds();
    e->last_sample_s = 0;
    if (s->plan.n_items == 0) step_prepare(e);
    double t1 = tide_now_seconds(), tc = t1, plan = t1 - t0, hidden = 0, done = t1;
    int ran = s->plan.n_items > 0;
    if (ran) {
        if (e->spec) spec_attach(e);
        int threaded = step_launch(e);
        double tp = tide_now_seconds();
        /* speculative steps are planned afresh: how far a verifying
         * sequence gets is known only after its rows are sampled */
        if (!e->spec) step_prepare(e);
        double dt = tide_now_seconds() - tp;
        if (threaded) {
            prefetch_masks(e);
            forward_wait(e);
            hidden = dt;
        } else {
            plan += dt;
        }
        tc = tide_now_seconds();
        done = e->fwd_done;
        step_complete(e);
    } else {
        e->last_seqs = e->last_tokens = 0;
    }
    account(e, t0, t1, tc, tide_now_seconds(), plan, hidden, done, ran);
    if (!tide_engine_busy(e)) e->fwd_end = -1;
    e->steps++;
    return 0;
}

int tide_engine_busy(const tide_engine *e) { return e->sched.wq_n > 0 || e->sched.n_running > 0; }

int tide_engine_run(tide_engine *e, tide_status *st) {
    while (tide_engine_busy(e))
        if (tide_engine_step(e, st) != 0) return -1;
    return 0;
}

int tide_engine_cancel(tide_engine *e, tide_request_id id, tide_status *st) {
    tide_req *q = find(e, id);
    if (!q) return tide_fail(st, TIDE_ERR_INVALID, "cancel: no request %lld", (long long)id);
    if (q->state != TIDE_REQ_FINISHED) finish(e, q, TIDE_FINISH_CANCELLED);
    return 0;
}

int tide_engine_get(const tide_engine *e, tide_request_id id, tide_request_info *info, tide_status *st) {
    const tide_req *q = find(e, id);
    if (!q) return tide_fail(st, TIDE_ERR_INVALID, "get: no request %lld", (long long)id);
    info->state = q->state;
    info->reason = q->reason;
    info->error = q->reason == TIDE_FINISH_ERROR ? q->error : NULL;
    info->n_prompt = q->n_prompt;
    info->output = tide_req_output(q);
    info->n_output = tide_req_n_output(q);
    info->seed = q->sp.seed;
    info->n_preempted = q->n_preempted;
    info->n_cached = q->n_cached;
    info->n_spec_verified = q->n_spec_verified;
    info->n_spec_accepted = q->n_spec_accepted;
    return 0;
}

void tide_engine_release(tide_engine *e, tide_request_id id) {
    tide_req *q = find(e, id);
    if (!q) return;
    if (q->state != TIDE_REQ_FINISHED) tide_sched_remove(&e->sched, q);
    else e->n_finished--;
    int64_t i = 0;
    while (e->all[i] != q) i++;
    memmove(e->all + i, e->all + i + 1, (size_t)(e->n_all - i - 1) * sizeof *e->all);
    e->n_all--;
    tide_req_free(q);
}

void tide_engine_get_stats(const tide_engine *e, tide_engine_stats *s) {
    const tide_kv_pool *kv = tide_fwd_kv(e->fx);
    memset(s, 0, sizeof *s);
    s->n_waiting = e->sched.wq_n;
    s->n_running = e->sched.n_running;
    s->n_finished = e->n_finished;
    s->kv_blocks_total = kv->max_blocks;
    s->kv_blocks_used = tide_kv_used(kv);
    s->kv_block_bytes = (int64_t)tide_kv_block_bytes(kv);
    for (int k = 0; k < e->sched.n_src; k++)
        s->kv_bytes_per_token += (double)tide_kv_pos_bytes(kv) / (double)e->sched.ratio[k];
    {
        const tide_model *m = tide_fwd_model(e->fx);
        s->kv_ring_bytes = (int64_t)m->n_layers * m->cfg.text.sliding_window *
                           (int64_t)tide_kv_entry_bytes(TIDE_KV_WINDOW, m->cfg.text.head_dim);
    }
    s->steps = e->steps;
    s->tokens_fed = e->tokens_fed;
    s->tokens_generated = e->tokens_generated;
    s->preemptions = e->sched.preemptions;
    s->decoder_tail = e->sched.cfg.decoder_tail;
    s->decoder_rows_skipped = e->sched.decoder_rows_skipped;
    s->failed_passes = e->failed_passes;
    s->step_seconds = e->step_seconds;
    s->last_step_seconds = e->last_step_seconds;
    s->last_step_seqs = e->last_seqs;
    s->last_step_tokens = e->last_tokens;
    s->overlap_seconds = e->hidden_s;
    s->last_overlap_seconds = e->last_hidden_s;
    s->prepare_seconds = e->prepare_s;
    s->forward_seconds = e->forward_s;
    s->complete_seconds = e->complete_s;
    s->last_prepare_seconds = e->last_prepare_s;
    s->last_forward_seconds = e->last_forward_s;
    s->last_complete_seconds = e->last_complete_s;
    s->host_seconds = e->prepare_s + e->complete_s;
    s->last_host_seconds = e->last_prepare_s + e->last_complete_s;
    s->sample_seconds = e->sample_s;
    s->last_sample_seconds = e->last_sample_s;
    s->forwards = e->forwards;
    s->idle_gap_seconds = e->gap_s;
    s->last_idle_gap_seconds = e->last_gap_s;
    s->idle_gaps = e->gaps;
    if (e->gap_s + e->gap_forward_s > 0) s->idle_fraction = e->gap_s / (e->gap_s + e->gap_forward_s);
    if (e->step_seconds > 0) {
        s->tokens_per_s = (double)e->tokens_fed / e->step_seconds;
        s->generated_per_s = (double)e->tokens_generated / e->step_seconds;
    }
    s->spec_steps = e->spec_steps;
    s->spec_seq_steps = e->spec_seq_steps;
    s->spec_drafted = e->spec_drafted;
    s->spec_verified = e->spec_verified;
    s->spec_accepted = e->spec_accepted;
    s->spec_verify_fixed_s = e->costs.verify_fixed;
    s->spec_verify_token_s = e->costs.verify_per_token;
    s->spec_draft_seq_s = e->costs.draft_per_seq;
    s->spec_draft_seconds = e->draft_s;
    const tide_sched *sc = &e->sched;
    if (!sc->prefix_on) return;
    const tide_sched_prefix *x = &sc->px;
    tide_prefix_stats ps = tide_prefix_get_stats(&x->pc);
    s->prefix_lookup_tokens = x->lookup_tokens;
    s->prefix_hit_tokens = x->hit_tokens;
    if (x->lookup_tokens > 0) s->prefix_hit_rate = (double)x->hit_tokens / (double)x->lookup_tokens;
    s->prefix_replay_tokens = x->replay_tokens;
    s->prefix_hits = x->hits;
    s->page_tokens = x->page_tokens;
    s->prefix_pages_total = ps.n_pages;
    s->prefix_pages_in_use = ps.n_in_use;
    s->prefix_pages_cached = ps.n_cached;
    s->prefix_pages_idle = ps.n_idle;
    s->prefix_evictions = ps.evicted;
    s->kv_tier_fetched = x->tier_fetched;
    s->kv_tier_stored = x->tier_stored;
    s->kv_blocks_cached = (int64_t)ps.n_idle * x->bpp;
    s->prefix_inexact_admissions = x->inexact_admissions;
    s->prefix_pages_withheld = x->withheld_pages;
    s->prefix_pages_inexact = x->inexact_cached;
}

int64_t tide_engine_clear_prefix_cache(tide_engine *e) { return tide_sched_clear_prefix(&e->sched); }

int tide_engine_check(const tide_engine *e, tide_status *st) { return tide_sched_check(&e->sched, st); }

void tide_engine_set_draft_hook(tide_engine *e, tide_engine_draft_fn fn, void *ctx) {
    e->draft_hook = fn;
    e->draft_ctx = ctx;
}

void tide_engine_set_fault(tide_engine *e, tide_engine_fault_fn fn, void *ctx) {
    e->fault = fn;
    e->fault_ctx = ctx;
}
