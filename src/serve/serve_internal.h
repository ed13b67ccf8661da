/* The server's insides, shared by the files of src/serve (not for other layers).
 *
 * Threads: libmicrohttpd's pool runs serve_http.c and serve_route.c (parse,
 * render, tokenize: everything that can refuse a request happens there);
 * one engine thread (serve_engine.c) owns the engine, the jobs' detokenizers
 * and output formatters. They meet in `mu`: the queue of new jobs, each
 * job's output buffer and flags, the metrics. */
#ifndef TIDE_SERVE_SERVE_INTERNAL_H
#define TIDE_SERVE_SERVE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
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

/* The generation routes; the first three are tide_api_kind's values. */
typedef enum serve_api {
    SERVE_CHAT = TIDE_API_CHAT,
    SERVE_RESPONSES = TIDE_API_RESPONSES,
    SERVE_MESSAGES = TIDE_API_MESSAGES,
    SERVE_COMPLETIONS, /* legacy /v1/completions: raw prompt text, no template */
} serve_api;

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
} serve_metrics;

void serve_hist_add(serve_hist *h, double seconds);
void serve_metrics_count_status(serve_metrics *m, int status);

/* ---- jobs: one generation request (serve_job.c) ---- */
typedef struct serve_job serve_job;
struct serve_job {
    tide_server *srv;
    int refs;              /* under mu: the HTTP side's and the engine side's */
    serve_api api;
    int stream;
    tide_api_req req;      /* chat / responses / messages */
    int has_req;
    /* completions */
    tide_gen cgen;         /* its settings (stops, seed, max tokens) */
    tide_outparse *cparse; /* stop strings on raw text */
    tide_sb ctext;         /* the text so far (non-streaming) */
    int c_echo;
    char *c_prompt;
    int in_reasoning;
    char id[48];
    int64_t created;
    int32_t *prompt;
    int64_t n_prompt;
    int32_t stop_ids[4];
    tide_request ereq;     /* prompt + sampling; submitted by the engine thread */
    tide_request_id eid;   /* 0 until submitted */
    tide_api_out *out;     /* engine thread only */
    tide_detok *detok;     /* engine thread only */
    int ended;             /* the output parser said stop: cancel the engine request */
    int failed;            /* an error was written instead of the output */
    int eng_done;          /* the engine finished it: release and finalize */
    int cancel_sent;       /* tide_engine_cancel was called */
    int timed_out;
    int64_t n_gen, n_cached;
    double t_arrive, t_first, t_last; /* monotonic seconds */
    /* under mu */
    tide_sb buf;           /* SSE bytes, or the whole response body */
    size_t off;            /* bytes of buf handed to the connection */
    int finished;          /* buf is complete */
    int status;            /* non-streaming: the HTTP status of buf */
    int cancel;            /* the client went away (or the server stops) */
    int suspended;         /* the connection waits for resume */
    struct MHD_Connection *conn; /* NULL once the HTTP side is done */
    serve_job *next, *prev; /* srv->pending or srv->active */
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
void serve_job_unref(serve_job *j); /* under mu */
/* The SSE sink for api/out.h (engine thread; takes mu). */
int serve_job_sse(void *ud, const char *event, const char *data, size_t len, tide_status *st);

/* ---- the server ---- */
struct tide_server {
    tide_serve_config cfg;
    char *model_dir, *model_name, *tok_path, *api_key, *host;
    tide_tokenizer *tok;
    tide_engine *engine;
    int64_t ctx_len;       /* the model's context (prompt + output) */
    struct MHD_Daemon *mhd;
    int port;
    pthread_t engine_thread;
    int engine_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    serve_state state;
    int quit;
    tide_status load_st;
    serve_job *pending;    /* waiting for the engine thread to submit them */
    serve_job *active;     /* submitted, not finished */
    int64_t n_jobs;        /* pending + active + finished but not yet sent */
    int64_t id_seq;
    serve_metrics metrics;
    tide_engine_stats stats; /* the engine thread's last snapshot */
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
/* Queues a job for the engine thread (takes mu). */
void serve_engine_enqueue(tide_server *srv, serve_job *j);
/* Route of a path for error shapes (404 etc. use the OpenAI shape). */
serve_api serve_api_of_path(const char *path);

/* Plain routes (serve_tokens.c, serve_metrics.c). */
void serve_tokenize(tide_server *srv, const char *body, size_t len, serve_reply *rp);
void serve_detokenize(tide_server *srv, const char *body, size_t len, serve_reply *rp);
void serve_count_tokens(tide_server *srv, const char *body, size_t len, serve_reply *rp);
void serve_metrics_text(tide_server *srv, serve_reply *rp);
void serve_health(tide_server *srv, serve_reply *rp);

/* Completions (serve_completions.c): the body's fields into j, and the
 * engine thread's output side. */
int serve_completions_parse(serve_job *j, const char *body, size_t len, serve_reply *err);
int serve_completions_text(serve_job *j, const char *text, size_t len, tide_status *st);
int serve_completions_finish(serve_job *j, const char *finish, const tide_usage *u, tide_status *st);

/* libmicrohttpd (serve_http.c). */
int serve_http_start(tide_server *srv, tide_status *st);
void serve_http_stop(tide_server *srv);

/* Engine thread (serve_engine.c). */
void *serve_engine_main(void *arg);

/* A server around an engine the caller made (tests and the fuzzer: no
 * model load, no HTTP). */
int serve_server_new(const tide_serve_config *cfg, tide_server **out, tide_status *st);
void serve_server_free(tide_server *s);

#endif
