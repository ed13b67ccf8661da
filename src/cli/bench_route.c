/* tide bench route: a request trace (Mooncake or Azure format) replayed
 * through the router's placement in simulation (src/cluster/route_sim.c):
 * cache-hit rate, balancedness against the ideal offline assignment, TTFT
 * and TPOT percentiles, for prefix-aware placement and round-robin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "base/log.h"
#include "bench/stats.h"
#include "bench/workload.h"
#include "cli/bench.h"
#include "cli/cli.h"
#include "cluster/route_sim.h"
#include "model/config.h"
#include "text/sbuf.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide bench route --trace FILE [options]\n"
            "\n"
            "Replays a request trace through the router's placement (the code tide route\n"
            "runs) in simulation, over P prefill and D decode replicas with a cost model\n"
            "(docs/route.md section 6). Prints per placement mode: the prefix-cache hit rate\n"
            "(prompt tokens found in the chosen prefill replica's cache), the balancedness\n"
            "of the prefill and decode pools (mean / max work per window, work-weighted)\n"
            "next to the ideal offline assignment's (longest job first), the bound no\n"
            "assignment beats (mean / max(mean, largest job)) and our ratio to the ideal,\n"
            "and TTFT and TPOT percentiles.\n"
            "Trace formats: Mooncake JSONL ({\"timestamp\" ms, \"input_length\",\n"
            "\"output_length\", \"hash_ids\"}, 512 tokens a hash id) or the Azure LLM\n"
            "inference CSV (TIMESTAMP,ContextTokens,GeneratedTokens; no prefix hashes).\n"
            "\n"
            "options:\n"
            "  --trace FILE         the trace\n"
            "  --config FILE        a tide route configuration: its placement section\n"
            "                       (buckets, weights, overload) is used\n"
            "  --mode M             aware, round-robin or both (default both)\n"
            "  --prefill N          prefill replicas (default 4)\n"
            "  --decode N           decode replicas (default 4)\n"
            "  --cache-blocks N     prefix cache of a prefill replica, in hash units (default 4096)\n"
            "  --prefill-tps N      prefill tokens per second of a replica (default 20000)\n"
            "  --decode-step-us N   a decode step's base time, microseconds (default 20000)\n"
            "  --window S           balancedness window, seconds (default 60)\n"
            "\n"
            "Against real replicas (--url): the trace's requests go to a running tide route\n"
            "at their times as streaming /v1/completions requests with token-id prompts\n"
            "(equal hash units = equal token blocks), greedy; prints TTFT and TPOT\n"
            "percentiles and each pool's balancedness from the replicas' tokens fed\n"
            "(docs/route.md section 6):\n"
            "  --url URL            the router (http://HOST:PORT)\n"
            "  --model SPEC         the replicas' checkpoint or synth:SHAPE (the vocabulary)\n"
            "  --api-key KEY        sent as a bearer token\n"
            "  --block-tokens N     prompt tokens per hash unit in the replay (default 16);\n"
            "                       lengths scale by N / the trace's tokens per unit\n"
            "  --max-output N       output tokens at most per request (default 8)\n"
            "  --requests N         the first N requests of the trace (default all)\n"
            "  --speedup N          the trace's time runs N times faster (default 1)\n");
}

static void report(const char *name, const tide_sim_result *r) {
    double hit = r->prompt_tokens ? 100.0 * (double)r->hit_tokens / (double)r->prompt_tokens : 0;
    printf("%s:\n", name);
    printf("  prefix-cache hit rate   %.1f %% of prompt tokens\n", hit);
    printf("  prefill balancedness    %.3f (ideal %.3f, bound %.3f): %.1f %% of ideal\n", r->bal_prefill,
           r->ideal_prefill, r->bound_prefill, 100 * r->bal_prefill / r->ideal_prefill);
    printf("  decode balancedness     %.3f (ideal %.3f, bound %.3f): %.1f %% of ideal\n", r->bal_decode,
           r->ideal_decode, r->bound_decode, 100 * r->bal_decode / r->ideal_decode);
    printf("  TTFT p50/p90/p99        %.3f / %.3f / %.3f s\n", r->ttft[0], r->ttft[1], r->ttft[2]);
    printf("  TPOT p50/p90/p99        %.2f / %.2f / %.2f ms\n", r->tpot[0] * 1e3, r->tpot[1] * 1e3, r->tpot[2] * 1e3);
    printf("  last token at           %.1f s\n", r->makespan_s);
}

/* ---- the same trace against a running router (--url) ----
 *
 * Each request of the trace becomes a streaming /v1/completions request with
 * a token-id prompt, sent at its time / --time-scale: hash unit i of the
 * request contributes --block-tokens ids drawn from a stream seeded by its
 * chain hash (equal prefixes in the trace = equal token prefixes here), the
 * rest of its scaled length (in_len x block-tokens / the trace's tokens per
 * unit) ids of its own; greedy, EOS ignored, min(output_length,
 * --max-output) tokens. TTFT: sent to the first chunk with text; TPOT:
 * (last chunk - first chunk) / (tokens - 1). Balancedness: every --window
 * seconds, each replica's tide_engine_tokens_fed_total (the tokens through
 * its forward pass: prompt, replay and decode steps) is read; a window's
 * work on a replica is the difference, and mean / max per pool is
 * work-weighted over the windows, as in the simulation (but this is work
 * done in the window, not work of the requests started in it). */

typedef struct live_req {
    CURL *h;
    char *body;
    tide_sb line;
    double t_send, t_first, t_last;
    int64_t tokens;
    int done, bad;
} live_req;

typedef struct live_rep {
    char url[TIDE_ROUTE_URL_MAX];
    char role[16];
    int64_t fed_prev;
    double work, wsum_bal; /* this window's, and the run's */
} live_rep;

static size_t live_sink(char *p, size_t sz, size_t n, void *ud) {
    tide_sb_addn(ud, p, sz * n);
    return sz * n;
}

/* GET url into *out (a fresh buffer); 0 on HTTP 200. */
static int live_get(const char *url, tide_sb *out) {
    tide_sb_init(out);
    CURL *h = curl_easy_init();
    if (!h) return -1;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, live_sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    long code = 0;
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    return rc == CURLE_OK && code == 200 && !out->oom ? 0 : -1;
}

static int64_t live_fed(const char *url) {
    char full[TIDE_ROUTE_URL_MAX + 16];
    snprintf(full, sizeof full, "%s/metrics", url);
    tide_sb b;
    int64_t v = -1;
    if (!live_get(full, &b) && b.s) {
        const char *name = "\ntide_engine_tokens_fed_total ";
        const char *p = strstr(b.s, name);
        if (p) v = (int64_t)strtod(p + strlen(name), NULL);
    }
    tide_sb_free(&b);
    return v;
}

static void live_event(live_req *q, const char *d, size_t n) {
    if (n == 6 && !memcmp(d, "[DONE]", 6)) {
        q->done = 1;
        return;
    }
    json_t *o = json_loadb(d, n, 0, NULL);
    if (!o || json_object_get(o, "error")) q->bad = 1;
    const char *text = json_string_value(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "text"));
    if (text && *text) {
        q->t_last = tide_now_seconds();
        if (q->t_first == 0) q->t_first = q->t_last;
    }
    json_t *u = json_object_get(json_object_get(o, "usage"), "completion_tokens");
    if (json_is_integer(u)) q->tokens = json_integer_value(u);
    json_decref(o);
}

static size_t live_bytes(char *p, size_t sz, size_t n, void *ud) {
    live_req *q = ud;
    tide_sb_addn(&q->line, p, sz * n);
    if (q->line.oom) return 0;
    char *s = q->line.s, *nl;
    size_t used = 0;
    while ((nl = memchr(s + used, '\n', q->line.len - used))) {
        size_t ll = (size_t)(nl - (s + used));
        if (ll >= 6 && !strncmp(s + used, "data: ", 6)) live_event(q, s + used + 6, ll - 6);
        used += ll + 1;
    }
    tide_sb_consume(&q->line, used);
    return sz * n;
}

typedef struct live_opts {
    const char *url, *key, *model;
    int64_t block_tokens, max_output, max_requests, window;
    double time_scale;
} live_opts;

static char *live_body(const tide_trace *t, int64_t i, const live_opts *o, int64_t vocab, int64_t image) {
    const tide_trace_req *q = &t->reqs[i];
    int64_t per = t->block_tokens ? t->block_tokens : 512;
    int64_t len = (q->in_len * o->block_tokens + per - 1) / per, out = q->out_len < o->max_output ? q->out_len : o->max_output;
    if (len < 1) len = 1;
    if (out < 1) out = 1;
    json_t *ids = json_array();
    for (int64_t k = 0; k < len; k++) {
        int64_t unit = k / o->block_tokens;
        uint64_t seed = unit < q->n_hash ? t->hashes[q->hash_off + unit] : 0x7ace0000ull + (uint64_t)i;
        uint64_t idx = unit < q->n_hash ? (uint64_t)(k % o->block_tokens) : (uint64_t)k;
        json_array_append_new(ids, json_integer(tide_bench_token(seed, idx, vocab, image)));
    }
    json_t *b = json_pack("{s:s, s:o, s:I, s:f, s:b, s:b, s:{s:b}}", "model", "trace", "prompt", ids, "max_tokens",
                          (json_int_t)out, "temperature", 0.0, "ignore_eos", 1, "stream", 1, "stream_options",
                          "include_usage", 1);
    char *s = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    return s;
}

/* The pool as the router lists it (/router/replicas). */
static int live_pool(const char *url, live_rep *reps, int *n, tide_status *st) {
    char full[1100];
    snprintf(full, sizeof full, "%s/router/replicas", url);
    tide_sb b;
    int rc = live_get(full, &b);
    json_t *v = rc ? NULL : json_loadb(b.s ? b.s : "", b.len, 0, NULL);
    tide_sb_free(&b);
    json_t *a = json_object_get(v, "replicas");
    if (!json_is_array(a)) {
        json_decref(v);
        return tide_fail(st, TIDE_ERR_IO, "%s: no pool (is it a tide route?)", full);
    }
    *n = 0;
    for (size_t i = 0; i < json_array_size(a) && *n < TIDE_ROUTE_MAX_REPLICAS; i++) {
        json_t *r = json_array_get(a, i);
        const char *u = json_string_value(json_object_get(r, "url")), *role = json_string_value(json_object_get(r, "role"));
        if (!u || !role) continue;
        live_rep *p = &reps[(*n)++];
        memset(p, 0, sizeof *p);
        snprintf(p->url, sizeof p->url, "%s", u);
        snprintf(p->role, sizeof p->role, "%s", role);
        p->fed_prev = live_fed(p->url);
    }
    json_decref(v);
    return 0;
}

/* Closes a window: each pool's mean / max of the window's work, weighted. */
static void live_window(live_rep *reps, int n, double *bal, double *wsum) {
    static const char *const roles[3] = {"prefill", "decode", "mixed"};
    for (int g = 0; g < 3; g++) {
        double s = 0, mx = 0;
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (strcmp(reps[i].role, roles[g])) continue;
            int64_t f = live_fed(reps[i].url);
            double w = f >= reps[i].fed_prev && reps[i].fed_prev >= 0 ? (double)(f - reps[i].fed_prev) : 0;
            reps[i].fed_prev = f;
            reps[i].wsum_bal += w;
            s += w, mx = w > mx ? w : mx, m++;
        }
        if (m && mx > 0) bal[g] += s * (s / m / mx), wsum[g] += s;
    }
}

/* The next finished transfer of m (NULL: none yet), with its status and result. */
static live_req *live_done(CURLM *m, long *code, CURLcode *res) {
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left)) && msg->msg != CURLMSG_DONE) {
    }
    if (!msg) return NULL;
    live_req *q = NULL;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&q);
    curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, code);
    *res = msg->data.result;
    return q;
}

static int live_run(const tide_trace *t, const live_opts *o) {
    tide_status st = {0};
    tide_config cfg;
    const char *shape = !strncmp(o->model, "synth:", 6) ? o->model + 6 : NULL;
    if ((shape ? tide_config_preset(shape, &cfg, &st) : tide_config_load(o->model, &cfg, &st)) != 0) {
        fprintf(stderr, "tide bench route: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    live_rep reps[TIDE_ROUTE_MAX_REPLICAS];
    int n_reps = 0;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (live_pool(o->url, reps, &n_reps, &st)) {
        fprintf(stderr, "tide bench route: %s\n", st.msg);
        curl_global_cleanup();
        return TIDE_EXIT_FAIL;
    }
    int64_t n = t->n < o->max_requests ? t->n : o->max_requests;
    live_req *qs = calloc((size_t)n, sizeof *qs);
    double *ttft = calloc((size_t)n + 1, sizeof *ttft), *tpot = calloc((size_t)n + 1, sizeof *tpot);
    CURLM *m = curl_multi_init();
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    char auth[600], url[1100];
    if (o->key) snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->key), hdr = curl_slist_append(hdr, auth);
    snprintf(url, sizeof url, "%s/v1/completions", o->url);
    int rc = TIDE_EXIT_OK;
    if (!qs || !ttft || !tpot || !m || !hdr) {
        fprintf(stderr, "tide bench route: out of memory\n");
        rc = TIDE_EXIT_FAIL;
        goto out;
    }
    printf("live: %s, %d replicas, %lld requests, %lld tokens per hash unit, at most %lld output tokens, "
           "time scale %g, window %lld s\n",
           o->url, n_reps, (long long)n, (long long)o->block_tokens, (long long)o->max_output, o->time_scale,
           (long long)o->window);
    fflush(stdout);
    double t0 = tide_now_seconds(), next_window = t0 + (double)o->window, bal[3] = {0}, wsum[3] = {0};
    int64_t next = 0, running = 0, finished = 0, errors = 0, n_ttft = 0, n_tpot = 0;
    char first_error[256] = "";
    while (finished < n) {
        double now = tide_now_seconds();
        while (next < n && now - t0 >= t->reqs[next].t / o->time_scale) {
            live_req *q = &qs[next];
            tide_sb_init(&q->line);
            q->body = live_body(t, next, o, cfg.text.vocab_size, cfg.image_token_id);
            q->h = curl_easy_init();
            if (!q->body || !q->h) {
                fprintf(stderr, "tide bench route: out of memory\n");
                rc = TIDE_EXIT_FAIL;
                goto out;
            }
            curl_easy_setopt(q->h, CURLOPT_PRIVATE, q); /* the transfer is q's */
            curl_easy_setopt(q->h, CURLOPT_WRITEDATA, q);
            curl_easy_setopt(q->h, CURLOPT_WRITEFUNCTION, live_bytes);
            curl_easy_setopt(q->h, CURLOPT_NOSIGNAL, 1L);
            q->t_send = tide_now_seconds();
            curl_easy_setopt(q->h, CURLOPT_URL, url);
            curl_easy_setopt(q->h, CURLOPT_HTTPHEADER, hdr);
            curl_easy_setopt(q->h, CURLOPT_POSTFIELDS, q->body);
            curl_easy_setopt(q->h, CURLOPT_TIMEOUT, 3600L); /* a replica that hangs does not hang the run */
            curl_multi_add_handle(m, q->h);
            next++, running++;
        }
        int still = 0;
        curl_multi_perform(m, &still);
        live_req *q;
        long code = 0;
        CURLcode res = CURLE_OK;
        while ((q = live_done(m, &code, &res))) {
            if (res != CURLE_OK || code != 200 || !q->done || q->bad || q->t_first == 0) {
                if (!errors++)
                    snprintf(first_error, sizeof first_error, "request %lld: %s, HTTP %ld%s",
                             (long long)(q - qs), curl_easy_strerror(res), code,
                             q->done ? (q->bad ? ", an error event" : "") : ", no [DONE]");
            } else {
                ttft[n_ttft++] = q->t_first - q->t_send;
                if (q->tokens > 1) tpot[n_tpot++] = (q->t_last - q->t_first) / (double)(q->tokens - 1);
            }
            curl_multi_remove_handle(m, q->h);
            curl_easy_cleanup(q->h);
            q->h = NULL;
            running--, finished++;
        }
        if (tide_now_seconds() >= next_window) {
            live_window(reps, n_reps, bal, wsum);
            next_window += (double)o->window;
        }
        curl_multi_poll(m, NULL, 0, 10, NULL);
    }
    live_window(reps, n_reps, bal, wsum);
    double wall = tide_now_seconds() - t0;
    tide_stats_sort(ttft, n_ttft);
    tide_stats_sort(tpot, n_tpot);
    printf("  requests                %lld done, %lld failed%s%s in %.1f s\n", (long long)(n - errors),
           (long long)errors, errors ? ": first " : "", first_error, wall);
    printf("  TTFT p50/p90/p99        %.3f / %.3f / %.3f s\n", tide_stats_percentile(ttft, n_ttft, 50),
           tide_stats_percentile(ttft, n_ttft, 90), tide_stats_percentile(ttft, n_ttft, 99));
    printf("  TPOT p50/p90/p99        %.2f / %.2f / %.2f ms\n", 1e3 * tide_stats_percentile(tpot, n_tpot, 50),
           1e3 * tide_stats_percentile(tpot, n_tpot, 90), 1e3 * tide_stats_percentile(tpot, n_tpot, 99));
    static const char *const roles[3] = {"prefill", "decode", "mixed"};
    for (int g = 0; g < 3; g++) {
        if (wsum[g] <= 0) continue;
        double s = 0, mx = 0;
        int k = 0;
        printf("  %-7s balancedness    %.3f per window (ideal <= 1); tokens fed:", roles[g], bal[g] / wsum[g]);
        for (int i = 0; i < n_reps; i++)
            if (!strcmp(reps[i].role, roles[g])) {
                printf(" %.0f", reps[i].wsum_bal);
                s += reps[i].wsum_bal, mx = reps[i].wsum_bal > mx ? reps[i].wsum_bal : mx, k++;
            }
        printf(" (whole run %.3f)\n", mx > 0 ? s / k / mx : 1);
    }
    if (errors) rc = TIDE_EXIT_FAIL;
out:
    for (int64_t i = 0; qs && i < n; i++) {
        if (qs[i].h) curl_multi_remove_handle(m, qs[i].h), curl_easy_cleanup(qs[i].h);
        free(qs[i].body);
        tide_sb_free(&qs[i].line);
    }
    if (m) curl_multi_cleanup(m);
    curl_slist_free_all(hdr);
    free(qs);
    free(ttft);
    free(tpot);
    curl_global_cleanup();
    return rc;
}

int tide_bench_route(int argc, char **argv) {
    const char *trace = NULL, *config = NULL, *mode = "both";
    tide_sim_config c = tide_sim_config_default();
    int64_t np = c.n_prefill, nd = c.n_decode, cache = c.cache_blocks, tps = 20000, step_us = 20000,
            window = (int64_t)c.window_s, speedup = 1;
    live_opts lo = {.block_tokens = 16, .max_output = 8, .max_requests = TIDE_TRACE_MAX_REQS};
    const bench_opt opts[] = {
        {"--trace", BENCH_STR, &trace, 0, 0},
        {"--config", BENCH_STR, &config, 0, 0},
        {"--mode", BENCH_STR, &mode, 0, 0},
        {"--prefill", BENCH_INT, &np, 1, TIDE_ROUTE_MAX_REPLICAS - 1},
        {"--decode", BENCH_INT, &nd, 1, TIDE_ROUTE_MAX_REPLICAS - 1},
        {"--cache-blocks", BENCH_INT, &cache, 1, (int64_t)1 << 30},
        {"--prefill-tps", BENCH_INT, &tps, 1, (int64_t)1 << 30},
        {"--decode-step-us", BENCH_INT, &step_us, 1, 10000000},
        {"--window", BENCH_INT, &window, 1, 86400 * 365},
        {"--url", BENCH_STR, &lo.url, 0, 0},
        {"--model", BENCH_STR, &lo.model, 0, 0},
        {"--api-key", BENCH_STR, &lo.key, 0, 0},
        {"--block-tokens", BENCH_INT, &lo.block_tokens, 1, 4096},
        {"--max-output", BENCH_INT, &lo.max_output, 1, 1 << 20},
        {"--requests", BENCH_INT, &lo.max_requests, 1, TIDE_TRACE_MAX_REQS},
        {"--speedup", BENCH_INT, &speedup, 1, 1000000},
        {NULL, 0, NULL, 0, 0},
    };
    int rc = tide_bench_parse("route", argc, argv, opts, usage);
    if (rc >= 0) return rc;
    if (!trace) return tide_bench_usage_error("route", usage, "--trace FILE is required");
    int modes = !strcmp(mode, "aware") ? 1 : !strcmp(mode, "round-robin") ? 2 : !strcmp(mode, "both") ? 3 : 0;
    if (!modes) return tide_bench_usage_error("route", usage, "--mode '%s': expected aware, round-robin or both", mode);
    if (np + nd > TIDE_ROUTE_MAX_REPLICAS)
        return tide_bench_usage_error("route", usage, "--prefill + --decode: at most %d replicas",
                                      TIDE_ROUTE_MAX_REPLICAS);
    if (lo.url && !lo.model) return tide_bench_usage_error("route", usage, "--url needs --model (the vocabulary)");
    tide_status st = {0};
    if (config) {
        tide_route_config rc_;
        tide_route_config_default(&rc_);
        if (tide_route_config_load(&rc_, config, &st)) {
            fprintf(stderr, "tide bench route: %s\n", st.msg);
            return TIDE_EXIT_FAIL;
        }
        c.policy = rc_.policy;
    }
    c.n_prefill = (int)np;
    c.n_decode = (int)nd;
    c.cache_blocks = cache;
    c.prefill_s_per_token = 1.0 / (double)tps;
    c.decode_step_s = (double)step_us * 1e-6;
    c.window_s = (double)window;
    tide_trace t;
    if (tide_trace_load(trace, &t, &st)) {
        fprintf(stderr, "tide bench route: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    if (lo.url) {
        lo.window = window;
        lo.time_scale = (double)speedup;
        rc = live_run(&t, &lo);
        tide_trace_free(&t);
        return rc;
    }
    int64_t tokens = 0, out_tokens = 0;
    for (int64_t i = 0; i < t.n; i++) tokens += t.reqs[i].in_len, out_tokens += t.reqs[i].out_len;
    printf("trace %s: %s, %lld requests over %.1f s, %lld prompt + %lld output tokens", trace, t.format,
           (long long)t.n, t.reqs[t.n - 1].t, (long long)tokens, (long long)out_tokens);
    if (t.block_tokens) printf(", %d tokens per hash id", t.block_tokens);
    printf("\npool: %d prefill + %d decode replicas; cost model: prefill %lld tok/s + %.0f ms, decode step %.1f ms "
           "+ %.2f ms/seq + %.0f ns/context token; prefix cache %lld units; window %lld s\n",
           c.n_prefill, c.n_decode, (long long)tps, c.prefill_overhead_s * 1e3, c.decode_step_s * 1e3,
           c.decode_s_per_seq * 1e3, c.decode_s_per_ctx_token * 1e9, (long long)cache, (long long)window);
    rc = TIDE_EXIT_OK;
    for (int m = 1; m <= 2; m++) {
        if (!(modes & m)) continue;
        c.policy.mode = m == 1 ? TIDE_PLACE_AWARE : TIDE_PLACE_ROUND_ROBIN;
        tide_sim_result r;
        if (tide_sim_run(&t, &c, &r, &st)) {
            fprintf(stderr, "tide bench route: %s\n", st.msg);
            rc = TIDE_EXIT_FAIL;
            break;
        }
        report(m == 1 ? "aware" : "round-robin", &r);
    }
    tide_trace_free(&t);
    return rc;
}
