/* /metrics in the Prometheus text format and /health. Counters are kept
 * under srv->mu by the HTTP threads (statuses) and the engine thread
 * (tokens, latencies); the engine's own figures come from the snapshot the
 * engine thread takes after every step. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvstore_tiers.h"
#include "serve/serve_internal.h"

/* Seconds: 1 ms .. 60 s, roughly x2.5 apart. */
static const double BOUNDS[SERVE_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                  0.25,  0.5,    1,     2.5,  5,     10,  60};

void serve_hist_add(serve_hist *h, double s) {
    int b = 0;
    while (b < SERVE_HIST_BUCKETS && s > BOUNDS[b]) b++;
    h->counts[b]++;
    h->sum += s;
    h->n++;
}

/* Ratios 0..1 in tenths (the same bucket count as the seconds). */
static const double RATIO[SERVE_HIST_BUCKETS] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1, 1, 1};

void serve_ratio_add(serve_hist *h, double r) {
    int b = 0;
    while (b < SERVE_HIST_BUCKETS && r > RATIO[b]) b++;
    h->counts[b]++;
    h->sum += r;
    h->n++;
}

void serve_metrics_count_status(serve_metrics *m, int status) {
    for (int i = 0; i < m->n_codes; i++)
        if (m->codes[i] == status) {
            m->code_counts[i]++;
            return;
        }
    if (m->n_codes < SERVE_MAX_CODES) m->codes[m->n_codes] = status, m->code_counts[m->n_codes++] = 1;
}

static void hist_with(tide_sb *b, const char *name, const char *help, const serve_hist *h, const double *bounds) {
    tide_sb_addf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    int64_t cum = 0;
    for (int i = 0; i < SERVE_HIST_BUCKETS; i++) {
        cum += h->counts[i];
        if (i > 0 && bounds[i] == bounds[i - 1]) continue; /* the ratio buckets end at 1 */
        tide_sb_addf(b, "%s_bucket{le=\"%g\"} %" PRId64 "\n", name, bounds[i], cum);
    }
    cum += h->counts[SERVE_HIST_BUCKETS];
    tide_sb_addf(b, "%s_bucket{le=\"+Inf\"} %" PRId64 "\n%s_sum %.6f\n%s_count %" PRId64 "\n", name, cum, name, h->sum,
                 name, h->n);
}

static void hist(tide_sb *b, const char *name, const char *help, const serve_hist *h) {
    hist_with(b, name, help, h, BOUNDS);
}

static void gauge(tide_sb *b, const char *name, const char *type, const char *help, double v) {
    tide_sb_addf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

/* One labelled sample per line: name{label="v"} value, under one header. */
static void head(tide_sb *b, const char *name, const char *type, const char *help) {
    tide_sb_addf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The persistent KV store's tiers (docs/kvstore.md section 6): hits per
 * tier, misses, what was written, the host tier, and per store its bytes
 * read and written, coding throughput, repairs, evictions, expired pages. */
static void kv_metrics(tide_sb *b, tide_kvtiers *t) {
    tide_kvtiers_stats s;
    tide_kvtiers_get_stats(t, &s);
    tide_kvstore_stats ks[4];
    int n = 0;
    for (tide_kvstore *k; n < 4 && (k = tide_kvtiers_store(t, n)) != NULL; n++) tide_kvstore_get_stats(k, &ks[n]);
    head(b, "tide_kv_tier_hits_total", "counter", "pages found in a tier (host memory, or store N in lookup order)");
    tide_sb_addf(b, "tide_kv_tier_hits_total{tier=\"host\"} %" PRId64 "\n", s.host_hits);
    for (int i = 0; i < n; i++) tide_sb_addf(b, "tide_kv_tier_hits_total{tier=\"store%d\"} %" PRId64 "\n", i, s.store_hits[i]);
    gauge(b, "tide_kv_tier_misses_total", "counter", "pages no tier held", (double)s.misses);
    gauge(b, "tide_kv_tier_pages_queued_total", "counter", "pages handed to the tiers to write", (double)s.queued);
    gauge(b, "tide_kv_tier_pages_written_total", "counter", "page writes that a store took", (double)s.written);
    gauge(b, "tide_kv_tier_write_errors_total", "counter", "page writes a store refused", (double)s.write_errors);
    gauge(b, "tide_kv_tier_pages_dropped_total", "counter", "pages dropped on a full write queue", (double)s.dropped);
    gauge(b, "tide_kv_host_pages", "gauge", "pages in the host-memory tier", (double)s.host_pages);
    gauge(b, "tide_kv_host_bytes", "gauge", "bytes in the host-memory tier", (double)s.host_bytes);
    gauge(b, "tide_kv_host_evictions_total", "counter", "pages evicted from the host-memory tier", (double)s.host_evictions);
    static const struct {
        const char *name, *type, *help;
    } M[] = {
        {"tide_kvstore_pages", "gauge", "pages in the store"},
        {"tide_kvstore_bytes", "gauge", "shard file bytes in the store"},
        {"tide_kvstore_bytes_written_total", "counter", "bytes written"},
        {"tide_kvstore_bytes_read_total", "counter", "bytes read"},
        {"tide_kvstore_hits_total", "counter", "pages read"},
        {"tide_kvstore_misses_total", "counter", "pages not found (expired ones included)"},
        {"tide_kvstore_lost_total", "counter", "pages found with fewer than k good shards"},
        {"tide_kvstore_corrupt_shards_total", "counter", "shards that failed their checksum"},
        {"tide_kvstore_repairs_total", "counter", "shards rewritten from parity"},
        {"tide_kvstore_evictions_total", "counter", "pages evicted for capacity"},
        {"tide_kvstore_expired_total", "counter", "expired pages deleted"},
        {"tide_kvstore_encode_bytes_per_second", "gauge", "erasure-coding encode throughput (page bytes)"},
        {"tide_kvstore_decode_bytes_per_second", "gauge", "erasure-coding rebuild throughput (page bytes)"},
    };
    for (size_t j = 0; j < sizeof M / sizeof M[0]; j++) {
        head(b, M[j].name, M[j].type, M[j].help);
        for (int i = 0; i < n; i++) {
            const tide_kvstore_stats *k = &ks[i];
            double v[] = {(double)k->pages, (double)k->bytes, (double)k->bytes_written, (double)k->bytes_read,
                          (double)k->hits, (double)k->misses, (double)k->lost, (double)k->corrupt_shards,
                          (double)k->repairs, (double)k->evictions, (double)k->expired,
                          k->encode_seconds > 0 ? (double)k->encode_bytes / k->encode_seconds : 0,
                          k->decode_seconds > 0 ? (double)k->decode_bytes / k->decode_seconds : 0};
            tide_sb_addf(b, "%s{store=\"%d\"} %.17g\n", M[j].name, i, v[j]);
        }
    }
}

void serve_metrics_text(tide_server *srv, serve_reply *rp) {
    tide_sb b;
    tide_sb_init(&b);
    pthread_mutex_lock(&srv->mu);
    const serve_metrics *m = &srv->metrics;
    tide_gen_stats gs;
    memset(&gs, 0, sizeof gs);
    if (srv->gen) tide_gen_get_stats(srv->gen, &gs);
    const tide_engine_stats *s = &gs.engine;
    tide_sb_add(&b, "# HELP tide_requests_total HTTP responses by status code\n# TYPE tide_requests_total counter\n");
    for (int i = 0; i < m->n_codes; i++)
        tide_sb_addf(&b, "tide_requests_total{code=\"%d\"} %" PRId64 "\n", m->codes[i], m->code_counts[i]);
    gauge(&b, "tide_prompt_tokens_total", "counter", "prompt tokens of finished requests", (double)m->prompt_tokens);
    gauge(&b, "tide_generation_tokens_total", "counter", "tokens generated", (double)m->generated_tokens);
    gauge(&b, "tide_cached_prompt_tokens_total", "counter", "prompt tokens served by the prefix cache",
          (double)m->cached_tokens);
    gauge(&b, "tide_disconnects_total", "counter", "requests cancelled because the client left", (double)m->disconnects);
    gauge(&b, "tide_timeouts_total", "counter", "requests ended by the request timeout", (double)m->timeouts);
    hist(&b, "tide_time_to_first_token_seconds", "arrival to first generated token", &m->ttft);
    hist(&b, "tide_inter_token_seconds", "time between consecutive tokens of a request", &m->itl);
    hist(&b, "tide_request_seconds", "arrival to the last token", &m->e2e);
    gauge(&b, "tide_requests_in_flight", "gauge", "accepted requests not yet answered", (double)srv->n_jobs);
    gauge(&b, "tide_queue_length", "gauge", "requests waiting in the engine", (double)s->n_waiting);
    gauge(&b, "tide_running_sequences", "gauge", "sequences running in the engine", (double)s->n_running);
    gauge(&b, "tide_kv_blocks_used", "gauge", "KV pool blocks in use (cached pages included)", (double)s->kv_blocks_used);
    gauge(&b, "tide_kv_blocks_total", "gauge", "KV pool capacity in blocks", (double)s->kv_blocks_total);
    gauge(&b, "tide_kv_blocks_cached", "gauge", "blocks held only by idle prefix-cache pages", (double)s->kv_blocks_cached);
    gauge(&b, "tide_kv_usage_ratio", "gauge", "used / total KV blocks",
          s->kv_blocks_total ? (double)s->kv_blocks_used / (double)s->kv_blocks_total : 0);
    gauge(&b, "tide_prefix_cache_pages_cached", "gauge", "prefix-cache pages with an entry", (double)s->prefix_pages_cached);
    gauge(&b, "tide_prefix_cache_pages_in_use", "gauge", "prefix-cache pages used by running requests",
          (double)s->prefix_pages_in_use);
    gauge(&b, "tide_prefix_cache_hit_rate", "gauge", "prompt tokens found in the cache / looked up", s->prefix_hit_rate);
    gauge(&b, "tide_prefix_cache_hit_tokens_total", "counter", "prompt tokens found in the cache",
          (double)s->prefix_hit_tokens);
    gauge(&b, "tide_engine_steps_total", "counter", "engine steps", (double)s->steps);
    gauge(&b, "tide_engine_tokens_fed_total", "counter", "tokens through the forward pass (prefill, replay, decode)",
          (double)s->tokens_fed);
    gauge(&b, "tide_prefix_replay_tokens_total", "counter", "tokens recomputed to rebuild the windows of hits",
          (double)s->prefix_replay_tokens);
    gauge(&b, "tide_kv_tier_fetched_total", "counter", "pages brought in from the KV store tiers",
          (double)s->kv_tier_fetched);
    gauge(&b, "tide_kv_tier_stored_total", "counter", "pages handed to the KV store tiers", (double)s->kv_tier_stored);
    gauge(&b, "tide_spec_drafts_verified_total", "counter", "speculative decoding: draft tokens verified",
          (double)s->spec_verified);
    gauge(&b, "tide_spec_drafts_accepted_total", "counter", "speculative decoding: draft tokens accepted",
          (double)s->spec_accepted);
    gauge(&b, "tide_spec_acceptance_ratio", "gauge", "accepted / verified draft tokens",
          s->spec_verified ? (double)s->spec_accepted / (double)s->spec_verified : 0);
    gauge(&b, "tide_spec_accepted_length", "gauge", "tokens per sequence-step under speculation",
          s->spec_seq_steps ? 1.0 + (double)s->spec_accepted / (double)s->spec_seq_steps : 0);
    hist_with(&b, "tide_spec_request_acceptance_ratio", "per request: accepted / verified draft tokens", &m->spec_acc,
              RATIO);
    pthread_mutex_unlock(&srv->mu);
    if (srv->cfg.kv_tiers) kv_metrics(&b, srv->cfg.kv_tiers); /* the tiers lock themselves */
    rp->ctype = "text/plain; version=0.0.4";
    rp->status = b.oom ? 500 : 200;
    rp->len = b.len;
    rp->body = tide_sb_take(&b);
}

/* {"status": "ok"|"loading"|"draining"|"failed", ...}: 200 only when ready.
 * The KV figures let a test check that the pool is back to idle: in use
 * and not merely cached = kv_blocks_used - kv_blocks_cached. */
void serve_health(tide_server *srv, serve_reply *rp) {
    pthread_mutex_lock(&srv->mu);
    serve_state s = srv->state;
    tide_gen_stats gs;
    memset(&gs, 0, sizeof gs);
    if (srv->gen) tide_gen_get_stats(srv->gen, &gs);
    const tide_engine_stats *e = &gs.engine;
    static const char *const names[] = {"loading", "ok", "failed", "draining"};
    json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "status", names[s], "model", srv->model_name,
                          "in_flight", (json_int_t)srv->n_jobs, "waiting", (json_int_t)e->n_waiting, "running",
                          (json_int_t)e->n_running, "kv_blocks_used", (json_int_t)e->kv_blocks_used,
                          "kv_blocks_cached", (json_int_t)e->kv_blocks_cached, "kv_blocks_total",
                          (json_int_t)e->kv_blocks_total);
    if (o && s == SERVE_FAILED) json_object_set_new(o, "error", json_string(srv->load_st.msg));
    pthread_mutex_unlock(&srv->mu);
    serve_reply_json(rp, s == SERVE_READY ? 200 : 503, o ? json_dumps(o, JSON_COMPACT) : NULL);
    json_decref(o);
}
