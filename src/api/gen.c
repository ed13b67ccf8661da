/* The generation layer's engine wrapper (api/gen.h): the engine and the
 * tokenizer, the queues other threads submit and cancel through, and the
 * engine thread. The sessions themselves are gen_session.c.
 *
 * Why a queue rather than a lock around the engine: the engine is driven by
 * one thread (include/tide.h), and a step can take long (a big prefill);
 * submitters must not wait for it. They render and tokenize on their own
 * thread, then only link the session into `pending` under the mutex. */
#include "api/gen_session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/constrain.h"
#include "engine/engine.h"
#include "text/render.h"

/* ---- creation ---- */

/* The one place that decides the model's end ids: the checkpoint's
 * eos_token_id (tide_engine_eos_tokens: generation_config.json, else
 * config.json); a checkpoint that names none falls back on the tokenizer's
 * <｜end▁of▁sentence｜>. Sessions put them in their stop_tokens (unless
 * ignore_eos), so the engine's own stop_at_eos stays off. */
static int find_stop_ids(tide_gen_engine *g, tide_status *st) {
    const int32_t *ids;
    int n = tide_engine_eos_tokens(g->e, &ids);
    for (int i = 0; i < n && g->n_stop_ids < sizeof g->stop_ids / sizeof g->stop_ids[0]; i++)
        g->stop_ids[g->n_stop_ids++] = ids[i];
    if (g->n_stop_ids) return 0;
    int32_t eos = tide_tokenizer_token_id(g->tok, TIDE_TOK_EOS, strlen(TIDE_TOK_EOS));
    if (eos < 0 || eos >= g->vocab)
        return tide_fail(st, TIDE_ERR_FORMAT, "the checkpoint names no eos_token_id and the tokenizer has no %s token",
                         TIDE_TOK_EOS);
    g->stop_ids[g->n_stop_ids++] = eos;
    return 0;
}

int tide_gen_create(const tide_engine_config *cfg, const char *tokenizer, tide_gen_engine **out, tide_status *st) {
    *out = NULL;
    tide_gen_engine *g = calloc(1, sizeof *g);
    if (!g) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    pthread_mutex_init(&g->cmu, NULL);
    g->pending_tail = &g->pending;
    g->next_id = 1;
    char path[4096];
    if (!tokenizer) {
        snprintf(path, sizeof path, "%s/tokenizer.json", cfg->model_dir ? cfg->model_dir : ".");
        tokenizer = path;
    }
    tide_engine_config c = *cfg;
    c.on_event = tide_gen_on_event;
    c.event_ctx = g;
    if (tide_tokenizer_load(tokenizer, &g->tok, st) != 0 || tide_engine_create(&c, &g->e, st) != 0) {
        tide_gen_destroy(g);
        return -1;
    }
    g->vocab = (int32_t)tide_engine_vocab_size(g->e);
    g->vision = tide_engine_vision(g->e);
    g->image_token = g->vision ? tide_tokenizer_token_id(g->tok, TIDE_CONV_IMAGE_PLACEHOLDER,
                                                         strlen(TIDE_CONV_IMAGE_PLACEHOLDER))
                               : -1;
    g->context = tide_engine_context(g->e);
    if (find_stop_ids(g, st) != 0) {
        tide_gen_destroy(g);
        return -1;
    }
    tide_engine_get_stats(g->e, &g->stats.engine);
    *out = g;
    return 0;
}

const tide_tokenizer *tide_gen_tokenizer(const tide_gen_engine *g) { return g->tok; }

const int32_t *tide_gen_stop_ids(const tide_gen_engine *g, size_t *n) {
    *n = g->n_stop_ids;
    return g->stop_ids;
}

int tide_gen_count_tokens(const tide_gen_engine *g, const tide_api_req *req, int64_t *n_tokens, tide_status *st) {
    tide_tok_ids ids = {0};
    int in_reasoning;
    int rc = tide_gen_prompt_ids(g, req, &ids, &in_reasoning, st);
    *n_tokens = rc == 0 ? (int64_t)ids.n : 0;
    tide_tok_ids_free(&ids);
    return rc;
}

void tide_gen_get_stats(tide_gen_engine *g, tide_gen_stats *s) {
    pthread_mutex_lock(&g->mu);
    *s = g->stats;
    pthread_mutex_unlock(&g->mu);
}

/* ---- the driving thread's bookkeeping ---- */

void tide_gen_unlink_active(tide_gen_engine *g, gen_session *s) {
    for (gen_session **p = &g->active; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            return;
        }
}

void tide_gen_defer_release(tide_gen_engine *g, tide_request_id rid) {
    if (g->n_release == g->cap_release) {
        size_t cap = g->cap_release ? 2 * g->cap_release : 64;
        tide_request_id *p = realloc(g->release, cap * sizeof *p);
        if (!p) { /* released now: its info is not read again (the event copied it) */
            return;
        }
        g->release = p;
        g->cap_release = cap;
    }
    g->release[g->n_release++] = rid;
}

static void release_finished(tide_gen_engine *g) {
    for (size_t i = 0; i < g->n_release; i++) tide_engine_release(g->e, g->release[i]);
    g->n_release = 0;
}

/* Gives a session to the engine; a refusal ends it with done(error). */
static void admit(tide_gen_engine *g, gen_session *s) {
    tide_status st = {0};
    s->next = g->active;
    g->active = s;
    if (tide_gen_session_submit(s, &st) != 0) tide_gen_session_abort(s, st.msg);
}

/* After a step (outside the callbacks): choices whose output ended stop,
 * sessions whose sink gave up or failed are cancelled. */
static void after_step(tide_gen_engine *g) {
    for (int again = 1; again;) {
        again = 0;
        for (gen_session *s = g->active; s; s = s->next) {
            if (s->cancel_pending) {
                tide_gen_session_cancel(s); /* may free s: rescan */
                again = 1;
                break;
            }
            for (int i = 0; !again && i < s->n; i++) {
                gen_choice *c = &s->ch[i];
                if (c->ended && c->rid && !c->finished) {
                    tide_status st = {0};
                    (void)tide_engine_cancel(g->e, c->rid, &st);
                    again = 1; /* its FINISHED may have freed s: rescan */
                }
            }
            if (again) break;
        }
    }
    release_finished(g);
    pthread_mutex_lock(&g->mu);
    tide_engine_get_stats(g->e, &g->stats.engine);
    pthread_mutex_unlock(&g->mu);
}

static void cancel_id(tide_gen_engine *g, tide_gen_id id) {
    for (gen_session *s = g->active; s; s = s->next)
        if (s->id == id) {
            tide_gen_session_cancel(s);
            return;
        }
}

/* Takes what other threads queued: new sessions (in order), then cancels
 * (a cancel may name a session submitted in the same batch). */
static void drain_queues(tide_gen_engine *g) {
    pthread_mutex_lock(&g->mu);
    gen_session *p = g->pending;
    g->pending = NULL;
    g->pending_tail = &g->pending;
    size_t nc = g->n_cancels;
    tide_gen_id cancels[64];
    if (nc > 64) nc = 64;
    if (nc) { /* g->cancels is NULL until the first cancel: no memcpy from it */
        memcpy(cancels, g->cancels, nc * sizeof *cancels);
        memmove(g->cancels, g->cancels + nc, (g->n_cancels - nc) * sizeof *cancels);
        g->n_cancels -= nc;
    }
    pthread_mutex_unlock(&g->mu);
    while (p) {
        gen_session *next = p->next;
        admit(g, p);
        p = next;
    }
    for (size_t i = 0; i < nc; i++) cancel_id(g, cancels[i]);
    release_finished(g);
}

/* ---- synchronous driving ---- */

int tide_gen_step(tide_gen_engine *g, tide_status *st) {
    if (g->started) return tide_fail(st, TIDE_ERR_INVALID, "tide_gen_step: the engine thread drives this engine");
    drain_queues(g);
    int rc = tide_engine_step(g->e, st);
    after_step(g);
    return rc;
}

int tide_gen_busy(tide_gen_engine *g) {
    pthread_mutex_lock(&g->mu);
    int queued = g->pending != NULL || g->n_cancels > 0;
    pthread_mutex_unlock(&g->mu);
    return queued || tide_engine_busy(g->e);
}

int tide_gen_run(tide_gen_engine *g, tide_status *st) {
    while (tide_gen_busy(g))
        if (tide_gen_step(g, st) != 0) return -1;
    return 0;
}

/* ---- the engine thread ---- */

static int has_work(tide_gen_engine *g) {
    return g->pending != NULL || g->n_cancels > 0 || tide_engine_busy(g->e);
}

static void *engine_thread(void *arg) {
    tide_gen_engine *g = arg;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        while (!g->stopping && !has_work(g)) pthread_cond_wait(&g->cv, &g->mu);
        int stopping = g->stopping;
        pthread_mutex_unlock(&g->mu);
        drain_queues(g);
        if (stopping) break;
        tide_status st = {0};
        if (tide_engine_step(g->e, &st) != 0) /* an internal error: fail what is running */
            for (gen_session *s = g->active; s; s = s->next) {
                if (!s->error) s->error = strdup(st.msg);
                s->cancel_pending = 1;
            }
        after_step(g);
    }
    while (g->active) tide_gen_session_cancel(g->active);
    release_finished(g);
    return NULL;
}

int tide_gen_start(tide_gen_engine *g, tide_status *st) {
    if (g->started) return 0;
    if (pthread_create(&g->thread, NULL, engine_thread, g) != 0)
        return tide_fail(st, TIDE_ERR_IO, "cannot start the engine thread");
    g->started = 1;
    return 0;
}

/* ---- from any thread ---- */

void tide_gen_set_image_limits(tide_gen_engine *g, const tide_gen_image_limits *lim) { g->img_lim = *lim; }

int tide_gen_submit(tide_gen_engine *g, const tide_gen_input *in, tide_gen_id *id, tide_status *st) {
    gen_session *s;
    if (tide_gen_session_new(g, in, &s, st) != 0) return -1;
    pthread_mutex_lock(&g->mu);
    s->id = g->next_id++;
    g->stats.sessions_active++;
    if (!g->started) pthread_mutex_unlock(&g->mu);
    if (id) *id = s->id;
    if (!g->started) { /* the caller drives: straight to the engine, errors to the caller */
        s->next = g->active;
        g->active = s;
        if (tide_gen_session_submit(s, st) != 0) {
            tide_gen_unlink_active(g, s);
            pthread_mutex_lock(&g->mu);
            g->stats.sessions_active--;
            pthread_mutex_unlock(&g->mu);
            tide_gen_session_free(s);
            return -1;
        }
        return 0;
    }
    *g->pending_tail = s;
    g->pending_tail = &s->next;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return 0;
}

void tide_gen_cancel(tide_gen_engine *g, tide_gen_id id) {
    if (!g->started) {
        cancel_id(g, id);
        release_finished(g);
        return;
    }
    pthread_mutex_lock(&g->mu);
    if (g->n_cancels == g->cap_cancels) {
        size_t cap = g->cap_cancels ? 2 * g->cap_cancels : 64;
        tide_gen_id *p = realloc(g->cancels, cap * sizeof *p);
        if (p) g->cancels = p, g->cap_cancels = cap;
    }
    if (g->n_cancels < g->cap_cancels) g->cancels[g->n_cancels++] = id;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void tide_gen_destroy(tide_gen_engine *g) {
    if (!g) return;
    if (g->started) {
        pthread_mutex_lock(&g->mu);
        g->stopping = 1;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->thread, NULL);
    } else if (g->e) {
        while (g->pending || g->n_cancels) drain_queues(g);
        while (g->active) tide_gen_session_cancel(g->active);
        release_finished(g);
    }
    tide_engine_destroy(g->e);
    tide_tokenizer_free(g->tok);
    free(g->cancels);
    free(g->release);
    tide_cons_vocab_free(g->cvocab);
    tide_cons_cache_free(g->ccache);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    pthread_mutex_destroy(&g->cmu);
    free(g);
}
