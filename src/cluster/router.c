/* The router: libmicrohttpd in front, libcurl's multi interface behind.
 *
 * Threads. libmicrohttpd's epoll thread reads a client's request, answers
 * the router's own routes (/health, /metrics, /router/replicas) and hands
 * every other request to the upstream thread as a `fwd`, suspending the
 * connection. The upstream thread (one, running curl_multi_poll) places
 * the request, sends it, and receives the replica's answer; the client's
 * connection is resumed when the answer is decided:
 *
 *   - an SSE answer is decided at its first byte: from then on the bytes go
 *     to the client as they come (a callback response that suspends its
 *     connection while there is nothing to send);
 *   - any other answer is decided when it is complete (so a replica that
 *     dies half-way through a non-streamed body costs a retry, not an
 *     error).
 *
 * Until an answer is decided, a failure (connection refused or dropped, an
 * empty reply, a 503 from a replica that is loading or draining) sends the
 * request to another replica, at most `retries` more times; a replica that
 * dropped a connection is taken out until its health check passes again.
 * A stream that breaks after its first byte ends with an error event in
 * its API's shape.
 *
 * Disaggregation: with prefill and decode replicas up, a generation
 * request first goes to a prefill replica as a one-token, non-streamed
 * request (its prompt's pages land in that replica's prefix cache and in
 * the KV store the replicas share), then, unchanged, to a decode replica,
 * whose answer the client gets. The prefill leg's failure is not the
 * client's: the decode replica then computes the whole prompt.
 *
 * One mutex (`mu`) guards the replicas, the fwds' buffers and flags, and
 * the queue between the two threads. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>
#include <microhttpd.h>

#include "api/api.h"
#include "base/log.h"
#include "cluster/router.h"
#include "serve/http_glue.h"
#include "text/sbuf.h"

enum { X_FWD, X_HEALTH, X_METRICS };

typedef struct xfer {
    int kind;
    void *p;
    int rep;
} xfer;

typedef struct rep {
    tide_route_replica_cfg cfg;
    int present; /* in the pool (a replica that left keeps its slot until idle) */
    int up, fails, checking_health, checking_metrics;
    double next_check;
    int64_t inflight, prompt_pending, ctx; /* what the router sent and is not done */
    int64_t s_running, s_queue, s_kv_used; /* scraped from /metrics */
    int64_t forwarded, errors, prefills;
    CURL *hh, *mh;
    tide_sb hbuf, mbuf;
    xfer hx, mx;
} rep;

typedef struct fwd fwd;
struct fwd {
    tide_router *r;
    int refs; /* the connection's and the upstream thread's */
    struct MHD_Connection *conn;
    xfer x;
    char path[160];
    int is_post;
    char *body;
    size_t len;
    char *pbody; /* the prefill leg's body */
    size_t plen;
    tide_route_api api;
    tide_route_req rq;
    struct curl_slist *hdr, *phdr; /* phdr: the prefill leg's (+ x-tide-kv-flush) */
    int phase;       /* 0: the prefill leg, 1: the answer's */
    int replica;     /* the current leg's replica, -1 none */
    uint64_t tried;  /* replicas tried in this leg */
    int attempts;
    int prefill_rep; /* -1: no prefill leg */
    CURL *h;
    long status;
    char ctype[96];
    int seen_first, discard;
    int64_t acc_prompt, acc_ctx;
    /* resumption of a broken stream (rq.resumable): events pass whole; the
     * text delivered is kept, and a resumed leg's events are dropped until
     * its text has caught up with it (1), or until its first one past the
     * stream's opening when no text had gone (2) */
    int resumes, catching, stop_resume, diverged;
    size_t got;
    tide_sb ev, sent;
    /* under mu */
    tide_sb buf;
    size_t off;
    int committed, streaming, finished, suspended, cancel;
    fwd *qnext;        /* the hand-over queue */
    fwd *anext, *aprev; /* the upstream thread's active list */
};

struct tide_router {
    tide_route_config cfg;
    struct MHD_Daemon *mhd;
    int port;
    pthread_t th;
    int th_started;
    CURLM *multi;
    pthread_mutex_t mu;
    /* under mu */
    int quit;
    rep reps[TIDE_ROUTE_MAX_REPLICAS];
    int n_reps;
    tide_route_placer placer;
    fwd *queue, *queue_tail;
    int64_t n_requests, n_retries, n_failed, n_broken, n_disagg, n_prefill_failed, n_resumed;
    /* upstream thread only */
    fwd *active;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the replicas ---- */

static int rep_add(tide_router *r, const tide_route_replica_cfg *c) {
    int slot = -1;
    for (int i = 0; i < r->n_reps; i++) {
        rep *p = &r->reps[i];
        if (p->present && !strcmp(p->cfg.url, c->url)) return -2;
        if (!p->present && slot < 0 && !p->inflight && !p->checking_health && !p->checking_metrics) slot = i;
    }
    if (slot < 0) {
        if (r->n_reps == TIDE_ROUTE_MAX_REPLICAS) return -1;
        slot = r->n_reps++;
    }
    rep *p = &r->reps[slot];
    tide_sb_free(&p->hbuf);
    tide_sb_free(&p->mbuf);
    memset(p, 0, sizeof *p);
    p->cfg = *c;
    p->present = 1;
    p->up = 0; /* until its first health check passes */
    p->fails = 0;
    p->next_check = 0;
    tide_sb_init(&p->hbuf);
    tide_sb_init(&p->mbuf);
    tide_route_forget(&r->placer, slot);
    return slot;
}

static void rep_down(tide_router *r, int i, const char *why) {
    rep *p = &r->reps[i];
    if (p->up) TIDE_WARN("route: replica %s (%s) is out: %s", p->cfg.url, tide_route_role_name(p->cfg.role), why);
    p->up = 0;
    p->fails = r->cfg.fail_threshold;
}

/* The placer's view of the pool; replicas in `skip` count as down. */
static void views(tide_router *r, tide_route_view *v, uint64_t skip) {
    for (int i = 0; i < r->n_reps; i++) {
        rep *p = &r->reps[i];
        int64_t scraped = p->s_running + p->s_queue;
        v[i] = (tide_route_view){.role = p->cfg.role,
                                 .up = p->present && p->up && !(skip >> i & 1),
                                 .prompt_tokens = (double)p->prompt_pending,
                                 .running = (double)(p->inflight > scraped ? p->inflight : scraped),
                                 .context_tokens = (double)p->ctx};
    }
}

static int any_up(tide_router *r, tide_route_role role) {
    for (int i = 0; i < r->n_reps; i++)
        if (r->reps[i].present && r->reps[i].up && r->reps[i].cfg.role == role) return 1;
    return 0;
}

/* ---- the client side's answers ---- */

static tide_api_kind err_kind(const char *path) {
    return !strncmp(path, "/v1/messages", 12) ? TIDE_API_MESSAGES : TIDE_API_CHAT;
}

static char *error_body(const char *path, int status, const char *type, const char *msg) {
    tide_api_err e;
    memset(&e, 0, sizeof e);
    e.http_status = status;
    e.type = type;
    snprintf(e.st.msg, sizeof e.st.msg, "%s", msg);
    return tide_api_error_json(err_kind(path), &e);
}

static enum MHD_Result queue_body(struct MHD_Connection *c, int status, const char *ctype, char *body, size_t len) {
    return tide_http_queue_buffer(c, status, ctype, body, len);
}

static enum MHD_Result queue_json(struct MHD_Connection *c, int status, json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    return queue_body(c, status, "application/json", s, s ? strlen(s) : 0);
}

/* ---- fwd life ---- */

static void fwd_unref(fwd *f) { /* under mu */
    if (--f->refs > 0) return;
    if (f->h) curl_easy_cleanup(f->h);
    curl_slist_free_all(f->hdr);
    curl_slist_free_all(f->phdr);
    free(f->body);
    free(f->pbody);
    tide_sb_free(&f->buf);
    tide_sb_free(&f->ev);
    tide_sb_free(&f->sent);
    free(f);
}

static void resume(fwd *f) { /* under mu */
    if (f->suspended && f->conn) {
        f->suspended = 0;
        MHD_resume_connection(f->conn);
    }
}

/* Decides the client's answer (under mu). */
static void commit(fwd *f, int status, const char *ctype, int streaming) {
    f->committed = 1;
    f->status = status;
    if (ctype != f->ctype) snprintf(f->ctype, sizeof f->ctype, "%s", ctype);
    f->streaming = streaming;
    resume(f);
}

static void fail_fwd(fwd *f, int status, const char *type, const char *msg) { /* under mu */
    char *b = error_body(f->path, status, type, msg);
    tide_sb_reset(&f->buf);
    if (b) tide_sb_add(&f->buf, b);
    free(b);
    f->finished = 1;
    f->r->n_failed++;
    commit(f, status, "application/json", 0);
}

/* A broken stream's last event, in the API's shape. */
static void break_stream(fwd *f, const char *msg) { /* under mu */
    char *b = error_body(f->path, 502, "api_error", msg);
    if (err_kind(f->path) == TIDE_API_MESSAGES) tide_sb_addf(&f->buf, "event: error\ndata: %s\n\n", b ? b : "{}");
    else tide_sb_addf(&f->buf, "data: %s\n\n", b ? b : "{}");
    free(b);
    f->r->n_broken++;
}

/* ---- upstream transfers ---- */

/* A resumable stream's bytes (under mu): whole events go to the client,
 * their text to f->sent; a resumed leg's events are checked against what
 * was sent and dropped until they catch up. 0 when they diverge. */
static int pass_events(fwd *f, const char *p, size_t n) {
    tide_sb_addn(&f->ev, p, n);
    for (;;) {
        char *e = f->ev.s, *end = f->ev.len ? memmem(e, f->ev.len, "\n\n", 2) : NULL;
        if (!end) return 1;
        size_t elen = (size_t)(end - e) + 2;
        const char *data = NULL;
        size_t dlen = 0;
        for (const char *l = e; l < e + elen;) {
            const char *nl = memchr(l, '\n', (size_t)(e + elen - l));
            if (!nl) break;
            if (nl - l >= 6 && !memcmp(l, "data: ", 6)) data = l + 6, dlen = (size_t)(nl - l - 6);
            l = nl + 1;
        }
        char *text = NULL;
        int k = data ? tide_route_event_text(f->api, data, dlen, &text) : 1; /* a comment or event-only */
        size_t tl = text ? strlen(text) : 0;
        int drop = 0;
        if (f->catching == 1) {
            if (k == 1 && tl) {
                if (f->got + tl > f->sent.len || memcmp(f->sent.s + f->got, text, tl)) f->diverged = 1;
                f->got += tl;
                if (f->got == f->sent.len) f->catching = 0;
            } else if (k != 1) {
                f->diverged = 1; /* it ended, or did something else, before repeating what was sent */
            }
            drop = 1;
        } else if (f->catching == 2) {
            if (k == 1 && !tl) drop = 1;
            else f->catching = 0;
        }
        if (f->diverged) {
            free(text);
            return 0;
        }
        if (!drop) {
            tide_sb_addn(&f->buf, e, elen);
            if (k == 1 && tl) tide_sb_add(&f->sent, text);
            else if (k != 1) f->stop_resume = 1;
        }
        free(text);
        tide_sb_consume(&f->ev, elen);
    }
}

static size_t on_data(char *ptr, size_t sz, size_t nm, void *ud) {
    fwd *f = ud;
    size_t n = sz * nm;
    tide_router *r = f->r;
    pthread_mutex_lock(&r->mu);
    if (f->cancel) {
        pthread_mutex_unlock(&r->mu);
        return 0; /* aborts the transfer: the replica sees the disconnect */
    }
    if (!f->seen_first) {
        f->seen_first = 1;
        curl_easy_getinfo(f->h, CURLINFO_RESPONSE_CODE, &f->status);
        char *ct = NULL;
        curl_easy_getinfo(f->h, CURLINFO_CONTENT_TYPE, &ct);
        snprintf(f->ctype, sizeof f->ctype, "%s", ct ? ct : "application/json");
        /* a prefill leg's answer, or a 503 that will be retried, is not the
         * client's; nor is a resumed leg's answer that is not a stream */
        f->discard = f->phase == 0 || f->status == 503 ||
                     (f->committed && (f->status != 200 || strncmp(f->ctype, "text/event-stream", 17)));
    }
    if (!f->discard && f->rq.resumable && !strncmp(f->ctype, "text/event-stream", 17)) {
        if (!f->committed) commit(f, (int)f->status, f->ctype, 1);
        int ok = pass_events(f, ptr, n);
        resume(f);
        pthread_mutex_unlock(&r->mu);
        return ok ? n : 0; /* 0: a resumed leg diverged, its transfer is aborted */
    }
    if (!f->discard) {
        tide_sb_addn(&f->buf, ptr, n);
        if (!f->committed && !strncmp(f->ctype, "text/event-stream", 17)) commit(f, (int)f->status, f->ctype, 1);
        else if (f->streaming) resume(f);
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

static size_t on_sink(char *ptr, size_t sz, size_t nm, void *ud) {
    tide_sb *b = ud;
    if (b->len < (1u << 20)) tide_sb_addn(b, ptr, sz * nm);
    return sz * nm;
}

/* A health check or metrics scrape: GET url+path into sink. */
static CURL *easy_get(tide_router *r, const char *url, const char *path, tide_sb *sink, xfer *x) {
    CURL *h = curl_easy_init();
    if (!h) return NULL;
    char full[TIDE_ROUTE_URL_MAX + 32];
    snprintf(full, sizeof full, "%s%s", url, path);
    curl_easy_setopt(h, CURLOPT_URL, full);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, sink);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)r->cfg.health_timeout_ms);
    curl_easy_setopt(h, CURLOPT_PRIVATE, x);
    if (curl_multi_add_handle(r->multi, h) != CURLM_OK) {
        curl_easy_cleanup(h);
        return NULL;
    }
    return h;
}

static void start_checks(tide_router *r, double t) { /* upstream thread; takes mu */
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_reps; i++) {
        rep *p = &r->reps[i];
        if (!p->present || p->checking_health || p->checking_metrics || t < p->next_check) continue;
        p->next_check = t + r->cfg.health_interval_ms * 1e-3;
        p->hx = (xfer){X_HEALTH, NULL, i};
        p->mx = (xfer){X_METRICS, NULL, i};
        tide_sb_reset(&p->hbuf);
        tide_sb_reset(&p->mbuf);
        p->hh = easy_get(r, p->cfg.url, "/health", &p->hbuf, &p->hx);
        p->mh = easy_get(r, p->cfg.url, "/metrics", &p->mbuf, &p->mx);
        p->checking_health = p->hh != NULL;
        p->checking_metrics = p->mh != NULL;
    }
    pthread_mutex_unlock(&r->mu);
}

static int64_t metric_value(const char *text, const char *name) {
    size_t n = strlen(name);
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        if (strncmp(l, name, n) || (l[n] != ' ' && l[n] != '{')) continue;
        const char *sp = strchr(l + n, ' ');
        const char *nl = strchr(l, '\n');
        if (!sp || (nl && sp > nl)) continue;
        return (int64_t)strtod(sp + 1, NULL);
    }
    return 0;
}

static void check_done(tide_router *r, xfer *x, CURLcode res) { /* upstream thread */
    pthread_mutex_lock(&r->mu);
    rep *p = &r->reps[x->rep];
    long code = 0;
    CURL *h = x->kind == X_HEALTH ? p->hh : p->mh;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_multi_remove_handle(r->multi, h);
    curl_easy_cleanup(h);
    if (x->kind == X_HEALTH) {
        p->hh = NULL;
        p->checking_health = 0;
        if (!p->present) {
        } else if (res == CURLE_OK && code == 200) {
            if (!p->up) TIDE_INFO("route: replica %s (%s) is up", p->cfg.url, tide_route_role_name(p->cfg.role));
            p->up = 1;
            p->fails = 0;
        } else if (++p->fails >= r->cfg.fail_threshold) {
            char why[160];
            snprintf(why, sizeof why, "health check: %s",
                     res != CURLE_OK ? curl_easy_strerror(res) : code == 503 ? "503 (loading or draining)" : "not 200");
            rep_down(r, x->rep, why);
        }
    } else {
        p->mh = NULL;
        p->checking_metrics = 0;
        if (res == CURLE_OK && code == 200 && p->mbuf.s) {
            p->s_running = metric_value(p->mbuf.s, "tide_running_sequences");
            p->s_queue = metric_value(p->mbuf.s, "tide_queue_length");
            p->s_kv_used = metric_value(p->mbuf.s, "tide_kv_blocks_used");
        }
    }
    pthread_mutex_unlock(&r->mu);
}

/* Picks the replica of f's current leg (under mu): -1 when none is up. */
static int place(tide_router *r, fwd *f) {
    tide_route_view v[TIDE_ROUTE_MAX_REPLICAS];
    views(r, v, f->tried);
    int n = r->n_reps;
    if (f->api == TIDE_ROUTE_API_NONE) {
        static const tide_route_role order[] = {TIDE_ROLE_MIXED, TIDE_ROLE_DECODE, TIDE_ROLE_PREFILL};
        for (int i = 0; i < 3; i++) {
            int k = tide_route_place_decode(&r->placer, v, n, order[i]);
            if (k >= 0) return k;
        }
        return -1;
    }
    double t = now_s();
    if (f->phase == 0) return tide_route_place_prefill(&r->placer, v, n, TIDE_ROLE_PREFILL, t, f->rq.prompt_tokens,
                                                       f->rq.chain, f->rq.upto, f->rq.n_chain, NULL);
    if (f->prefill_rep >= 0) { /* the decode leg: decode replicas, else whoever is left */
        static const tide_route_role order[] = {TIDE_ROLE_DECODE, TIDE_ROLE_MIXED, TIDE_ROLE_PREFILL};
        for (int i = 0; i < 3; i++) {
            int k = tide_route_place_decode(&r->placer, v, n, order[i]);
            if (k >= 0) return k;
        }
        return -1;
    }
    /* whole requests: mixed replicas first, then whatever is up */
    static const tide_route_role order[] = {TIDE_ROLE_MIXED, TIDE_ROLE_DECODE, TIDE_ROLE_PREFILL};
    for (int i = 0; i < 3; i++) {
        int k = tide_route_place_prefill(&r->placer, v, n, order[i], t, f->rq.prompt_tokens, f->rq.chain,
                                         f->rq.upto, f->rq.n_chain, NULL);
        if (k >= 0) return k;
    }
    return -1;
}

static void account(tide_router *r, fwd *f, int sign) { /* under mu */
    if (f->replica < 0) return;
    rep *p = &r->reps[f->replica];
    p->inflight += sign;
    p->prompt_pending += sign * f->acc_prompt;
    p->ctx += sign * f->acc_ctx;
}

/* Starts f's current leg on a replica; under mu. -1: no replica left. */
static int start_leg(tide_router *r, fwd *f) {
    if (f->h) {
        curl_easy_cleanup(f->h);
        f->h = NULL;
    }
    int k = place(r, f);
    if (k < 0) return -1;
    f->replica = k;
    f->tried |= (uint64_t)1 << k;
    f->attempts++;
    f->seen_first = f->discard = 0;
    f->status = 0;
    /* load: a prefill leg and a whole request wait for their prompt; a
     * decode leg's prompt is (mostly) cached already */
    f->acc_prompt = f->api != TIDE_ROUTE_API_NONE && (f->phase == 0 || f->prefill_rep < 0) ? f->rq.prompt_tokens : 0;
    f->acc_ctx = f->api != TIDE_ROUTE_API_NONE && f->phase == 1 ? f->rq.prompt_tokens : 0;
    account(r, f, +1);
    rep *p = &r->reps[k];
    p->forwarded += f->phase == 1;
    p->prefills += f->phase == 0;
    CURL *h = curl_easy_init();
    if (!h) return -1;
    f->h = h;
    char url[TIDE_ROUTE_URL_MAX + 200];
    snprintf(url, sizeof url, "%s%s", p->cfg.url, f->path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, f->phase == 0 ? f->phdr : f->hdr);
    if (f->is_post) {
        const char *b = f->phase == 0 ? f->pbody : f->body;
        size_t n = f->phase == 0 ? f->plen : f->len;
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, b ? b : "");
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(h, CURLOPT_PRIVATE, &f->x);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)r->cfg.health_timeout_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)r->cfg.request_timeout_s);
    if (curl_multi_add_handle(r->multi, h) != CURLM_OK) return -1;
    return 0;
}

/* Starts the leg, or answers the client when no replica can take it. */
static void start_or_fail(tide_router *r, fwd *f) { /* under mu */
    if (start_leg(r, f) == 0) return;
    account(r, f, -1);
    f->replica = -1;
    if (f->phase == 0) { /* no prefill replica: the decode replica does it all */
        f->phase = 1;
        f->prefill_rep = -1;
        f->tried = 0;
        f->attempts = 0;
        start_or_fail(r, f);
        return;
    }
    fail_fwd(f, 503, "api_error", f->attempts ? "route: every replica tried failed this request"
                                               : "route: no replica is up to take this request");
}

static int conn_error(CURLcode c) {
    return c == CURLE_COULDNT_CONNECT || c == CURLE_GOT_NOTHING || c == CURLE_RECV_ERROR || c == CURLE_SEND_ERROR ||
           c == CURLE_PARTIAL_FILE || c == CURLE_OPERATION_TIMEDOUT || c == CURLE_COULDNT_RESOLVE_HOST;
}

/* A broken stream that can be resumed goes to another replica with its
 * original body (the prompt's pages are in the KV store): its events are
 * dropped until they repeat what the client has, then passed on. 1 when
 * a resumed leg started (under mu). */
static int try_resume(tide_router *r, fwd *f) {
    if (!f->rq.resumable || f->stop_resume || f->diverged || f->resumes >= r->cfg.retries) return 0;
    int was = f->replica;
    f->replica = -1;
    f->resumes++;
    f->catching = f->sent.len ? 1 : 2;
    f->got = 0;
    tide_sb_reset(&f->ev);
    if (start_leg(r, f) != 0) {
        account(r, f, -1);  /* (nothing when no replica was placed) */
        f->replica = was;   /* the broken leg's, for the error event */
        return 0;
    }
    r->n_resumed++;
    TIDE_INFO("route: a stream broken on %s resumed on %s (%zu bytes of text to repeat)", r->reps[was].cfg.url,
              r->reps[f->replica].cfg.url, f->sent.len);
    return 1;
}

static void leg_done(tide_router *r, fwd *f, CURLcode res) { /* upstream thread */
    pthread_mutex_lock(&r->mu);
    curl_multi_remove_handle(r->multi, f->h);
    account(r, f, -1);
    long code = f->status;
    if (!f->seen_first) curl_easy_getinfo(f->h, CURLINFO_RESPONSE_CODE, &code);
    int ok = res == CURLE_OK && code > 0 && code != 503;
    if (!ok && f->replica >= 0 && conn_error(res)) {
        r->reps[f->replica].errors++;
        rep_down(r, f->replica, curl_easy_strerror(res));
    }
    if (f->cancel) {
        f->finished = 1;
    } else if (f->phase == 0) {
        if (ok && code / 100 == 2) {
            f->prefill_rep = f->replica;
            tide_route_note(&r->placer, f->replica, f->rq.chain, f->rq.n_chain);
            r->n_disagg++;
        } else if (!ok && f->attempts <= r->cfg.retries) {
            r->n_retries++;
            f->replica = -1;
            start_or_fail(r, f);
            goto out;
        } else {
            f->prefill_rep = -1; /* the decode replica will compute the prompt */
            r->n_prefill_failed++;
        }
        f->phase = 1;
        f->tried = 0;
        f->attempts = 0;
        f->replica = -1;
        start_or_fail(r, f);
    } else if (!f->committed) {
        if (!ok && f->attempts <= r->cfg.retries) {
            r->n_retries++;
            tide_sb_reset(&f->buf);
            f->replica = -1;
            start_or_fail(r, f);
        } else if (!ok) {
            char m[300];
            snprintf(m, sizeof m, "route: replica %s: %s", r->reps[f->replica].cfg.url,
                     res != CURLE_OK ? curl_easy_strerror(res) : "503 (loading or draining), and no other replica left");
            fail_fwd(f, res != CURLE_OK ? 502 : 503, "api_error", m);
        } else {
            if (f->prefill_rep < 0 && f->api != TIDE_ROUTE_API_NONE && code / 100 == 2)
                tide_route_note(&r->placer, f->replica, f->rq.chain, f->rq.n_chain);
            f->finished = 1;
            commit(f, (int)code, f->ctype[0] ? f->ctype : "application/json", 0);
        }
    } else { /* a stream: its end, clean or not */
        int broke = res != CURLE_OK || f->discard || f->diverged || f->catching;
        if (broke && try_resume(r, f)) goto out;
        if (broke) {
            char m[300];
            if (f->diverged)
                snprintf(m, sizeof m, "route: the stream broke and its resumption on replica %s differed from "
                         "what was already sent", r->reps[f->replica].cfg.url);
            else
                snprintf(m, sizeof m, "route: replica %s broke the stream: %s", r->reps[f->replica].cfg.url,
                         res != CURLE_OK ? curl_easy_strerror(res) : f->discard ? "a resumed leg's answer was "
                         "not a stream" : "it ended before repeating what was sent");
            break_stream(f, m);
        } else {
            if (f->ev.len) tide_sb_addn(&f->buf, f->ev.s, f->ev.len); /* a last event without its blank line */
            if (f->prefill_rep < 0 && f->api != TIDE_ROUTE_API_NONE)
                tide_route_note(&r->placer, f->replica, f->rq.chain, f->rq.n_chain);
        }
        f->finished = 1;
        resume(f);
    }
    if (f->finished) {
        if (f->anext) f->anext->aprev = f->aprev;
        if (f->aprev) f->aprev->anext = f->anext;
        else r->active = f->anext;
        fwd_unref(f);
    }
out:
    pthread_mutex_unlock(&r->mu);
}

static void *upstream_main(void *arg) {
    tide_router *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int quit = r->quit;
        fwd *q = r->queue;
        r->queue = r->queue_tail = NULL;
        for (fwd *f = q, *nx; f; f = nx) {
            nx = f->qnext;
            f->anext = r->active;
            if (r->active) r->active->aprev = f;
            f->aprev = NULL;
            r->active = f;
            if (quit) fail_fwd(f, 503, "api_error", "route: the router is stopping");
            else start_or_fail(r, f);
        }
        /* cancelled by their clients, and failed before any transfer */
        for (fwd *f = r->active, *nx; f; f = nx) {
            nx = f->anext;
            if (!f->cancel && !f->finished) continue;
            if (f->h) curl_multi_remove_handle(r->multi, f->h);
            if (!f->finished) account(r, f, -1);
            f->finished = 1;
            if (f->anext) f->anext->aprev = f->aprev;
            if (f->aprev) f->aprev->anext = f->anext;
            else r->active = f->anext;
            fwd_unref(f);
        }
        pthread_mutex_unlock(&r->mu);
        if (quit) break;
        start_checks(r, now_s());
        int running = 0;
        curl_multi_perform(r->multi, &running);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(r->multi, &left))) {
            if (m->msg != CURLMSG_DONE) continue;
            xfer *x = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            CURLcode res = m->data.result;
            if (x->kind == X_FWD) leg_done(r, x->p, res);
            else check_done(r, x, res);
        }
        curl_multi_poll(r->multi, NULL, 0, 50, NULL);
    }
    return NULL;
}

static void wake(tide_router *r) { curl_multi_wakeup(r->multi); }

/* ---- the client side ---- */

typedef struct conn_ctx {
    tide_sb body;
    int too_big, answered;
    fwd *f;
} conn_ctx;

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    fwd *f = cls;
    pthread_mutex_lock(&f->r->mu);
    tide_http_pipe p = {&f->buf, &f->off, &f->finished, &f->suspended, f->conn};
    ssize_t n = tide_http_pipe_read(&p, out, max);
    pthread_mutex_unlock(&f->r->mu);
    return n;
}

/* The decided answer goes to the client (under mu). */
static enum MHD_Result answer(struct MHD_Connection *c, conn_ctx *cx) {
    fwd *f = cx->f;
    cx->answered = 1;
    if (f->streaming) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, f, NULL);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, f->ctype);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, (unsigned)f->status, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    size_t len = f->buf.len;
    char *b = tide_sb_take(&f->buf);
    return queue_body(c, (int)f->status, f->ctype, b, b ? len : 0);
}

static const char *const fwd_headers[] = {"Authorization", "x-api-key", "anthropic-version", "anthropic-beta",
                                          "Content-Type", "Accept", NULL};

static enum MHD_Result forward(tide_router *r, struct MHD_Connection *c, const char *url, int is_post,
                               conn_ctx *cx) {
    fwd *f = calloc(1, sizeof *f);
    if (!f) return MHD_NO;
    f->r = r;
    f->refs = 2;
    f->conn = c;
    f->x = (xfer){X_FWD, f, 0};
    snprintf(f->path, sizeof f->path, "%s", url);
    f->is_post = is_post;
    f->len = cx->body.len;
    f->body = tide_sb_take(&cx->body);
    f->replica = f->prefill_rep = -1;
    f->api = is_post ? tide_route_api_of_path(url) : TIDE_ROUTE_API_NONE;
    tide_sb_init(&f->buf);
    tide_sb_init(&f->ev);
    tide_sb_init(&f->sent);
    if (f->api != TIDE_ROUTE_API_NONE) tide_route_req_read(f->api, f->body ? f->body : "", f->len, &f->rq);
    for (const char *const *h = fwd_headers; *h; h++) {
        const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, *h);
        if (!v) continue;
        char line[4096];
        snprintf(line, sizeof line, "%s: %s", *h, v);
        struct curl_slist *nl = curl_slist_append(f->hdr, line);
        if (nl) f->hdr = nl;
        if ((nl = curl_slist_append(f->phdr, line))) f->phdr = nl;
    }
    struct curl_slist *nl = curl_slist_append(f->hdr, "Expect:");
    if (nl) f->hdr = nl;
    /* the prefill leg is answered once its pages are in the KV store */
    if ((nl = curl_slist_append(f->phdr, "Expect:"))) f->phdr = nl;
    if ((nl = curl_slist_append(f->phdr, "x-tide-kv-flush: 1"))) f->phdr = nl;
    cx->f = f;
    pthread_mutex_lock(&r->mu);
    r->n_requests++;
    f->phase = 1;
    if (f->api != TIDE_ROUTE_API_NONE && r->cfg.disaggregate && any_up(r, TIDE_ROLE_PREFILL) &&
        any_up(r, TIDE_ROLE_DECODE)) {
        f->pbody = tide_route_prefill_body(f->api, f->body ? f->body : "", f->len, &f->plen);
        if (f->pbody) f->phase = 0;
    }
    if (r->queue_tail) r->queue_tail->qnext = f;
    else r->queue = f;
    r->queue_tail = f;
    f->suspended = 1;
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&r->mu);
    wake(r);
    return MHD_YES;
}

static json_t *replicas_json(tide_router *r) { /* under mu */
    json_t *a = json_array();
    for (int i = 0; i < r->n_reps; i++) {
        rep *p = &r->reps[i];
        if (!p->present) continue;
        json_array_append_new(
            a, json_pack("{s:s, s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:I}", "url", p->cfg.url, "role",
                         tide_route_role_name(p->cfg.role), "up", p->up, "in_flight", (json_int_t)p->inflight,
                         "running", (json_int_t)p->s_running, "queue", (json_int_t)p->s_queue, "forwarded",
                         (json_int_t)p->forwarded, "prefills", (json_int_t)p->prefills, "errors",
                         (json_int_t)p->errors));
    }
    return json_pack("{s:o}", "replicas", a);
}

/* POST /router/replicas {"url", "role"}: a replica joins; DELETE with
 * {"url"}: it leaves (its requests in flight finish). */
static enum MHD_Result admin(tide_router *r, struct MHD_Connection *c, const char *method, conn_ctx *cx) {
    if (!strcmp(method, "GET")) {
        pthread_mutex_lock(&r->mu);
        json_t *v = replicas_json(r);
        pthread_mutex_unlock(&r->mu);
        return queue_json(c, 200, v);
    }
    json_t *b = json_loadb(cx->body.s ? cx->body.s : "", cx->body.len, 0, NULL);
    const char *url = json_string_value(json_object_get(b, "url"));
    const char *role = json_string_value(json_object_get(b, "role"));
    tide_route_replica_cfg rc = {.role = TIDE_ROLE_MIXED};
    tide_status st = {0};
    int status = 200;
    char msg[TIDE_STATUS_MSG + 64] = "";
    if (!url || strlen(url) >= sizeof rc.url) {
        status = 400;
        snprintf(msg, sizeof msg, "body: expected {\"url\": \"http://HOST:PORT\"%s}",
                 !strcmp(method, "POST") ? ", \"role\": \"prefill|decode|mixed\"" : "");
    } else {
        snprintf(rc.url, sizeof rc.url, "%s", url);
        if (tide_route_url_check(rc.url, &st)) status = 400, snprintf(msg, sizeof msg, "%s", st.msg);
        else if (role && tide_route_role_parse(role, &rc.role))
            status = 400, snprintf(msg, sizeof msg, "role: must be prefill, decode or mixed");
    }
    json_decref(b);
    if (status == 200) {
        pthread_mutex_lock(&r->mu);
        if (!strcmp(method, "POST")) {
            int k = rep_add(r, &rc);
            if (k == -2) status = 409, snprintf(msg, sizeof msg, "%s is in the pool already", rc.url);
            else if (k < 0) status = 409, snprintf(msg, sizeof msg, "the pool is full (%d replicas)", TIDE_ROUTE_MAX_REPLICAS);
            else TIDE_INFO("route: replica %s (%s) joined", rc.url, tide_route_role_name(rc.role));
        } else {
            status = 404;
            snprintf(msg, sizeof msg, "%s is not in the pool", rc.url);
            for (int i = 0; i < r->n_reps; i++)
                if (r->reps[i].present && !strcmp(r->reps[i].cfg.url, rc.url)) {
                    r->reps[i].present = r->reps[i].up = 0;
                    tide_route_forget(&r->placer, i);
                    TIDE_INFO("route: replica %s left", rc.url);
                    status = 200;
                }
        }
        json_t *v = status == 200 ? replicas_json(r) : NULL;
        pthread_mutex_unlock(&r->mu);
        if (v) {
            wake(r);
            return queue_json(c, 200, v);
        }
    }
    char *e = error_body("/", status, "invalid_request_error", msg);
    return queue_body(c, status, "application/json", e, e ? strlen(e) : 0);
}

static enum MHD_Result metrics(tide_router *r, struct MHD_Connection *c) {
    tide_sb b;
    tide_sb_init(&b);
    pthread_mutex_lock(&r->mu);
    tide_sb_addf(&b,
                 "# TYPE tide_route_requests_total counter\ntide_route_requests_total %lld\n"
                 "# TYPE tide_route_retries_total counter\ntide_route_retries_total %lld\n"
                 "# TYPE tide_route_failed_total counter\ntide_route_failed_total %lld\n"
                 "# TYPE tide_route_broken_streams_total counter\ntide_route_broken_streams_total %lld\n"
                 "# TYPE tide_route_resumed_streams_total counter\ntide_route_resumed_streams_total %lld\n"
                 "# TYPE tide_route_disaggregated_total counter\ntide_route_disaggregated_total %lld\n"
                 "# TYPE tide_route_prefill_failed_total counter\ntide_route_prefill_failed_total %lld\n"
                 "# TYPE tide_route_prefix_hits_total counter\ntide_route_prefix_hits_total %lld\n"
                 "# TYPE tide_route_prefix_lookups_total counter\ntide_route_prefix_lookups_total %lld\n",
                 (long long)r->n_requests, (long long)r->n_retries, (long long)r->n_failed, (long long)r->n_broken,
                 (long long)r->n_resumed,
                 (long long)r->n_disagg, (long long)r->n_prefill_failed, (long long)r->placer.hits,
                 (long long)r->placer.lookups);
    static const char *const names[] = {"up", "in_flight", "forwarded_total", "prefills_total", "errors_total",
                                        "running", "queue_length", "kv_blocks_used"};
    for (int m = 0; m < 8; m++) {
        tide_sb_addf(&b, "# TYPE tide_route_replica_%s %s\n", names[m], strstr(names[m], "total") ? "counter" : "gauge");
        for (int i = 0; i < r->n_reps; i++) {
            rep *p = &r->reps[i];
            if (!p->present) continue;
            int64_t v[] = {p->up, p->inflight, p->forwarded, p->prefills, p->errors, p->s_running, p->s_queue,
                           p->s_kv_used};
            tide_sb_addf(&b, "tide_route_replica_%s{replica=\"%s\",role=\"%s\"} %lld\n", names[m], p->cfg.url,
                         tide_route_role_name(p->cfg.role), (long long)v[m]);
        }
    }
    pthread_mutex_unlock(&r->mu);
    size_t len = b.len;
    char *s = tide_sb_take(&b);
    return queue_body(c, 200, "text/plain; version=0.0.4", s, s ? len : 0);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *data_size, void **con_cls) {
    (void)version;
    tide_router *r = cls;
    conn_ctx *cx = *con_cls;
    if (!cx) {
        cx = calloc(1, sizeof *cx);
        if (!cx) return MHD_NO;
        tide_http_body_begin(c, &cx->body, &cx->too_big, (size_t)r->cfg.max_body);
        *con_cls = cx;
        return MHD_YES;
    }
    if (*data_size) {
        tide_http_body_add(&cx->body, &cx->too_big, (size_t)r->cfg.max_body, data, *data_size);
        *data_size = 0;
        return MHD_YES;
    }
    if (cx->answered) return MHD_YES;
    if (cx->f) { /* resumed: the answer is decided */
        pthread_mutex_lock(&r->mu);
        enum MHD_Result ret = cx->f->committed ? answer(c, cx) : MHD_YES;
        if (!cx->f->committed) cx->f->suspended = 1, MHD_suspend_connection(c);
        pthread_mutex_unlock(&r->mu);
        return ret;
    }
    if (cx->too_big) {
        cx->answered = 1;
        char m[128];
        snprintf(m, sizeof m, "the body is larger than the router's limit of %lld bytes", (long long)r->cfg.max_body);
        char *e = error_body(url, 413, "invalid_request_error", m);
        return queue_body(c, 413, "application/json", e, e ? strlen(e) : 0);
    }
    if (!strcmp(url, "/router/replicas") &&
        (!strcmp(method, "GET") || !strcmp(method, "POST") || !strcmp(method, "DELETE"))) {
        cx->answered = 1;
        return admin(r, c, method, cx);
    }
    if (!strcmp(url, "/metrics") && !strcmp(method, "GET")) {
        cx->answered = 1;
        return metrics(r, c);
    }
    if (!strcmp(url, "/health") && !strcmp(method, "GET")) {
        cx->answered = 1;
        pthread_mutex_lock(&r->mu);
        int up = 0;
        for (int i = 0; i < r->n_reps; i++) up += r->reps[i].present && r->reps[i].up;
        pthread_mutex_unlock(&r->mu);
        return queue_json(c, up ? 200 : 503, json_pack("{s:s, s:i}", "status", up ? "ok" : "no replica up",
                                                       "replicas_up", up));
    }
    if (strcmp(method, "GET") && strcmp(method, "POST")) {
        cx->answered = 1;
        char *e = error_body(url, 405, "invalid_request_error", "method not allowed");
        return queue_body(c, 405, "application/json", e, e ? strlen(e) : 0);
    }
    return forward(r, c, url, !strcmp(method, "POST"), cx);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c, (void)toe;
    tide_router *r = cls;
    conn_ctx *cx = *con_cls;
    if (!cx) return;
    if (cx->f) {
        pthread_mutex_lock(&r->mu);
        fwd *f = cx->f;
        f->conn = NULL;
        f->suspended = 0;
        if (!f->finished) f->cancel = 1;
        fwd_unref(f);
        pthread_mutex_unlock(&r->mu);
        wake(r);
    }
    tide_sb_free(&cx->body);
    free(cx);
    *con_cls = NULL;
}


int tide_router_start(const tide_route_config *cfg, tide_router **out, tide_status *st) {
    *out = NULL;
    tide_router *r = calloc(1, sizeof *r);
    if (!r) return tide_fail(st, TIDE_ERR_NOMEM, "router: out of memory");
    r->cfg = *cfg;
    pthread_mutex_init(&r->mu, NULL);
    if (tide_route_placer_init(&r->placer, &cfg->policy, st)) {
        free(r);
        return -1;
    }
    for (int i = 0; i < cfg->n_replicas; i++) rep_add(r, &cfg->replicas[i]);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || !(r->multi = curl_multi_init())) {
        tide_router_stop(r);
        return tide_fail(st, TIDE_ERR_INTERNAL, "router: libcurl did not initialise");
    }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, cfg->host, &sa.sin_addr) != 1) {
        tide_router_stop(r);
        return tide_fail(st, TIDE_ERR_INVALID, "listen host '%s': not an IPv4 address", cfg->host);
    }
    r->mhd = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
                              (uint16_t)cfg->port, NULL, NULL, on_request, r, MHD_OPTION_SOCK_ADDR, &sa,
                              MHD_OPTION_EXTERNAL_LOGGER, tide_http_log, "route", MHD_OPTION_NOTIFY_COMPLETED, on_completed, r,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_END);
    if (!r->mhd) {
        tide_router_stop(r);
        return tide_fail(st, TIDE_ERR_IO, "cannot listen on %s port %d (in use, or not an address of this machine)",
                         cfg->host, cfg->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(r->mhd, MHD_DAEMON_INFO_BIND_PORT);
    r->port = di ? di->port : cfg->port;
    if (pthread_create(&r->th, NULL, upstream_main, r) != 0) {
        tide_router_stop(r);
        return tide_fail(st, TIDE_ERR_INTERNAL, "router: cannot start its upstream thread");
    }
    r->th_started = 1;
    *out = r;
    return 0;
}

int tide_router_port(const tide_router *r) { return r->port; }

void tide_router_stop(tide_router *r) {
    if (!r) return;
    /* every request still open gets its end (libmicrohttpd must not be
     * stopped with suspended connections), then the threads stop */
    pthread_mutex_lock(&r->mu);
    r->quit = 1;
    for (fwd *f = r->active; f; f = f->anext) {
        if (f->finished) continue;
        if (f->committed) {
            break_stream(f, "route: the router is stopping");
            f->finished = 1;
            resume(f);
        } else {
            fail_fwd(f, 503, "api_error", "route: the router is stopping");
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (r->th_started) {
        wake(r);
        pthread_join(r->th, NULL);
    }
    if (r->mhd) MHD_stop_daemon(r->mhd);
    for (fwd *f = r->active, *nx; f; f = nx) {
        nx = f->anext;
        if (f->h) curl_multi_remove_handle(r->multi, f->h);
        fwd_unref(f);
    }
    for (fwd *f = r->queue, *nx; f; f = nx) nx = f->qnext, fwd_unref(f);
    for (int i = 0; i < r->n_reps; i++) {
        rep *p = &r->reps[i];
        if (p->hh) curl_multi_remove_handle(r->multi, p->hh), curl_easy_cleanup(p->hh);
        if (p->mh) curl_multi_remove_handle(r->multi, p->mh), curl_easy_cleanup(p->mh);
        tide_sb_free(&p->hbuf);
        tide_sb_free(&p->mbuf);
    }
    if (r->multi) curl_multi_cleanup(r->multi);
    curl_global_cleanup();
    tide_route_placer_free(&r->placer);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
