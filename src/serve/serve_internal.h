/* The server's insides, shared by the files of src/serve (not for other layers).
 *
 * Threads: libmicrohttpd's pool runs serve_http.c and serve_route.c (parse,
 * render, tokenize: everything that can refuse a request happens there);
 * the generation layer's engine thread (api/gen.h) runs the sessions and
 * calls the jobs' sinks. They meet in `mu`: each job's output buffer and
 * flags, the list of active jobs, the metrics. */
#ifndef TIDE_SERVE_SERVE_INTERNAL_H
#define TIDE_SERVE_SERVE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "api/gen.h"
#include "api/out.h"
#include "serve/serve.h"
#include "text/outparse.h"
#include "text/sbuf.h"
#include "text/tokenizer.h"
#include "tide.h"

struct MHD_Connection;
struct MHD_Daemon;

typedef enum serve_state {
    SERVE_LOADING,
    SERVE_READY,
    SERVE_FAILED, /* the model did not load: every request gets 503 */
    SERVE_DRAINING,
} serve_state;

/* The generation routes are tide_api_kind's (api/api.h). */
typedef tide_api_kind serve_api;
#define SERVE_CHAT TIDE_API_CHAT
#define SERVE_RESPONSES TIDE_API_RESPONSES
#define SERVE_MESSAGES TIDE_API_MESSAGES
#define SERVE_COMPLETIONS TIDE_API_COMPLETIONS

/* ---- metrics (serve_metrics.c) ---- */
#define SERVE_HIST_BUCKETS 14
typedef struct serve_hist {
    int64_t counts[SERVE_HIST_BUCKETS + 1]; /* the last one is +Inf */
    double sum;
    int64_t n;
} serve_hist;

#define SERVE_MAX_CODES 16
typedef struct serve_metrics {
    int codes[SERVE_MAX_CODES];
    int64_t code_counts[SERVE_MAX_CODES];
    int n_codes;
    int64_t prompt_tokens, generated_tokens, cached_tokens;
    int64_t disconnects, timeouts;
    serve_hist ttft, itl, e2e;
    serve_hist spec_acc; /* per request: accepted / verified drafts (ratio buckets) */
} serve_metrics;

void serve_hist_add(serve_hist *h, double seconds);
void serve_ratio_add(serve_hist *h, double ratio); /* buckets 0.1 .. 1 */
void serve_metrics_count_status(serve_metrics *m, int status);

/* ---- jobs: one generation request (serve_job.c) ----
 * The generation itself is the generation layer's (api/gen.h); a job is the
 * HTTP side of one session: the bytes waiting for the connection, and the
 * flags both threads look at. */
typedef struct serve_job serve_job;
struct serve_job {
    tide_server *srv;
    int refs;              /* under mu: the HTTP side's and the session's */
    serve_api api;
    int stream;
    int kv_flush;          /* x-tide-kv-flush: the answer waits for the KV tiers' writes (tide route) */
    tide_api_req req;      /* parsed on the HTTP thread; handed to tide_gen_submit */
    tide_gen_id gid;       /* the session, once submitted */
    char id[48];
    int64_t seq;           /* unique in the server (the disconnect watcher's key) */
    int key_class;         /* the API key's KV class (TIDE_KV_CLASS_*), 0 none */
    double t_arrive, t_first, t_last; /* monotonic seconds; t_* on the engine thread */
    double t_engine;       /* the session handed to the engine (the engine's own TTFT starts there) */
    double t_sse;          /* the first text event appended (engine thread) */
    double t_out;          /* the first response bytes handed to libmicrohttpd */
    /* under mu */
    tide_sb buf;           /* SSE bytes, or the whole response body */
    size_t off;            /* bytes of buf handed to the connection */
    int finished;          /* buf is complete (the session's done came) */
    int status;            /* non-streaming: the HTTP status of buf */
    int cancel;            /* the client went away: the session is cancelled */
    int timed_out;
    int suspended;         /* the connection waits for resume */
    struct MHD_Connection *conn; /* NULL once the HTTP side is done */
    serve_job *next, *prev; /* srv->active */
};

/* Builds a job from a request body, or fills the error reply. */
typedef struct serve_reply {
    int status;
    const char *ctype;
    char *body; /* malloc'd */
    size_t len;
    serve_job *job; /* set: the answer comes from the engine */
} serve_reply;

int serve_job_new(tide_server *srv, serve_api api, const char *body, size_t len, serve_job **out,
                  serve_reply *err);
/* Hands the job to the generation layer (after j->conn is set); fails with
 * the error reply when it refuses the request. */
int serve_job_submit(serve_job *j, serve_reply *err);
void serve_job_unref(serve_job *j); /* under mu */

/* ---- the server ---- */
struct tide_server {
    tide_serve_config cfg;
    char *model_dir, *model_name, *tok_path, *api_key, *host;
    /* --api-key: the keys (pointers into api_key) and their KV classes */
#define SERVE_MAX_KEYS 64
    const char *keys[SERVE_MAX_KEYS];
    int key_class[SERVE_MAX_KEYS]; /* TIDE_KV_CLASS_* */
    int n_keys;
    tide_gen_engine *gen;  /* NULL until loaded */
    struct MHD_Daemon *mhd;
    int port;
    pthread_t loader;      /* loads the model, then watches the timeouts */
    int loader_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    serve_state state;
    int quit;
    tide_status load_st;
    serve_job *active;     /* submitted, not done */
    int64_t n_jobs;        /* accepted and not yet done */
    int64_t id_seq;
    serve_metrics metrics;
    /* The disconnect watcher (serve_http.c): an epoll set of the sockets of
     * connections with a job, and an eventfd that stops its thread. */
    int watch_ep, watch_stop;
    pthread_t watcher;
    int watcher_on;
};

double serve_now(void);
/* An error body in the route's API shape (status, type, message, param). */
void serve_error(serve_reply *r, serve_api api, int status, const char *type, const char *param,
                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
void serve_reply_json(serve_reply *r, int status, char *body);

/* Request handling below libmicrohttpd: the route for method + path with
 * the given headers and complete body. Called from HTTP threads (and the
 * fuzzer). header(ud, name) returns a header's value or NULL. */
typedef struct serve_http_req {
    const char *method, *path;
    const char *body;
    size_t len;
    const char *(*header)(void *ud, const char *name);
    void *ud;
} serve_http_req;
void serve_route(tide_server *srv, const serve_http_req *rq, serve_reply *rp);
/* Route of a path for error shapes (404 etc. use the OpenAI shape). */
serve_api serve_api_of_path(const char *path);

/* Plain routes (serve_tokens.c, serve_metrics.c). */
void serve_tokenize(tide_server *srv, const char *body, size_t len, serve_reply *rp);
void serve_detokenize(tide_server *srv, const char *body, size_t len, serve_reply *rp);
void serve_count_tokens(tide_server *srv, const char *body, size_t len, serve_reply *rp);
void serve_metrics_text(tide_server *srv, serve_reply *rp);
void serve_health(tide_server *srv, serve_reply *rp);

/* libmicrohttpd (serve_http.c). */
int serve_http_start(tide_server *srv, tide_status *st);
void serve_http_stop(tide_server *srv);

/* The loader thread (serve_server.c). */
void *serve_loader_main(void *arg);

/* A server around an engine the caller made (tests and the fuzzer: no
 * model load, no HTTP). */
int serve_server_new(const tide_serve_config *cfg, tide_server **out, tide_status *st);
void serve_server_free(tide_server *s);

#endif
