/* tide serve: the OpenAI / Anthropic compatible HTTP server (src/serve/).
 * Listens at once (503 while the model loads), prints one line
 * "tide serve: listening on http://HOST:PORT" on stdout when ready, and on
 * SIGTERM or SIGINT stops accepting (503), lets in-flight requests finish
 * (up to --drain-timeout), and exits 0. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/backend.h"
#include "cli/cli.h"
#include "cli/kv_cli.h"
#include "engine/spec.h"
#include "serve/serve.h"
#include "text/conv.h"
#include "vision/image.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide serve --model DIR [options]\n"
            "\n"
            "OpenAI and Anthropic compatible HTTP server over the engine (docs/serve.md):\n"
            "  POST /v1/chat/completions  /v1/completions  /v1/responses  /v1/messages\n"
            "       /v1/messages/count_tokens  /tokenize  /detokenize\n"
            "  GET  /v1/models  /health  /metrics (Prometheus text)\n"
            "Streaming (\"stream\": true) answers in server-sent events in each API's\n"
            "shapes; errors come in each API's error shape.\n"
            "\n"
            "options:\n"
            "  --model DIR          checkpoint directory (config.json, safetensors, tokenizer.json)\n"
            "  --backend cpu|cuda   the engine's backend (default cpu; cuda: every op on the GPU's\n"
            "                       exact kernels, staged through the host: docs/gpu.md)\n"
            "  --host ADDR          IPv4 or IPv6 address to listen on (default 127.0.0.1)\n"
            "  --port N             TCP port (default 8000; 0 = any free port, printed)\n"
            "  --api-key KEY[:CLASS]  require 'Authorization: Bearer KEY' or 'x-api-key: KEY'\n"
            "                       on /v1/*, /tokenize, /detokenize; repeat for several keys;\n"
            "                       CLASS chat|agent: the KV store class of the key's requests\n"
            "                       (default: $TIDE_API_KEY, a comma-separated list, else no auth)\n"
            "  --served-model-name NAME  the model id in /v1/models (default: DIR's name)\n"
            "  --tokenizer FILE     tokenizer.json (default DIR/tokenizer.json)\n"
            "  --max-body BYTES     request body limit, 413 beyond (default 33554432)\n"
            "  --max-prompt N       prompt tokens at most, 400 beyond (default: the context)\n"
            "  --max-images N       images per request, 400 beyond (default 16; a vision checkpoint)\n"
            "  --max-image-bytes N  one image's encoded bytes at most (default 20971520)\n"
            "  --max-image-pixels N one image's decoded pixels at most (default 50000000)\n"
            "  --max-seqs N         requests running at once (default 64)\n"
            "  --max-queue N        requests accepted beyond those, 429 beyond (default 256)\n"
            "  --timeout S          a request running longer is ended (default 600)\n"
            "  --drain-timeout S    on SIGTERM, wait this long for in-flight requests (default 30)\n"
            "  --threads N          engine worker threads (default 2)\n"
            "  --http-threads N     HTTP threads (default 2)\n"
            "  --kv-blocks N        KV pool capacity in blocks (default 1048576)\n"
            "  --step-tokens N      token budget of one engine step (default 512)\n"
            "  --seed N             engine seed for requests without one (default 0)\n"
            "  --no-prefix-cache    do not reuse the KV of earlier requests' prompt pages\n"
            "  --spec MODE          speculative decoding: dspark, fixed:K or off (default);\n"
            "                       the same tokens as off (docs/spec.md)\n");
    kv_run_help(f);
    fprintf(f, "  (a request's \"kv_class\": \"chat\"|\"agent\" field picks its pages' class; else its\n"
               "  API key's, else --kv-class; a request with the header x-tide-kv-flush is answered\n"
               "  once its pages are written: tide route's prefill leg, docs/route.md)\n");
}

typedef struct serve_opts {
    tide_serve_config cfg;
    const char *backend;
    double drain_s;
    kv_run_opts kv;  /* the persistent KV store's flags (kv_run.c) */
    char keys[4096]; /* --api-key, repeated: "KEY[:CLASS],..." */
} serve_opts;

static int num(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end = NULL;
    double x = v ? strtod(v, &end) : 0;
    if (!v || !*v || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "tide serve: %s wants a number in [%g, %g], got '%s'\n", flag, lo, hi, v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

static int parse(int argc, char **argv, serve_opts *o) {
    tide_serve_config *c = &o->cfg;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(TIDE_EXIT_OK);
        }
        if (!strcmp(a, "--no-prefix-cache")) {
            c->engine.prefix_cache = 0;
            continue;
        }
        if (!v) {
            fprintf(stderr, "tide serve: unknown option '%s' or missing value\n", a);
            return -1;
        }
        int kn = kv_run_flag(&o->kv, a, v);
        if (kn < 0) return -1;
        if (kn == 2) {
            i++;
            continue;
        }
        i++;
        if (!strcmp(a, "--model")) c->engine.model_dir = v;
        else if (!strcmp(a, "--spec")) {
            tide_status sst = {0};
            if (tide_spec_parse(v, &c->engine.spec_mode, &c->engine.spec_k, &sst) != 0) {
                fprintf(stderr, "tide serve: %s\n", sst.msg);
                return -1;
            }
        }
        else if (!strcmp(a, "--backend")) o->backend = v;
        else if (!strcmp(a, "--host")) c->host = v;
        else if (!strcmp(a, "--api-key")) {
            size_t l = strlen(o->keys);
            if (!*v || strchr(v, ',') || l + strlen(v) + 2 > sizeof o->keys) {
                fprintf(stderr, "tide serve: --api-key '%s': empty, holds a comma, or the keys are too long\n", v);
                return -1;
            }
            snprintf(o->keys + l, sizeof o->keys - l, "%s%s", l ? "," : "", v);
            c->api_key = o->keys;
        }
        else if (!strcmp(a, "--served-model-name")) c->model_name = v;
        else if (!strcmp(a, "--tokenizer")) c->tokenizer = v;
        else if (!strcmp(a, "--port")) {
            if (num(a, v, 0, 65535, &x)) return -1;
            c->port = (int)x;
        } else if (!strcmp(a, "--max-body")) {
            if (num(a, v, 1, 1 << 30, &x)) return -1;
            c->max_body = (size_t)x;
        } else if (!strcmp(a, "--max-images")) {
            if (num(a, v, 1, TIDE_CONV_MAX_IMAGES, &x)) return -1;
            c->max_images = (int)x;
        } else if (!strcmp(a, "--max-image-bytes")) {
            if (num(a, v, 1, (double)TIDE_IMAGE_MAX_BYTES, &x)) return -1;
            c->max_image_bytes = (size_t)x;
        } else if (!strcmp(a, "--max-image-pixels")) {
            if (num(a, v, 1, (double)TIDE_IMAGE_MAX_PIXELS, &x)) return -1;
            c->max_image_pixels = (int64_t)x;
        } else if (!strcmp(a, "--max-prompt")) {
            if (num(a, v, 1, 1e12, &x)) return -1;
            c->max_prompt = (int64_t)x;
        } else if (!strcmp(a, "--max-seqs")) {
            if (num(a, v, 1, 1 << 16, &x)) return -1;
            c->engine.max_seqs = (int)x;
        } else if (!strcmp(a, "--max-queue")) {
            if (num(a, v, 0, 1 << 20, &x)) return -1;
            c->max_queue = (int)x;
        } else if (!strcmp(a, "--timeout")) {
            if (num(a, v, 0.001, 1e7, &x)) return -1;
            c->timeout_s = x;
        } else if (!strcmp(a, "--drain-timeout")) {
            if (num(a, v, 0, 1e7, &o->drain_s)) return -1;
        } else if (!strcmp(a, "--threads")) {
            if (num(a, v, 1, 1024, &x)) return -1;
            c->engine.n_threads = (int)x;
        } else if (!strcmp(a, "--http-threads")) {
            if (num(a, v, 1, 256, &x)) return -1;
            c->http_threads = (int)x;
        } else if (!strcmp(a, "--kv-blocks")) {
            if (num(a, v, 1, 1e12, &x)) return -1;
            c->engine.kv_blocks = (int64_t)x;
        } else if (!strcmp(a, "--step-tokens")) {
            if (num(a, v, 1, 1 << 24, &x)) return -1;
            c->engine.max_step_tokens = (int64_t)x;
        } else if (!strcmp(a, "--seed")) {
            if (num(a, v, 0, 1.8e19, &x)) return -1;
            c->engine.seed = (uint64_t)x;
        } else {
            fprintf(stderr, "tide serve: unknown option '%s'\n", a);
            return -1;
        }
    }
    if (!c->engine.model_dir) {
        fprintf(stderr, "tide serve: --model DIR is required\n");
        return -1;
    }
    if (strcmp(o->backend, "cpu") && strcmp(o->backend, "cuda")) {
        fprintf(stderr, "tide serve: --backend is cpu or cuda, not '%s'\n", o->backend);
        return -1;
    }
    return 0;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Stops accepting, waits for in-flight requests (bounded), stops. */
static void drain_and_stop(tide_server *s, double drain_s) {
    tide_server_drain(s);
    for (long waited = 0; !tide_server_idle(s) && waited < (long)(drain_s * 1000); waited += 20) sleep_ms(20);
    tide_server_stop(s);
}

int tide_cmd_serve(int argc, char **argv) {
    serve_opts o = {.cfg = tide_serve_config_default(), .backend = "cpu", .drain_s = 30};
    const char *env_key = getenv("TIDE_API_KEY");
    if (env_key && *env_key) o.cfg.api_key = env_key;
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "(tide serve --help lists the options)\n");
        return TIDE_EXIT_USAGE;
    }
    tide_status st = {0};
    tide_cli_backend be;
    kv_run *kv = NULL;
    if (tide_cli_backend_parse(&be, o.backend, NULL, &st) != 0 || tide_cli_backend_open(&be, &o.cfg.engine, &st) != 0) {
        fprintf(stderr, "tide serve: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    /* Every thread the server starts inherits this mask, so the signals
     * reach only the sigwait below. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (kv_run_open(&o.kv, &o.cfg.engine, &kv, &st) != 0) { /* its writer thread inherits the mask */
        fprintf(stderr, "tide serve: %s\n", st.msg);
        tide_cli_backend_close(&be);
        return TIDE_EXIT_FAIL;
    }
    o.cfg.kv_tiers = kv_run_tiers(kv); /* /metrics reads the tiers' counters */
    tide_server *s;
    if (tide_server_start(&o.cfg, &s, &st) != 0) {
        fprintf(stderr, "tide serve: %s\n", st.msg);
        kv_run_close(kv);
        tide_cli_backend_close(&be);
        return TIDE_EXIT_FAIL;
    }
    fprintf(stderr, "tide serve: loading %s (requests get 503 until it is loaded)\n", o.cfg.engine.model_dir);
    if (tide_server_wait_ready(s, &st) != 0) {
        fprintf(stderr, "tide serve: %s\n", st.msg);
        tide_server_stop(s);
        kv_run_close(kv);
        tide_cli_backend_close(&be);
        return TIDE_EXIT_FAIL;
    }
    const char *h = o.cfg.host;
    printf(strchr(h, ':') ? "tide serve: listening on http://[%s]:%d\n" : "tide serve: listening on http://%s:%d\n", h,
           tide_server_port(s));
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "tide serve: %s: draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    drain_and_stop(s, o.drain_s);
    kv_run_close(kv);
    tide_cli_backend_close(&be);
    fprintf(stderr, "tide serve: stopped\n");
    return TIDE_EXIT_OK;
}
