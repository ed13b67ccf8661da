/* Fuzz target for tide route's parsers (src/cluster/): the first byte picks
 *   0: the configuration file (route_config.c): an accepted one has valid
 *      urls, increasing bucket edges, shares summing to 1, and a placer
 *      that places on it;
 *   1: a trace (route_trace.c, Mooncake or Azure): an accepted one is
 *      sorted from t = 0 with lengths and hash offsets in range, and a short
 *      one runs through the simulation (hits never above the prompts);
 *   2+: a request body as the router reads it (router_req.c): chain within
 *      bounds; the prefill leg's body, when made, is JSON again; the same
 *      bytes as a stream event's payload for resumption: text only with
 *      1, and no longer than the payload. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/route.h"
#include "cluster/route_sim.h"
#include "cluster/route_trace.h"
#include "cluster/router.h"

static void fuzz_config(const char *s, size_t n) {
    tide_route_config c;
    tide_status st = {0};
    tide_route_config_default(&c);
    if (tide_route_config_parse(&c, s, n, "fuzz", &st) != 0) {
        if (!st.msg[0]) abort();
        return;
    }
    double sum = 0;
    for (int b = 0; b < c.policy.n_buckets; b++) sum += c.policy.shares[b];
    if (fabs(sum - 1) > 1e-9) abort();
    for (int b = 1; b < c.policy.n_buckets - 1; b++)
        if (c.policy.edges[b] <= c.policy.edges[b - 1]) abort();
    tide_route_view v[TIDE_ROUTE_MAX_REPLICAS];
    for (int i = 0; i < c.n_replicas; i++) {
        char url[TIDE_ROUTE_URL_MAX];
        memcpy(url, c.replicas[i].url, sizeof url);
        if (tide_route_url_check(url, &st) != 0) abort();
        v[i] = (tide_route_view){.role = c.replicas[i].role, .up = 1, .prompt_tokens = i, .running = i};
    }
    tide_route_placer p;
    if (tide_route_placer_init(&p, &c.policy, &st) != 0) abort();
    uint64_t chain[2] = {1, 2};
    int r = tide_route_place_prefill(&p, v, c.n_replicas, TIDE_ROLE_PREFILL, 0, 70000, chain, NULL, 2, NULL);
    if (r >= c.n_replicas || (r >= 0 && v[r].role != TIDE_ROLE_PREFILL)) abort();
    r = tide_route_place_decode(&p, v, c.n_replicas, TIDE_ROLE_DECODE);
    if (r >= c.n_replicas || (r >= 0 && v[r].role != TIDE_ROLE_DECODE)) abort();
    tide_route_placer_free(&p);
}

static void fuzz_trace(const char *s, size_t n) {
    tide_trace t;
    tide_status st = {0};
    if (tide_trace_parse(s, n, "fuzz", &t, &st) != 0) {
        if (!st.msg[0] || t.reqs || t.hashes) abort();
        return;
    }
    if (t.n < 1 || t.reqs[0].t != 0) abort();
    for (int64_t i = 0; i < t.n; i++) {
        const tide_trace_req *q = &t.reqs[i];
        if ((i && q->t < t.reqs[i - 1].t) || q->in_len < 0 || q->out_len < 0 || q->in_len > TIDE_TRACE_MAX_LEN ||
            q->n_hash < 0 || q->hash_off < 0 || q->hash_off + q->n_hash > t.n_hashes)
            abort();
    }
    if (t.n <= 64) {
        tide_sim_config c = tide_sim_config_default();
        c.n_prefill = 2;
        c.n_decode = 2;
        c.policy.prefix_slots = 64;
        tide_sim_result r;
        if (tide_sim_run(&t, &c, &r, &st) != 0) abort();
        if (r.hit_tokens > r.prompt_tokens || r.requests != t.n) abort();
    }
    tide_trace_free(&t);
}

static void fuzz_request(int kind, const char *s, size_t n) {
    tide_route_api api = (tide_route_api)(1 + kind % 4);
    tide_route_req q;
    tide_route_req_read(api, s, n, &q);
    if (q.n_chain < 0 || q.n_chain > TIDE_ROUTE_MAX_CHAIN || q.prompt_tokens < 0) abort();
    size_t len = 0;
    char *b = tide_route_prefill_body(api, s, n, &len);
    if (b) {
        json_t *v = json_loadb(b, len, 0, NULL);
        if (!json_is_object(v)) abort();
        json_decref(v);
        free(b);
    }
    char *text = NULL;
    int k = tide_route_event_text(api, s, n, &text);
    if (k < -1 || k > 1 || (text && (k != 1 || strlen(text) > n))) abort();
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    if (data[0] == 0) fuzz_config(s, n);
    else if (data[0] == 1) fuzz_trace(s, n);
    else fuzz_request(data[0], s, n);
    return 0;
}
