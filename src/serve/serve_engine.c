/* The engine thread: loads the model, then loops — submit the queued jobs,
 * cancel the ones whose client left or whose time ran out, run one engine
 * step, finish the ones that ended — and sleeps when there is nothing to
 * do. Only this thread touches the engine, the detokenizers and the output
 * formatters; it meets the HTTP threads under srv->mu. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <microhttpd.h>

#include "engine/engine.h"
#include "model/model.h"
#include "base/log.h"
#include "serve/serve_internal.h"

static void list_remove(serve_job **head, serve_job *j) {
    if (j->prev) j->prev->next = j->next;
    else *head = j->next;
    if (j->next) j->next->prev = j->prev;
    j->next = j->prev = NULL;
}

static void list_push(serve_job **head, serve_job *j) {
    j->prev = NULL;
    j->next = *head;
    if (*head) (*head)->prev = j;
    *head = j;
}

void serve_engine_enqueue(tide_server *srv, serve_job *j) {
    pthread_mutex_lock(&srv->mu);
    if (srv->quit) { /* the engine thread is gone: answer 503 at once */
        serve_reply r = {0};
        serve_error(&r, j->api, 503, "service_unavailable", NULL, "the server is shutting down");
        if (!j->stream) tide_sb_addn(&j->buf, r.body ? r.body : "", r.len);
        free(r.body);
        j->status = 503;
        j->finished = 1;
        pthread_mutex_unlock(&srv->mu);
        return;
    }
    j->refs++; /* the engine side's */
    srv->n_jobs++;
    list_push(&srv->pending, j);
    pthread_cond_signal(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
}

/* Hands the job's output to its connection (under mu). */
static void wake(serve_job *j) {
    if (j->suspended && j->conn) {
        j->suspended = 0;
        MHD_resume_connection(j->conn);
    }
}

/* The job is complete: buf holds everything; the engine side lets go. */
static void finalize(tide_server *srv, serve_job *j) {
    pthread_mutex_lock(&srv->mu);
    list_remove(&srv->active, j);
    j->finished = 1;
    if (!j->status) j->status = 200;
    srv->metrics.prompt_tokens += j->n_prompt;
    srv->metrics.generated_tokens += j->n_gen;
    srv->metrics.cached_tokens += j->n_cached;
    if (j->t_first > 0) serve_hist_add(&srv->metrics.e2e, serve_now() - j->t_arrive);
    wake(j);
    srv->n_jobs--;
    serve_job_unref(j);
    pthread_mutex_unlock(&srv->mu);
}

/* An error after the job was accepted: in the stream, or as the body. */
static void fail_job(serve_job *j, int status, const char *msg) {
    tide_status st = {0};
    if (j->stream) {
        if (j->out) {
            tide_api_out_fail(j->out, msg, &st);
        } else {
            json_t *o = json_pack("{s:{s:s, s:s}}", "error", "message", msg, "type", "api_error");
            char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
            json_decref(o);
            if (s) serve_job_sse(j, NULL, s, strlen(s), &st);
            free(s);
        }
        return;
    }
    serve_reply r = {0};
    serve_error(&r, j->api, status, status == 504 ? "timeout_error" : "api_error", NULL, "%s", msg);
    pthread_mutex_lock(&j->srv->mu);
    tide_sb_reset(&j->buf);
    tide_sb_addn(&j->buf, r.body ? r.body : "", r.len);
    j->status = status;
    pthread_mutex_unlock(&j->srv->mu);
    free(r.body);
}

static int feed_text(serve_job *j, const char *t, size_t n, tide_status *st) {
    if (!n) return 0;
    if (j->api == SERVE_COMPLETIONS) return serve_completions_text(j, t, n, st);
    if (tide_api_out_text(j->out, t, n, st) != 0) return -1;
    if (tide_api_out_ended(j->out)) j->ended = 1;
    return 0;
}

static void on_token(tide_server *srv, serve_job *j, const tide_event *ev) {
    double now = serve_now();
    pthread_mutex_lock(&srv->mu);
    if (j->t_first == 0) serve_hist_add(&srv->metrics.ttft, now - j->t_arrive);
    else serve_hist_add(&srv->metrics.itl, now - j->t_last);
    pthread_mutex_unlock(&srv->mu);
    if (j->t_first == 0) j->t_first = now;
    j->t_last = now;
    j->n_gen = ev->n_output;
    j->n_cached = ev->n_cached;
    if (j->ended || j->failed) return;
    const char *t;
    size_t n;
    tide_status st = {0};
    if (tide_detok_push(j->detok, ev->token, &t, &n, &st) != 0 || feed_text(j, t, n, &st) != 0) {
        j->failed = 1;
        fail_job(j, 500, st.msg);
    }
    pthread_mutex_lock(&srv->mu);
    wake(j);
    pthread_mutex_unlock(&srv->mu);
}

static void on_finished(tide_server *srv, serve_job *j, const tide_event *ev) {
    (void)srv;
    j->eng_done = 1;
    j->n_gen = ev->n_output;
    j->n_cached = ev->n_cached;
    if (j->failed) return;
    tide_status st = {0};
    if (ev->reason == TIDE_FINISH_ERROR) {
        j->failed = 1;
        fail_job(j, 500, ev->error ? ev->error : "the engine failed");
        return;
    }
    if (ev->reason == TIDE_FINISH_CANCELLED && !j->ended) {
        j->failed = 1;
        if (j->timed_out) fail_job(j, 504, "the request timed out");
        else fail_job(j, 503, "the request was cancelled (client gone or server stopping)");
        return;
    }
    const char *t;
    size_t n;
    tide_usage u = {.prompt_tokens = j->n_prompt, .completion_tokens = j->n_gen, .cached_tokens = j->n_cached};
    tide_gen_end end = ev->reason == TIDE_FINISH_LENGTH ? TIDE_GEN_LENGTH : TIDE_GEN_STOP;
    int rc = tide_detok_finish(j->detok, &t, &n, &st);
    if (rc == 0) rc = feed_text(j, t, n, &st);
    if (rc == 0 && j->ended) end = TIDE_GEN_STOP;
    if (rc == 0 && j->api == SERVE_COMPLETIONS) {
        rc = serve_completions_finish(j, end == TIDE_GEN_LENGTH ? "length" : "stop", &u, &st);
    } else if (rc == 0) {
        rc = tide_api_out_finish(j->out, end, &u, &st);
        if (rc == 0 && !j->stream) {
            char *body = tide_api_out_response(j->out, &st);
            if (!body) rc = -1;
            pthread_mutex_lock(&srv->mu);
            if (body) tide_sb_add(&j->buf, body);
            j->status = 200;
            pthread_mutex_unlock(&srv->mu);
            free(body);
        }
    }
    if (rc != 0) {
        j->failed = 1;
        fail_job(j, 500, st.msg);
    }
}

static void on_event(void *ctx, const tide_event *ev) {
    tide_server *srv = ctx;
    serve_job *j = ev->user;
    if (ev->kind == TIDE_EVENT_TOKEN) on_token(srv, j, ev);
    else on_finished(srv, j, ev);
}

/* Submits one queued job (or finishes it at once if it cannot run). */
static void submit(tide_server *srv, serve_job *j) {
    tide_status st = {0};
    pthread_mutex_lock(&srv->mu);
    list_push(&srv->active, j);
    int gone = j->cancel || srv->quit;
    pthread_mutex_unlock(&srv->mu);
    if (gone) {
        j->failed = 1;
        fail_job(j, 503, "the request was cancelled before it started");
        finalize(srv, j);
        return;
    }
    tide_usage u = {.prompt_tokens = j->n_prompt};
    if (j->stream && j->out && tide_api_out_begin(j->out, &u, &st) != 0) {
        j->failed = 1;
        fail_job(j, 500, st.msg);
        finalize(srv, j);
        return;
    }
    if (tide_engine_submit(srv->engine, &j->ereq, &j->eid, &st) != 0) {
        j->failed = 1;
        fail_job(j, 400, st.msg);
        finalize(srv, j);
    }
}

/* Takes the queue (under mu) and submits it in arrival order. */
static void submit_pending(tide_server *srv) {
    pthread_mutex_lock(&srv->mu);
    serve_job *q = srv->pending, *last = NULL;
    srv->pending = NULL;
    pthread_mutex_unlock(&srv->mu);
    for (serve_job *j = q; j; j = j->next) last = j;
    while (last) { /* the list is newest first */
        serve_job *prev = last->prev;
        last->next = last->prev = NULL;
        submit(srv, last);
        last = prev;
    }
}

/* Cancels jobs whose client left, whose time ran out or whose output
 * ended, and finishes the ones the engine is done with. */
static void sweep(tide_server *srv) {
    double now = serve_now();
    for (;;) {
        serve_job *hit = NULL;
        int cancel = 0;
        pthread_mutex_lock(&srv->mu);
        for (serve_job *j = srv->active; j && !hit; j = j->next) {
            if (j->eng_done) hit = j;
            else if (!j->cancel_sent && (j->cancel || srv->quit || j->ended ||
                                          (srv->cfg.timeout_s > 0 && now - j->t_arrive > srv->cfg.timeout_s))) {
                hit = j, cancel = 1;
                if (!j->cancel && !srv->quit && !j->ended) j->timed_out = 1, srv->metrics.timeouts++;
                if (j->cancel) srv->metrics.disconnects++;
            }
        }
        pthread_mutex_unlock(&srv->mu);
        if (!hit) return;
        if (cancel) {
            hit->cancel_sent = 1;
            tide_status st = {0};
            if (tide_engine_cancel(srv->engine, hit->eid, &st) != 0) hit->eng_done = 1; /* already gone */
            continue;
        }
        tide_engine_release(srv->engine, hit->eid);
        finalize(srv, hit);
    }
}

static int load(tide_server *srv, tide_model **m, tide_status *st) {
    if (tide_tokenizer_load(srv->tok_path, &srv->tok, st) != 0) return tide_fail_ctx(st, "tokenizer");
    if (tide_model_load(srv->model_dir, m, st) != 0) return -1;
    srv->ctx_len = (*m)->cfg.text.max_position_embeddings;
    tide_engine_config ec = srv->cfg.engine;
    ec.on_event = on_event;
    ec.event_ctx = srv;
    return tide_engine_create_with_model(&ec, *m, &srv->engine, st);
}

static void wait_for_work(tide_server *srv) {
    pthread_mutex_lock(&srv->mu);
    if (!srv->pending && !srv->quit && !tide_engine_busy(srv->engine)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000; /* wakes for timeouts and cancellations */
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&srv->cv, &srv->mu, &ts);
    }
    pthread_mutex_unlock(&srv->mu);
}

void *serve_engine_main(void *arg) {
    tide_server *srv = arg;
    tide_model *m = NULL;
    tide_status st = {0};
    int ok = load(srv, &m, &st) == 0;
    pthread_mutex_lock(&srv->mu);
    srv->state = ok ? (srv->state == SERVE_DRAINING ? SERVE_DRAINING : SERVE_READY) : SERVE_FAILED;
    if (!ok) srv->load_st = st;
    pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
    for (;;) {
        if (ok) {
            submit_pending(srv);
            sweep(srv);
            if (tide_engine_busy(srv->engine) && tide_engine_step(srv->engine, &st) != 0)
                tide_log(TIDE_LOG_ERROR, "serve: engine step: %s", st.msg);
            sweep(srv);
            pthread_mutex_lock(&srv->mu);
            tide_engine_get_stats(srv->engine, &srv->stats);
            pthread_mutex_unlock(&srv->mu);
        }
        pthread_mutex_lock(&srv->mu);
        int done = srv->quit && !srv->pending && !srv->active;
        pthread_mutex_unlock(&srv->mu);
        if (done || (!ok && srv->quit)) break;
        if (ok) wait_for_work(srv);
        else {
            pthread_mutex_lock(&srv->mu);
            if (!srv->quit) pthread_cond_wait(&srv->cv, &srv->mu);
            pthread_mutex_unlock(&srv->mu);
        }
    }
    tide_engine_destroy(srv->engine);
    srv->engine = NULL;
    tide_model_free(m);
    return NULL;
}
