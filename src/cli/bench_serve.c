/* tide bench serve: drives a running `tide serve` over HTTP (libcurl's
 * multi interface, one thread) with the generated workload of `tide bench
 * offline` (same --requests, --prompt-len, --gen, --seed: the same token
 * ids), as streaming /v1/completions requests with token-id prompts, greedy,
 * EOS ignored, so every request generates exactly G tokens. Requests start
 * at a given arrival rate (Poisson, seeded) or keep a given number in
 * flight. TTFT is the time from sending a request to its first streamed
 * chunk with text, inter-token the time between its chunks, end-to-end the
 * time to [DONE]. With --offline the same workload then runs through `tide
 * bench offline` in this process, for the ratio (stop the server first, or
 * the two share the cores). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "bench/stats.h"
#include "bench/workload.h"
#include "cli/bench.h"
#include "cli/cli.h"
#include "engine/rng.h"
#include "model/config.h"
#include "text/sbuf.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide bench serve --url http://HOST:PORT --model DIR|synth:SHAPE [options]\n"
            "\n"
            "Sends the generated workload of 'tide bench offline' (same options, same token\n"
            "ids) to a running tide serve as streaming /v1/completions requests (token-id\n"
            "prompts, greedy, ignore_eos: exactly G tokens each). Prints requests/s,\n"
            "generated tokens/s over the wall time, TTFT p50/p90/p99 (request sent to the\n"
            "first chunk with text), inter-token p50/p99 (between chunks), end-to-end\n"
            "p50/p99. --model only gives the vocabulary for the workload (the server's own\n"
            "checkpoint, or the synth:SHAPE it was written from).\n"
            "\n"
            "options:\n"
            "  --url URL            the server (default http://127.0.0.1:8000)\n"
            "  --model SPEC         checkpoint directory or synth:SHAPE (the workload's vocabulary)\n"
            "  --api-key KEY        sent as a bearer token\n"
            "  --requests N         requests (default 16)\n"
            "  --prompt-len A[-B]   prompt tokens, uniform in A..B (default 16-64)\n"
            "  --gen G              tokens to generate per request (default 16)\n"
            "  --seed N             workload seed (default: bench offline's, 1)\n"
            "  --concurrency C      requests in flight at most (default: all at once)\n"
            "  --rate R             arrivals per second, Poisson (default: none, see --concurrency)\n"
            "  --offline            then run the same workload through 'tide bench offline'\n"
            "                       in this process (with --threads T, --max-seqs S, --step-tokens K)\n"
            "  --threads T, --max-seqs S, --step-tokens K  for --offline (bench offline's\n"
            "                       defaults; start the server with the same values); --offline\n"
            "                       also gets --concurrency (each TTFT from its own submission)\n"
            "  --ttft-out FILE      one line per request: its index, TTFT in seconds, and when it was\n"
            "                       sent and its first chunk came (monotonic seconds); with\n"
            "                       --offline, bench offline's (index, TTFT) go to FILE.offline\n");
}

typedef struct serve_bench {
    const char *url, *model, *key, *ttft_out;
    int64_t requests, len[2], gen, seed, concurrency, rate, threads, max_seqs, step_tokens;
    int offline;
} serve_bench;

/* One request in flight. */
typedef struct breq {
    CURL *h;
    struct curl_slist *hdr;
    char *body;
    tide_sb line;        /* a partial SSE line */
    double t_start, t_first, t_last;
    int64_t tokens;      /* usage.completion_tokens from the last chunk */
    int done_seen, bad_chunk;
    double *itl;         /* the run's inter-token samples */
    int64_t *n_itl, cap_itl;
} breq;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void on_event(breq *r, const char *data, size_t len) {
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        r->done_seen = 1;
        return;
    }
    json_t *o = json_loadb(data, len, 0, NULL);
    if (!o) {
        r->bad_chunk = 1;
        return;
    }
    json_t *c0 = json_array_get(json_object_get(o, "choices"), 0);
    json_t *text = json_object_get(c0, "text");
    if (json_is_string(text) && json_string_length(text) > 0) {
        double t = now_s();
        if (r->t_first == 0) r->t_first = t;
        else if (*r->n_itl < r->cap_itl) r->itl[(*r->n_itl)++] = t - r->t_last;
        r->t_last = t;
    }
    json_t *u = json_object_get(json_object_get(o, "usage"), "completion_tokens");
    if (json_is_integer(u)) r->tokens = json_integer_value(u);
    json_decref(o);
}

/* Splits the stream into lines; "data: X" lines are events. */
static size_t on_bytes(char *p, size_t size, size_t n, void *ud) {
    breq *r = ud;
    size_t len = size * n;
    tide_sb_addn(&r->line, p, len);
    if (r->line.oom) return 0;
    size_t start = 0;
    for (size_t i = 0; i < r->line.len; i++) {
        if (r->line.s[i] != '\n') continue;
        const char *l = r->line.s + start;
        size_t ll = i - start;
        if (ll >= 6 && !memcmp(l, "data: ", 6)) on_event(r, l + 6, ll - 6);
        start = i + 1;
    }
    tide_sb_consume(&r->line, start);
    return len;
}

static char *request_body(const tide_workload *w, int64_t i) {
    json_t *ids = json_array();
    for (int64_t k = 0; ids && k < w->n_prompt[i]; k++) json_array_append_new(ids, json_integer(w->prompt[i][k]));
    json_t *o = json_pack("{s:s, s:o, s:I, s:f, s:b, s:b, s:{s:b}}", "model", "bench", "prompt", ids, "max_tokens",
                          (json_int_t)w->max_tokens, "temperature", 0.0, "ignore_eos", 1, "stream", 1,
                          "stream_options", "include_usage", 1);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static int start_one(CURLM *m, const serve_bench *o, const tide_workload *w, int64_t i, breq *r) {
    char url[1024];
    snprintf(url, sizeof url, "%s/v1/completions", o->url);
    r->body = request_body(w, i);
    r->h = curl_easy_init();
    if (!r->body || !r->h) return -1;
    r->hdr = curl_slist_append(NULL, "Content-Type: application/json");
    if (o->key) {
        char auth[512];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->key);
        r->hdr = curl_slist_append(r->hdr, auth);
    }
    curl_easy_setopt(r->h, CURLOPT_URL, url);
    curl_easy_setopt(r->h, CURLOPT_HTTPHEADER, r->hdr);
    curl_easy_setopt(r->h, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(r->h, CURLOPT_WRITEFUNCTION, on_bytes);
    curl_easy_setopt(r->h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(r->h, CURLOPT_PRIVATE, r);
    curl_easy_setopt(r->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(r->h, CURLOPT_TIMEOUT, 3600L);
    r->t_start = now_s();
    return curl_multi_add_handle(m, r->h) == CURLM_OK ? 0 : -1;
}

static void print_ms(const char *label, double *v, int64_t n, const double *ps, int nps) {
    tide_stats_sort(v, n);
    printf("  %-16s", label);
    for (int i = 0; i < nps; i++) printf(" p%g %.2f", ps[i], 1e3 * tide_stats_percentile(v, n, ps[i]));
    printf("  (ms, %lld samples)\n", (long long)n);
}

typedef struct results {
    double *ttft, *e2e, *itl;
    int64_t n_ttft, n_e2e, n_itl, tokens, errors;
    double wall;
    char first_error[256];
} results;

/* Runs the workload; every request is started and finished (or failed). */
static int drive(const serve_bench *o, const tide_workload *w, breq *rs, results *res) {
    CURLM *m = curl_multi_init();
    if (!m) return -1;
    int64_t next = 0, running = 0, finished = 0;
    int64_t limit = o->concurrency > 0 ? o->concurrency : w->n;
    double t0 = now_s(), arrive = t0;
    while (finished < w->n) {
        double t = now_s();
        while (next < w->n && running < limit && (o->rate <= 0 || t >= arrive)) {
            breq *r = &rs[next];
            r->itl = res->itl, r->n_itl = &res->n_itl, r->cap_itl = w->n * w->max_tokens;
            if (start_one(m, o, w, next, r) != 0) {
                curl_multi_cleanup(m);
                return -1;
            }
            next++, running++;
            if (o->rate > 0) arrive += tide_rng_exp((uint64_t)o->seed, (uint64_t)next, 0x5e7e, 0) / (double)o->rate;
        }
        int still = 0;
        curl_multi_perform(m, &still);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            breq *r;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            long code = 0;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
            double end = now_s();
            if (msg->data.result != CURLE_OK || code != 200 || !r->done_seen || r->bad_chunk) {
                if (!res->errors++)
                    snprintf(res->first_error, sizeof res->first_error, "%s, HTTP %ld%s%s",
                             curl_easy_strerror(msg->data.result), code, r->done_seen ? "" : ", no [DONE]",
                             r->bad_chunk ? ", a chunk that is not JSON" : "");
            } else {
                if (r->t_first > 0) res->ttft[res->n_ttft++] = r->t_first - r->t_start;
                res->e2e[res->n_e2e++] = end - r->t_start;
                res->tokens += r->tokens;
            }
            curl_multi_remove_handle(m, msg->easy_handle);
            running--, finished++;
        }
        /* A request can start now (one finished, or an arrival is due):
         * start it at once instead of waiting in the poll with a free slot
         * (that wait cost ~25 ms per request at --concurrency 1). */
        int can_start = next < w->n && running < limit && (o->rate <= 0 || now_s() >= arrive);
        if (finished < w->n && !can_start) {
            int ms = 50;
            if (o->rate > 0 && next < w->n) {
                double d = (arrive - now_s()) * 1e3;
                ms = d < 0 ? 0 : d < 50 ? (int)d : 50;
            }
            curl_multi_poll(m, NULL, 0, ms, NULL);
        }
    }
    res->wall = now_s() - t0;
    curl_multi_cleanup(m);
    return 0;
}

static int workload_for(const serve_bench *o, tide_workload *w, tide_status *st) {
    tide_config cfg;
    const char *shape = !strncmp(o->model, "synth:", 6) ? o->model + 6 : NULL;
    if ((shape ? tide_config_preset(shape, &cfg, st) : tide_config_load(o->model, &cfg, st)) != 0) return -1;
    return tide_workload_random(w, o->requests, o->len[0], o->len[1], o->gen, cfg.text.vocab_size,
                                cfg.image_token_id, (uint64_t)o->seed, st);
}

static void report(const serve_bench *o, const tide_workload *w, results *r) {
    double wall = r->wall > 0 ? r->wall : 1e-9;
    printf("tide bench serve: %s, %lld requests, prompt %lld-%lld tokens (%lld in all), %lld generated each, seed %lld, ",
           o->url, (long long)w->n, (long long)o->len[0], (long long)o->len[1], (long long)w->total_prompt,
           (long long)o->gen, (long long)o->seed);
    if (o->rate > 0) printf("rate %lld/s\n", (long long)o->rate);
    else printf("concurrency %lld\n", (long long)(o->concurrency > 0 ? o->concurrency : w->n));
    printf("  wall             %.3f s\n", wall);
    printf("  requests/s       %.3f\n", (double)r->n_e2e / wall);
    printf("  prompt tok/s     %.1f\n", (double)w->total_prompt / wall);
    printf("  generated tok/s  %.1f (%lld tokens)\n", (double)r->tokens / wall, (long long)r->tokens);
    static const double p3[] = {50, 90, 99}, p2[] = {50, 99};
    print_ms("TTFT", r->ttft, r->n_ttft, p3, 3);
    print_ms("inter-token", r->itl, r->n_itl, p2, 2);
    print_ms("end-to-end", r->e2e, r->n_e2e, p3, 3);
    printf("  errors           %lld\n", (long long)r->errors);
}

/* --ttft-out: "index seconds start first" per request that got a first
 * chunk (start and first: CLOCK_MONOTONIC seconds, the server's clock too
 * on the same machine: tools/bench/serve_overhead.py). */
static int write_ttft(const char *path, const tide_workload *w, const breq *rs, tide_status *st) {
    FILE *f = fopen(path, "w");
    if (!f) return tide_fail(st, TIDE_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    for (int64_t i = 0; i < w->n; i++)
        if (rs[i].t_first > 0)
            fprintf(f, "%lld %.9f %.6f %.6f\n", (long long)i, rs[i].t_first - rs[i].t_start, rs[i].t_start, rs[i].t_first);
    return fclose(f) == 0 ? 0 : tide_fail(st, TIDE_ERR_IO, "writing %s failed", path);
}

/* The same workload through `tide bench offline`. */
static int run_offline(const serve_bench *o) {
    char req[32], len[48], gen[32], seed[32], thr[32], seqs[32], step[32], conc[32], *tout = NULL;
    snprintf(req, sizeof req, "%lld", (long long)o->requests);
    snprintf(len, sizeof len, "%lld-%lld", (long long)o->len[0], (long long)o->len[1]);
    snprintf(gen, sizeof gen, "%lld", (long long)o->gen);
    snprintf(seed, sizeof seed, "%lld", (long long)o->seed);
    snprintf(thr, sizeof thr, "%lld", (long long)o->threads);
    snprintf(seqs, sizeof seqs, "%lld", (long long)o->max_seqs);
    snprintf(step, sizeof step, "%lld", (long long)o->step_tokens);
    char *argv[24] = {"offline", "--model", (char *)o->model, "--requests", req, "--prompt-len", len, "--gen", gen,
                      "--seed", seed, "--threads", thr, "--max-seqs", seqs, "--step-tokens", step};
    int argc = 17;
    if (o->concurrency > 0) {
        snprintf(conc, sizeof conc, "%lld", (long long)o->concurrency);
        argv[argc++] = "--concurrency", argv[argc++] = conc;
    }
    if (o->ttft_out) {
        size_t n = strlen(o->ttft_out) + sizeof ".offline";
        if (!(tout = malloc(n))) return TIDE_EXIT_FAIL;
        snprintf(tout, n, "%s.offline", o->ttft_out);
        argv[argc++] = "--ttft-out", argv[argc++] = tout;
    }
    fflush(stdout);
    int rc = tide_bench_offline(argc, argv);
    free(tout);
    return rc;
}

int tide_bench_serve(int argc, char **argv) {
    bench_engine_opts eo; /* bench offline's defaults: the same workload seed and engine */
    tide_bench_engine_defaults(&eo);
    serve_bench o = {.url = "http://127.0.0.1:8000", .requests = 16, .len = {16, 64}, .gen = 16, .seed = eo.seed,
                     .threads = eo.threads, .max_seqs = eo.max_seqs, .step_tokens = eo.step_tokens};
    bench_opt t[] = {
        {"--url", BENCH_STR, &o.url, 0, 0},
        {"--model", BENCH_STR, &o.model, 0, 0},
        {"--api-key", BENCH_STR, &o.key, 0, 0},
        {"--requests", BENCH_INT, &o.requests, 1, 1000000},
        {"--prompt-len", BENCH_RANGE, o.len, 1, 1 << 20},
        {"--gen", BENCH_INT, &o.gen, 1, 1 << 20},
        {"--seed", BENCH_INT, &o.seed, 0, INT64_MAX},
        {"--concurrency", BENCH_INT, &o.concurrency, 1, 1000000},
        {"--rate", BENCH_INT, &o.rate, 1, 1000000},
        {"--offline", BENCH_FLAG, &o.offline, 0, 0},
        {"--ttft-out", BENCH_STR, &o.ttft_out, 0, 0},
        {"--threads", BENCH_INT, &o.threads, 1, 1024},
        {"--max-seqs", BENCH_INT, &o.max_seqs, 1, 1 << 16},
        {"--step-tokens", BENCH_INT, &o.step_tokens, 1, 1 << 24},
        {NULL, 0, NULL, 0, 0},
    };
    int rc = tide_bench_parse("serve", argc, argv, t, usage);
    if (rc >= 0) return rc;
    if (!o.model) return tide_bench_usage_error("serve", usage, "--model is required (the workload's vocabulary)");
    if (o.rate && o.concurrency) return tide_bench_usage_error("serve", usage, "--rate and --concurrency exclude each other");
    size_t ul = strlen(o.url);
    char *url = strdup(o.url);
    if (url && ul && url[ul - 1] == '/') url[ul - 1] = 0;
    o.url = url;
    tide_status st = {0};
    tide_workload w = {0};
    results res = {0};
    breq *rs = NULL;
    rc = TIDE_EXIT_FAIL;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (!url || workload_for(&o, &w, &st) != 0) goto done;
    rs = calloc((size_t)w.n, sizeof *rs);
    res.ttft = calloc((size_t)w.n, sizeof *res.ttft);
    res.e2e = calloc((size_t)w.n, sizeof *res.e2e);
    res.itl = calloc((size_t)(w.n * w.max_tokens), sizeof *res.itl);
    if (!rs || !res.ttft || !res.e2e || !res.itl) {
        tide_fail(&st, TIDE_ERR_NOMEM, "out of memory for %lld requests", (long long)w.n);
        goto done;
    }
    for (int64_t i = 0; i < w.n; i++) tide_sb_init(&rs[i].line);
    if (drive(&o, &w, rs, &res) != 0) {
        tide_fail(&st, TIDE_ERR_NOMEM, "cannot start a request (libcurl)");
        goto done;
    }
    report(&o, &w, &res);
    if (o.ttft_out && write_ttft(o.ttft_out, &w, rs, &st) != 0) goto done;
    if (res.errors) {
        tide_fail(&st, TIDE_ERR_IO, "%lld requests failed; the first: %s", (long long)res.errors, res.first_error);
        goto done;
    }
    rc = o.offline ? run_offline(&o) : TIDE_EXIT_OK;
done:
    if (rc != TIDE_EXIT_OK && st.msg[0]) fprintf(stderr, "tide bench serve: %s\n", st.msg);
    for (int64_t i = 0; rs && i < w.n; i++) {
        if (rs[i].h) curl_easy_cleanup(rs[i].h);
        curl_slist_free_all(rs[i].hdr);
        free(rs[i].body);
        tide_sb_free(&rs[i].line);
    }
    free(rs);
    free(res.ttft), free(res.e2e), free(res.itl);
    tide_workload_free(&w);
    free(url);
    curl_global_cleanup();
    return rc;
}
