/* The server's life: configuration defaults, start (listen first, load the
 * model on the loader thread), drain, stop; and the small helpers every
 * route uses (error bodies in each API's shape, the clock). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/serve_internal.h"

tide_serve_config tide_serve_config_default(void) {
    tide_serve_config c;
    memset(&c, 0, sizeof c);
    c.engine = tide_engine_config_default();
    c.host = "127.0.0.1";
    c.port = 8000;
    c.max_body = TIDE_API_MAX_BODY;
    c.max_queue = 256;
    c.timeout_s = 600;
    c.http_threads = 2;
    c.max_connections = 4096;
    return c;
}

double serve_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void serve_reply_json(serve_reply *r, int status, char *body) {
    r->status = body ? status : 500;
    r->ctype = "application/json";
    r->body = body ? body : strdup("{\"error\": {\"message\": \"out of memory\", \"type\": \"api_error\"}}");
    r->len = r->body ? strlen(r->body) : 0;
}

void serve_error(serve_reply *r, serve_api api, int status, const char *type, const char *param, const char *fmt,
                 ...) {
    tide_api_err e;
    memset(&e, 0, sizeof e);
    e.http_status = status;
    e.type = type;
    if (param) snprintf(e.param, sizeof e.param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.st.msg, sizeof e.st.msg, fmt, ap);
    va_end(ap);
    tide_api_kind k = api == SERVE_MESSAGES ? TIDE_API_MESSAGES : TIDE_API_CHAT;
    free(r->body);
    serve_reply_json(r, status, tide_api_error_json(k, &e));
    r->job = NULL;
}

static char *dup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

/* The last component of the model directory: the id clients name. */
static char *default_name(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    return strndup(dir + b, n - b);
}

/* Splits the key list "KEY[:chat|:agent][,...]" in place. A suffix that
 * is not a class is part of the key. */
static int parse_keys(tide_server *s, tide_status *st) {
    for (char *k = s->api_key, *next; k && *k; k = next) {
        next = strchr(k, ',');
        if (next) *next++ = 0;
        if (!*k) continue;
        if (s->n_keys == SERVE_MAX_KEYS) return tide_fail(st, TIDE_ERR_INVALID, "serve: more than %d API keys", SERVE_MAX_KEYS);
        int cls = TIDE_KV_CLASS_DEFAULT;
        char *c = strrchr(k, ':');
        if (c && (!strcmp(c, ":chat") || !strcmp(c, ":agent"))) {
            cls = !strcmp(c, ":chat") ? TIDE_KV_CLASS_CHAT : TIDE_KV_CLASS_AGENT;
            *c = 0;
        }
        if (!*k) return tide_fail(st, TIDE_ERR_INVALID, "serve: an API key is empty (before ':%s')", c + 1);
        s->keys[s->n_keys] = k;
        s->key_class[s->n_keys++] = cls;
    }
    return s->n_keys ? 0 : tide_fail(st, TIDE_ERR_INVALID, "serve: the API key list holds no key");
}

int serve_server_new(const tide_serve_config *cfg, tide_server **out, tide_status *st) {
    *out = NULL;
    if (!cfg->engine.model_dir) return tide_fail(st, TIDE_ERR_INVALID, "serve: no model directory");
    tide_server *s = calloc(1, sizeof *s);
    if (!s) return tide_fail(st, TIDE_ERR_NOMEM, "serve: out of memory");
    s->cfg = *cfg;
    if (!s->cfg.max_body) s->cfg.max_body = TIDE_API_MAX_BODY;
    if (s->cfg.max_connections <= 0) s->cfg.max_connections = 4096;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->model_dir = strdup(cfg->engine.model_dir);
    s->host = strdup(cfg->host ? cfg->host : "127.0.0.1");
    s->api_key = dup_or_null(cfg->api_key);
    s->model_name = cfg->model_name && *cfg->model_name ? strdup(cfg->model_name) : default_name(cfg->engine.model_dir);
    if (cfg->tokenizer) s->tok_path = strdup(cfg->tokenizer);
    else if (asprintf(&s->tok_path, "%s/tokenizer.json", cfg->engine.model_dir) < 0) s->tok_path = NULL;
    s->cfg.engine.model_dir = s->model_dir;
    s->cfg.host = s->host;
    s->cfg.api_key = s->api_key;
    s->cfg.model_name = s->model_name;
    s->cfg.tokenizer = s->tok_path;
    s->state = SERVE_LOADING;
    *out = s;
    if (s->api_key && parse_keys(s, st) != 0) {
        serve_server_free(s);
        *out = NULL;
        return -1;
    }
    if (!s->model_dir || !s->host || !s->model_name || !s->tok_path || (cfg->api_key && *cfg->api_key && !s->api_key)) {
        serve_server_free(s);
        *out = NULL;
        return tide_fail(st, TIDE_ERR_NOMEM, "serve: out of memory");
    }
    return 0;
}

void serve_server_free(tide_server *s) {
    if (!s) return;
    tide_gen_destroy(s->gen);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->model_dir), free(s->host), free(s->api_key), free(s->model_name), free(s->tok_path);
    free(s);
}

int tide_server_start(const tide_serve_config *cfg, tide_server **out, tide_status *st) {
    tide_server *s;
    if (serve_server_new(cfg, &s, st) != 0) return -1;
    if (serve_http_start(s, st) != 0) {
        serve_server_free(s);
        return -1;
    }
    if (pthread_create(&s->loader, NULL, serve_loader_main, s) != 0) {
        serve_http_stop(s);
        serve_server_free(s);
        return tide_fail(st, TIDE_ERR_INTERNAL, "serve: cannot start the loader thread");
    }
    s->loader_started = 1;
    *out = s;
    return 0;
}

/* Ends requests that ran past the timeout (their done answers 504). */
static void watch_timeouts(tide_server *s) {
    double now = serve_now();
    for (serve_job *j = s->active; j; j = j->next)
        if (!j->timed_out && j->gid && now - j->t_arrive > s->cfg.timeout_s) {
            j->timed_out = 1;
            s->metrics.timeouts++;
            tide_gen_cancel(s->gen, j->gid);
        }
}

/* Loads the model (requests get 503 meanwhile), starts the generation
 * layer's engine thread, then wakes every 100 ms for the timeouts. */
void *serve_loader_main(void *arg) {
    tide_server *s = arg;
    tide_status st = {0};
    tide_gen_engine *g = NULL;
    tide_gen_image_limits lim = {s->cfg.max_images, s->cfg.max_image_bytes, s->cfg.max_image_pixels};
    int ok = tide_gen_create(&s->cfg.engine, s->tok_path, &g, &st) == 0;
    if (ok) tide_gen_set_image_limits(g, &lim);
    ok = ok && tide_gen_start(g, &st) == 0;
    if (!ok) tide_gen_destroy(g), g = NULL;
    pthread_mutex_lock(&s->mu);
    s->gen = g;
    if (ok) s->state = s->state == SERVE_DRAINING ? SERVE_DRAINING : SERVE_READY;
    else s->state = SERVE_FAILED, s->load_st = st;
    pthread_cond_broadcast(&s->cv);
    while (!s->quit) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        if (ok && s->cfg.timeout_s > 0) watch_timeouts(s);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int tide_server_wait_ready(tide_server *s, tide_status *st) {
    pthread_mutex_lock(&s->mu);
    while (s->state == SERVE_LOADING) pthread_cond_wait(&s->cv, &s->mu);
    int failed = s->state == SERVE_FAILED;
    if (failed && st) *st = s->load_st;
    pthread_mutex_unlock(&s->mu);
    return failed ? -1 : 0;
}

int tide_server_port(const tide_server *s) { return s->port; }

void tide_server_drain(tide_server *s) {
    pthread_mutex_lock(&s->mu);
    if (s->state == SERVE_READY || s->state == SERVE_LOADING) s->state = SERVE_DRAINING;
    pthread_mutex_unlock(&s->mu);
}

int tide_server_idle(tide_server *s) {
    pthread_mutex_lock(&s->mu);
    int idle = s->n_jobs == 0;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

void tide_server_stop(tide_server *s) {
    if (!s) return;
    tide_server_drain(s);
    if (s->loader_started) {
        pthread_mutex_lock(&s->mu);
        s->quit = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->loader, NULL);
    }
    /* Cancels what is left: every session's done runs, which finishes its
     * job and resumes its connection, so no connection stays suspended
     * when the daemon stops. */
    pthread_mutex_lock(&s->mu);
    tide_gen_engine *g = s->gen;
    s->gen = NULL;
    pthread_mutex_unlock(&s->mu);
    tide_gen_destroy(g);
    serve_http_stop(s);
    serve_server_free(s);
}
