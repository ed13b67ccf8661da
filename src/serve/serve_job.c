/* A job: the HTTP side of one generation session (api/gen.h). The body is
 * parsed on the HTTP thread, so a bad request gets its 400 naming the field
 * before any stream starts; the session's callbacks (on the engine thread)
 * append SSE bytes or the whole response to the job's buffer and resume
 * the connection that waits for them. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <microhttpd.h>

#include "serve/serve_internal.h"

static void job_free(serve_job *j) {
    tide_api_req_free(&j->req);
    tide_sb_free(&j->buf);
    free(j);
}

void serve_job_unref(serve_job *j) {
    if (j && --j->refs == 0) job_free(j);
}

/* The connection gets what is in buf (under mu). */
static void wake(serve_job *j) {
    if (j->suspended && j->conn) {
        j->suspended = 0;
        MHD_resume_connection(j->conn);
    }
}

static int on_sse(void *ud, const char *event, const char *data, size_t len, tide_status *st) {
    serve_job *j = ud;
    pthread_mutex_lock(&j->srv->mu);
    int gone = j->cancel;
    if (!gone) {
        if (event) tide_sb_addf(&j->buf, "event: %s\n", event);
        tide_sb_add(&j->buf, "data: ");
        tide_sb_addn(&j->buf, data, len);
        tide_sb_add(&j->buf, "\n\n");
        if (j->t_sse == 0 && j->t_first > 0) j->t_sse = serve_now();
        wake(j);
    }
    int rc = gone ? tide_fail(st, TIDE_ERR_IO, "the client went away") : tide_sb_check(&j->buf, "SSE buffer", st);
    pthread_mutex_unlock(&j->srv->mu);
    return rc;
}

static void on_token(void *ud, int choice, const tide_gen_token *t) {
    serve_job *j = ud;
    if (choice != 0) return;
    double now = serve_now();
    pthread_mutex_lock(&j->srv->mu);
    if (j->t_first == 0) serve_hist_add(&j->srv->metrics.ttft, now - j->t_arrive), j->t_first = now, j->t_engine = t->t_engine;
    else serve_hist_add(&j->srv->metrics.itl, now - j->t_last);
    j->t_last = now;
    pthread_mutex_unlock(&j->srv->mu);
}

static void list_remove(serve_job **head, serve_job *j) {
    if (j->prev) j->prev->next = j->next;
    else if (*head == j) *head = j->next;
    if (j->next) j->next->prev = j->prev;
    j->next = j->prev = NULL;
}

/* The session's last callback: the response (or the error) is complete. */
static void on_done(void *ud, const tide_gen_result *r) {
    serve_job *j = ud;
    tide_server *srv = j->srv;
    serve_reply e = {0};
    if (!j->stream && !r->response)
        serve_error(&e, j->api, j->timed_out ? 504 : r->error ? 500 : 503, j->timed_out ? "timeout_error" : "api_error",
                    NULL, "%s",
                    j->timed_out ? "the request timed out"
                    : r->error   ? r->error
                                 : "the request was cancelled");
    pthread_mutex_lock(&srv->mu);
    if (!j->stream) {
        tide_sb_reset(&j->buf);
        if (r->response) tide_sb_addn(&j->buf, r->response, r->response_len);
        else tide_sb_addn(&j->buf, e.body ? e.body : "", e.len);
        j->status = r->response ? 200 : e.status;
    }
    serve_metrics *m = &srv->metrics;
    m->prompt_tokens += r->usage.prompt_tokens;
    m->generated_tokens += r->usage.completion_tokens;
    m->cached_tokens += r->usage.cached_tokens;
    if (j->t_first > 0) serve_hist_add(&m->e2e, serve_now() - j->t_arrive);
    if (r->usage.spec_verified > 0)
        serve_ratio_add(&m->spec_acc, (double)r->usage.spec_accepted / (double)r->usage.spec_verified);
    j->finished = 1;
    wake(j);
    list_remove(&srv->active, j);
    srv->n_jobs--;
    serve_job_unref(j);
    pthread_mutex_unlock(&srv->mu);
    free(e.body);
}

static const char *id_prefix(serve_api api) {
    switch (api) {
    case SERVE_CHAT: return "chatcmpl-";
    case SERVE_RESPONSES: return "resp_";
    case SERVE_MESSAGES: return "msg_";
    default: return "cmpl-";
    }
}

/* --max-prompt: counted here (the generation layer itself only refuses
 * prompts beyond the model's context). */
static int check_prompt_len(serve_job *j, serve_reply *err) {
    int64_t lim = j->srv->cfg.max_prompt, n = 0;
    if (lim <= 0) return 0;
    tide_status st = {0};
    if (tide_gen_count_tokens(j->srv->gen, &j->req, &n, &st) != 0) {
        serve_error(err, j->api, 400, "invalid_request_error", NULL, "%s", st.msg);
        return -1;
    }
    if (n <= lim) return 0;
    serve_error(err, j->api, 400, "invalid_request_error", j->api == SERVE_COMPLETIONS ? "prompt" : "messages",
                "the prompt has %" PRId64 " tokens, more than this server's limit of %" PRId64, n, lim);
    return -1;
}

int serve_job_new(tide_server *srv, serve_api api, const char *body, size_t len, serve_job **out, serve_reply *err) {
    *out = NULL;
    serve_job *j = calloc(1, sizeof *j);
    if (!j) {
        serve_error(err, api, 500, "api_error", NULL, "out of memory");
        return -1;
    }
    j->srv = srv;
    j->refs = 1;
    j->api = api;
    j->t_arrive = serve_now();
    tide_sb_init(&j->buf);
    tide_api_err ae;
    memset(&ae, 0, sizeof ae);
    if (tide_api_parse(api, body, len, &j->req, &ae) != 0) {
        serve_error(err, api, ae.http_status ? ae.http_status : 400, ae.type ? ae.type : "invalid_request_error",
                    ae.param[0] ? ae.param : NULL, "%s", ae.st.msg);
        job_free(j);
        return -1;
    }
    if (check_prompt_len(j, err) != 0) {
        job_free(j);
        return -1;
    }
    j->stream = j->req.gen.stream;
    pthread_mutex_lock(&srv->mu);
    int64_t seq = ++srv->id_seq;
    pthread_mutex_unlock(&srv->mu);
    j->seq = seq;
    snprintf(j->id, sizeof j->id, "%s%08" PRIx64 "%08" PRIx64, id_prefix(api), (uint64_t)seq,
             (uint64_t)(j->t_arrive * 1e6));
    *out = j;
    return 0;
}

int serve_job_submit(serve_job *j, serve_reply *err) {
    tide_server *srv = j->srv;
    tide_gen_input in = {.req = &j->req, .response_id = j->id, .created = (int64_t)time(NULL),
                         .kv_class = j->req.gen.kv_class ? j->req.gen.kv_class : j->key_class};
    in.sink = (tide_gen_sink){.sse = j->stream ? on_sse : NULL, .token = on_token, .done = on_done, .ud = j};
    pthread_mutex_lock(&srv->mu);
    j->refs++; /* the session's, dropped in on_done */
    srv->n_jobs++;
    j->prev = NULL, j->next = srv->active;
    if (srv->active) srv->active->prev = j;
    srv->active = j;
    pthread_mutex_unlock(&srv->mu);
    tide_status st = {0};
    tide_gen_id gid = 0;
    /* The job's mutex is not held here: done may run (on the engine
     * thread) before tide_gen_submit returns. */
    if (tide_gen_submit(srv->gen, &in, &gid, &st) == 0) {
        pthread_mutex_lock(&srv->mu);
        j->gid = gid;
        if (j->cancel && !j->finished) tide_gen_cancel(srv->gen, gid); /* it left already */
        pthread_mutex_unlock(&srv->mu);
        return 0;
    }
    pthread_mutex_lock(&srv->mu);
    list_remove(&srv->active, j);
    srv->n_jobs--;
    j->refs--;
    pthread_mutex_unlock(&srv->mu);
    serve_error(err, j->api, st.code == TIDE_ERR_INTERNAL || st.code == TIDE_ERR_NOMEM ? 500 : 400,
                "invalid_request_error", NULL, "%s", st.msg);
    return -1;
}
