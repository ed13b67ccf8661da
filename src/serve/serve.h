/* tide serve: the OpenAI / Anthropic compatible HTTP server.
 *
 *     tide_serve_config cfg = tide_serve_config_default();
 *     cfg.engine.model_dir = "/models/tiny"; cfg.port = 8000;
 *     tide_server *s;
 *     if (tide_server_start(&cfg, &s, &st) != 0) ...   // st.msg says why
 *     ... SIGTERM ...
 *     tide_server_drain(s);                             // 503 for new work
 *     while (!tide_server_idle(s)) sleep ...            // in-flight requests end
 *     tide_server_stop(s);
 *
 * HTTP is libmicrohttpd's (its internal epoll thread pool); streaming
 * responses suspend their connection while they wait for tokens and the
 * generation layer's engine thread (api/gen.h) resumes them. HTTP threads
 * parse requests and submit them to the generation layer. Routes, limits
 * and metrics: docs/serve.md. */
#ifndef TIDE_SERVE_SERVE_H
#define TIDE_SERVE_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "tide.h"

typedef struct tide_serve_config {
    tide_engine_config engine; /* model_dir, threads, KV pool, ... (on_event is the generation layer's) */
    const char *host;          /* listen address; default "127.0.0.1" */
    int port;                  /* 0 = any free port (tide_server_port says which) */
    /* NULL/"" = no auth; else Bearer or x-api-key must match one of the
     * keys: KEY[,KEY...], each KEY or KEY:chat / KEY:agent, the persistent
     * KV store traffic class of its requests' pages (a request's own
     * "kv_class" wins) */
    const char *api_key;
    const char *model_name;    /* the id in /v1/models; default: the directory's last name */
    const char *tokenizer;     /* tokenizer.json; default MODEL_DIR/tokenizer.json */
    size_t max_body;           /* bytes; default TIDE_API_MAX_BODY (413 beyond) */
    int64_t max_prompt;        /* prompt tokens; default 0 = the model's context (400 beyond) */
    /* images per request, bytes and pixels per image (400 beyond); 0 = the
     * defaults (api/gen.h tide_gen_image_limits) */
    int max_images;
    size_t max_image_bytes;
    int64_t max_image_pixels;
    int max_queue;             /* requests accepted beyond engine.max_seqs (429 beyond); default 256 */
    double timeout_s;          /* a request running longer is ended; default 600 */
    int http_threads;          /* libmicrohttpd's pool; default 2 */
    int max_connections;       /* default 4096 */
    /* The persistent KV store's tiers that engine.kv_tier points into
     * (borrowed), for /metrics; NULL: none. */
    struct tide_kvtiers *kv_tiers;
} tide_serve_config;

tide_serve_config tide_serve_config_default(void);

typedef struct tide_server tide_server;

/* Starts listening at once (requests get 503 while the model loads) and
 * loads the model on a loader thread. Fails when the address cannot be
 * bound; a model that fails to load is reported by tide_server_wait_ready. */
int tide_server_start(const tide_serve_config *cfg, tide_server **out, tide_status *st);
/* Waits until the model is loaded (0) or failed to load (-1, st says why). */
int tide_server_wait_ready(tide_server *s, tide_status *st);
int tide_server_port(const tide_server *s);
/* Stops accepting work: new requests get 503, running ones go on. */
void tide_server_drain(tide_server *s);
/* Whether no request is in flight. */
int tide_server_idle(tide_server *s);
/* Cancels what is left, stops the threads, frees everything. NULL is fine. */
void tide_server_stop(tide_server *s);

#endif
