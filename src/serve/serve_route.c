/* The routes, below libmicrohttpd: method + path + headers + body in, a
 * reply (or a job for the engine) out. Auth, the server's state (503 while
 * loading or draining) and admission (429 beyond the queue) are decided
 * here, before any work. */
#include <stdlib.h>
#include <string.h>

#include "serve/serve_internal.h"

serve_api serve_api_of_path(const char *path) {
    if (!strncmp(path, "/v1/messages", 12)) return SERVE_MESSAGES;
    if (!strcmp(path, "/v1/responses")) return SERVE_RESPONSES;
    if (!strcmp(path, "/v1/completions")) return SERVE_COMPLETIONS;
    return SERVE_CHAT;
}

/* Compares without an early exit, so the time taken says nothing about
 * how much of the key matched. */
static int key_equal(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned diff = la != lb;
    for (size_t i = 0; i < la; i++) diff |= (unsigned)(unsigned char)a[i] ^ (unsigned char)(i < lb ? b[i] : 0);
    return diff == 0;
}

/* -1: no key matches; else the matching key's KV class (0 without auth). */
static int authorized(tide_server *srv, const serve_http_req *rq) {
    if (!srv->n_keys) return 0;
    const char *k = rq->header(rq->ud, "x-api-key"), *a = rq->header(rq->ud, "Authorization");
    const char *bearer = a && !strncasecmp(a, "Bearer ", 7) ? a + 7 : NULL;
    int cls = -1;
    for (int i = 0; i < srv->n_keys; i++) /* every key compared: the time says nothing of which */
        if ((k ? key_equal(k, srv->keys[i]) : 0) + (bearer ? key_equal(bearer, srv->keys[i]) : 0)) cls = srv->key_class[i];
    return cls;
}

static void models(tide_server *srv, serve_reply *rp) {
    json_t *o = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id", srv->model_name,
                          "object", "model", "created", (json_int_t)0, "owned_by", "tide");
    serve_reply_json(rp, 200, o ? json_dumps(o, JSON_COMPACT) : NULL);
    json_decref(o);
}

static int is_gen_route(const char *path, serve_api *api) {
    static const struct {
        const char *path;
        serve_api api;
    } gen[] = {{"/v1/chat/completions", SERVE_CHAT},
               {"/v1/responses", SERVE_RESPONSES},
               {"/v1/messages", SERVE_MESSAGES},
               {"/v1/completions", SERVE_COMPLETIONS}};
    for (size_t i = 0; i < sizeof gen / sizeof gen[0]; i++)
        if (!strcmp(path, gen[i].path)) return *api = gen[i].api, 1;
    return 0;
}

/* 503 while loading, failed or draining; 429 when the queue is full. */
static int admit(tide_server *srv, serve_api api, serve_reply *rp) {
    pthread_mutex_lock(&srv->mu);
    serve_state s = srv->state;
    int64_t jobs = srv->n_jobs;
    pthread_mutex_unlock(&srv->mu);
    if (s != SERVE_READY) {
        serve_error(rp, api, 503, api == SERVE_MESSAGES ? "overloaded_error" : "service_unavailable", NULL, "%s",
                    s == SERVE_LOADING    ? "the model is still loading"
                    : s == SERVE_DRAINING ? "the server is shutting down"
                                          : "the model failed to load");
        return 0;
    }
    int64_t cap = (int64_t)srv->cfg.engine.max_seqs + srv->cfg.max_queue;
    if (jobs >= cap) {
        serve_error(rp, api, 429, "rate_limit_error", NULL, "too many requests: %lld in flight (limit %lld)",
                    (long long)jobs, (long long)cap);
        return 0;
    }
    return 1;
}

void serve_route(tide_server *srv, const serve_http_req *rq, serve_reply *rp) {
    memset(rp, 0, sizeof *rp);
    const char *p = rq->path;
    int get = !strcmp(rq->method, "GET"), post = !strcmp(rq->method, "POST");
    serve_api api = serve_api_of_path(p);
    if (get && !strcmp(p, "/health")) return serve_health(srv, rp);
    if (get && !strcmp(p, "/metrics")) return serve_metrics_text(srv, rp);
    int known = !strcmp(p, "/v1/models") || !strcmp(p, "/tokenize") || !strcmp(p, "/detokenize") ||
                !strcmp(p, "/v1/messages/count_tokens") || is_gen_route(p, &api);
    if (!known) {
        serve_error(rp, api, 404, api == SERVE_MESSAGES ? "not_found_error" : "invalid_request_error", NULL,
                    "no route %s %s", rq->method, p);
        return;
    }
    int key_class = authorized(srv, rq);
    if (key_class < 0) {
        serve_error(rp, api, 401, "authentication_error", NULL,
                    "a valid API key is needed (Authorization: Bearer KEY or x-api-key: KEY)");
        return;
    }
    int want_get = !strcmp(p, "/v1/models");
    if (want_get ? !get : !post) {
        serve_error(rp, api, 405, "invalid_request_error", NULL, "%s wants %s", p, want_get ? "GET" : "POST");
        return;
    }
    if (!admit(srv, api, rp)) return;
    if (want_get) return models(srv, rp);
    if (!strcmp(p, "/tokenize")) return serve_tokenize(srv, rq->body, rq->len, rp);
    if (!strcmp(p, "/detokenize")) return serve_detokenize(srv, rq->body, rq->len, rp);
    if (!strcmp(p, "/v1/messages/count_tokens")) return serve_count_tokens(srv, rq->body, rq->len, rp);
    serve_job *j;
    if (serve_job_new(srv, api, rq->body, rq->len, &j, rp) == 0) {
        j->key_class = key_class;
        rp->job = j;
        j->kv_flush = rq->header(rq->ud, "x-tide-kv-flush") != NULL;
    }
}
