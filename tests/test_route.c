/* tide route's pieces below HTTP (src/cluster/): the configuration parser,
 * placement (buckets, prefix affinity, least load, round-robin) against a
 * brute-force reference on random pools, the prefix chain of requests, the
 * trace parsers and the simulation on the committed traces. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/route.h"
#include "cluster/route_sim.h"
#include "cluster/route_trace.h"
#include "cluster/router.h"
#include "testutil.h"

static void cfg_ok(tide_route_config *c, const char *json) {
    tide_status st = {0};
    tide_route_config_default(c);
    int rc = tide_route_config_parse(c, json, strlen(json), "t.json", &st);
    if (rc) fprintf(stderr, "unexpected: %s\n", st.msg);
    assert_int_equal(rc, 0);
}

static void cfg_bad(const char *json, const char *want) {
    tide_route_config c;
    tide_status st = {0};
    tide_route_config_default(&c);
    assert_int_equal(tide_route_config_parse(&c, json, strlen(json), "t.json", &st), -1);
    if (!strstr(st.msg, want)) fprintf(stderr, "message '%s' lacks '%s'\n", st.msg, want);
    assert_non_null(strstr(st.msg, want));
    assert_non_null(strstr(st.msg, "t.json"));
}

static void test_config(void **state) {
    (void)state;
    tide_route_config c;
    cfg_ok(&c, "{}");
    assert_int_equal(c.policy.n_buckets, 4);
    assert_int_equal(c.policy.edges[0], 16384);
    assert_int_equal(c.policy.edges[2], 262144);
    cfg_ok(&c, "{\"listen\": {\"host\": \"127.0.0.1\", \"port\": 0},"
               " \"replicas\": [{\"url\": \"http://127.0.0.1:9/\", \"role\": \"prefill\"},"
               "              {\"url\": \"http://localhost:10\"}],"
               " \"placement\": {\"mode\": \"round-robin\", \"bucket_edges\": [100, 1000],"
               "               \"bucket_shares\": [2, 1, 1], \"weights\": {\"running\": 3, \"context_tokens\": 0.5},"
               "               \"prefix_slots\": 1024, \"prefill_memory_s\": 0},"
               " \"disaggregate\": false, \"health\": {\"interval_ms\": 50, \"fail_threshold\": 3}, \"retries\": 5}");
    assert_int_equal(c.port, 0);
    assert_int_equal(c.n_replicas, 2);
    assert_string_equal(c.replicas[0].url, "http://127.0.0.1:9");
    assert_int_equal(c.replicas[0].role, TIDE_ROLE_PREFILL);
    assert_int_equal(c.replicas[1].role, TIDE_ROLE_MIXED);
    assert_int_equal(c.policy.mode, TIDE_PLACE_ROUND_ROBIN);
    assert_int_equal(c.policy.n_buckets, 3);
    assert_true(fabs(c.policy.shares[0] - 0.5) < 1e-12 && fabs(c.policy.shares[2] - 0.25) < 1e-12);
    assert_true(c.policy.w_running == 3 && c.policy.w_context == 0.5);
    assert_int_equal(c.policy.prefix_slots, 1024);
    assert_int_equal(c.disaggregate, 0);
    assert_int_equal(c.health_interval_ms, 50);
    assert_int_equal(c.fail_threshold, 3);
    assert_int_equal(c.retries, 5);
    cfg_bad("{\"replicas\": [{\"url\": \"http://h:1\", \"role\": \"chef\"}]}", "replicas[0]: \"role\"");
    cfg_bad("{\"replicas\": [{\"role\": \"decode\"}]}", "\"url\" (a string) is required");
    cfg_bad("{\"replicas\": [{\"url\": \"http://h\"}]}", "expected http://HOST:PORT");
    cfg_bad("{\"replicas\": [{\"url\": \"http://h:0\"}]}", "the port must be 1..65535");
    cfg_bad("{\"replicas\": [{\"url\": \"http://h:1/v1\"}]}", "the port must be");
    cfg_bad("{\"replicas\": [{\"url\": \"http://h:1\"}, {\"url\": \"http://h:1\"}]}", "listed twice");
    cfg_bad("{\"placement\": {\"bucket_edges\": [5, 5]}}", "\"bucket_edges\"[1]");
    cfg_bad("{\"placement\": {\"bucket_shares\": [1, 1]}}", "4 numbers");
    cfg_bad("{\"placement\": {\"bucket_shares\": [1, 0, 1, 1]}}", "\"bucket_shares\"[1]");
    cfg_bad("{\"placement\": {\"prefix_slots\": 1000}}", "power of two");
    cfg_bad("{\"placement\": {\"mode\": \"random\"}}", "\"mode\"");
    cfg_bad("{\"placement\": {\"weights\": {\"gpus\": 1}}}", "unknown field \"gpus\"");
    cfg_bad("{\"retries\": -1}", "out of range");
    cfg_bad("{\"disaggregate\": 1}", "true or false");
    cfg_bad("[]", "expected an object");
    cfg_bad("{\"a\": 1, \"a\": 2}", "line 1");
}

static tide_route_view view(tide_route_role role, int up, double prompt, double running, double ctx) {
    return (tide_route_view){.role = role, .up = up, .prompt_tokens = prompt, .running = running, .context_tokens = ctx};
}

static void test_buckets(void **state) {
    (void)state;
    tide_route_policy pol = tide_route_policy_default();
    pol.prefill_memory_s = 0;
    assert_int_equal(tide_route_bucket(&pol, 0), 0);
    assert_int_equal(tide_route_bucket(&pol, 16383), 0);
    assert_int_equal(tide_route_bucket(&pol, 16384), 1);
    assert_int_equal(tide_route_bucket(&pol, 65535), 1);
    assert_int_equal(tide_route_bucket(&pol, 65536), 2);
    assert_int_equal(tide_route_bucket(&pol, 262144), 3);
    assert_int_equal(tide_route_bucket(&pol, 1 << 30), 3);
    tide_route_placer p;
    tide_status st = {0};
    assert_int_equal(tide_route_placer_init(&p, &pol, &st), 0);
    /* 10 prefill replicas, shares .4 .3 .2 .1: groups [0,4) [4,7) [7,9) [9,10); decode ones interleaved */
    tide_route_view v[14];
    int pre[10], n = 0;
    for (int i = 0; i < 14; i++) {
        int dec = i % 3 == 2 && i < 12;
        v[i] = view(dec ? TIDE_ROLE_DECODE : TIDE_ROLE_PREFILL, 1, 0, 0, 0);
        if (!dec) pre[n++] = i;
    }
    assert_int_equal(n, 10);
    static const int64_t lens[4] = {100, 20000, 100000, 300000};
    static const int lo[4] = {0, 4, 7, 9}, hi[4] = {4, 7, 9, 10};
    for (int b = 0; b < 4; b++) {
        int seen[10] = {0};
        for (int k = 0; k < 40; k++) {
            int r = tide_route_place_prefill(&p, v, 14, TIDE_ROLE_PREFILL, 0, lens[b], NULL, NULL, 0, NULL);
            int pos = -1;
            for (int j = 0; j < 10; j++)
                if (pre[j] == r) pos = j;
            assert_true(pos >= lo[b] && pos < hi[b]);
            seen[pos] = 1;
        }
        for (int j = lo[b]; j < hi[b]; j++) assert_true(seen[j]); /* idle replicas take turns */
    }
    /* the long bucket's only replica down: the whole role takes its requests */
    v[pre[9]].up = 0;
    int r = tide_route_place_prefill(&p, v, 14, TIDE_ROLE_PREFILL, 0, 300000, NULL, NULL, 0, NULL);
    assert_true(r >= 0 && r != pre[9] && v[r].role == TIDE_ROLE_PREFILL);
    /* the short bucket overloaded next to the rest: it spills */
    for (int j = 0; j < 4; j++) v[pre[j]].prompt_tokens = 1e6;
    r = tide_route_place_prefill(&p, v, 14, TIDE_ROLE_PREFILL, 0, 100, NULL, NULL, 0, NULL);
    int pos = -1;
    for (int j = 0; j < 10; j++)
        if (pre[j] == r) pos = j;
    assert_true(pos >= 4);
    /* no replica of the role up */
    for (int i = 0; i < 14; i++) v[i].up = v[i].role != TIDE_ROLE_PREFILL;
    assert_int_equal(tide_route_place_prefill(&p, v, 14, TIDE_ROLE_PREFILL, 0, 100, NULL, NULL, 0, NULL), -1);
    assert_int_equal(tide_route_place_decode(&p, v, 14, TIDE_ROLE_MIXED), -1);
    tide_route_placer_free(&p);
}

/* Decode placement = argmin of the weighted load (distinct random loads),
 * checked against a plain loop on fresh random pools. */
static void test_decode_reference(void **state) {
    (void)state;
    uint64_t seed = tu_seed();
    tu_rng g = {seed};
    tide_route_policy pol = tide_route_policy_default();
    tide_route_placer p;
    tide_status st = {0};
    assert_int_equal(tide_route_placer_init(&p, &pol, &st), 0);
    for (int t = 0; t < 2000; t++) {
        int n = 1 + (int)(tu_next(&g) % 64);
        tide_route_view v[64];
        int want = -1;
        double best = 0;
        for (int i = 0; i < n; i++) {
            tide_route_role role = tu_next(&g) % 3 ? TIDE_ROLE_DECODE : TIDE_ROLE_PREFILL;
            v[i] = view(role, tu_next(&g) % 5 != 0, 0, (double)(tu_next(&g) % 50), tu_uniform(&g) * 1e6);
            double l = v[i].running * pol.w_running + v[i].context_tokens * pol.w_context;
            if (role == TIDE_ROLE_DECODE && v[i].up && (want < 0 || l < best)) want = i, best = l;
        }
        assert_int_equal(tide_route_place_decode(&p, v, n, TIDE_ROLE_DECODE), want);
    }
    tide_route_placer_free(&p);
}

/* Prefix affinity: a conversation's next turn goes back to the replica
 * that holds its prefix unless that replica's queue costs more than what
 * its cache saves; checked against the cost rule computed here. */
static void test_affinity(void **state) {
    (void)state;
    uint64_t seed = tu_seed();
    tu_rng g = {seed};
    tide_route_policy pol = tide_route_policy_default();
    pol.n_buckets = 1;
    pol.prefill_memory_s = 0;
    for (int t = 0; t < 500; t++) {
        tide_route_placer p;
        tide_status st = {0};
        assert_int_equal(tide_route_placer_init(&p, &pol, &st), 0);
        int n = 2 + (int)(tu_next(&g) % 8);
        tide_route_view v[16];
        for (int i = 0; i < n; i++) v[i] = view(TIDE_ROLE_PREFILL, 1, tu_uniform(&g) * 40000, 0, 0);
        uint64_t chain[12];
        int n_chain = 1 + (int)(tu_next(&g) % 12);
        uint64_t h = 0;
        for (int i = 0; i < n_chain; i++) {
            uint64_t x = tu_next(&g);
            chain[i] = h = tide_route_chain(h, &x, sizeof x);
        }
        int holder = (int)(tu_next(&g) % (uint64_t)n);
        int held = 1 + (int)(tu_next(&g) % (uint64_t)n_chain);
        tide_route_note(&p, holder, chain, held);
        int64_t prompt = 1000 + (int64_t)(tu_next(&g) % 60000), upto[12], u = 0;
        for (int i = 0; i < n_chain; i++) upto[i] = u += 1 + (int64_t)(tu_next(&g) % (uint64_t)(prompt / 6));
        int want = -1;
        double best = 0;
        for (int i = 0; i < n; i++) {
            double miss = (double)prompt - (i == holder ? (double)upto[held - 1] : 0);
            if (miss < 0) miss = 0;
            double c = pol.w_prompt * (v[i].prompt_tokens + miss);
            if (want < 0 || c < best) want = i, best = c;
        }
        int hit = -1;
        int got = tide_route_place_prefill(&p, v, n, TIDE_ROLE_PREFILL, 0, prompt, chain, upto, n_chain, &hit);
        assert_int_equal(got, want);
        assert_int_equal(hit, got == holder ? held : 0);
        /* the holder leaves: its prefixes are forgotten */
        tide_route_forget(&p, holder);
        got = tide_route_place_prefill(&p, v, n, TIDE_ROLE_PREFILL, 0, prompt, chain, upto, n_chain, &hit);
        assert_int_equal(hit, 0);
        tide_route_placer_free(&p);
    }
    /* round-robin ignores all of it */
    pol.mode = TIDE_PLACE_ROUND_ROBIN;
    tide_route_placer p;
    tide_status st = {0};
    assert_int_equal(tide_route_placer_init(&p, &pol, &st), 0);
    tide_route_view v[3] = {view(TIDE_ROLE_PREFILL, 1, 1e9, 0, 0), view(TIDE_ROLE_PREFILL, 1, 0, 0, 0),
                            view(TIDE_ROLE_PREFILL, 1, 0, 0, 0)};
    for (int k = 0; k < 9; k++)
        assert_int_equal(tide_route_place_prefill(&p, v, 3, TIDE_ROLE_PREFILL, 0, 5, NULL, NULL, 0, NULL), k % 3);
    tide_route_placer_free(&p);
}

static void test_request_chain(void **state) {
    (void)state;
    const char *t1 = "{\"model\": \"m\", \"stream\": true, \"messages\": [{\"role\": \"system\", \"content\": \"S\"},"
                     " {\"role\": \"user\", \"content\": \"hello\"}]}";
    const char *t2 = "{\"messages\": [{\"content\": \"S\", \"role\": \"system\"},"
                     " {\"role\": \"user\", \"content\": \"hello\"}, {\"role\": \"assistant\", \"content\": \"hi\"},"
                     " {\"role\": \"user\", \"content\": \"more\"}], \"max_tokens\": 5}";
    tide_route_req a, b;
    assert_int_equal(tide_route_req_read(TIDE_ROUTE_API_CHAT, t1, strlen(t1), &a), 0);
    assert_int_equal(tide_route_req_read(TIDE_ROUTE_API_CHAT, t2, strlen(t2), &b), 0);
    assert_int_equal(a.stream, 1);
    assert_int_equal(b.stream, 0);
    assert_int_equal(a.n_chain, 2); /* 2 messages; no preamble (system, tools): no unit for it */
    assert_int_equal(b.n_chain, 4);
    for (int i = 0; i < 2; i++) assert_true(a.chain[i] == b.chain[i]); /* key order does not matter */
    assert_true(a.upto[0] > 0 && a.upto[1] > a.upto[0] && a.upto[1] <= a.prompt_tokens);
    /* another system prompt: nothing shared */
    const char *t3 = "{\"messages\": [{\"role\": \"system\", \"content\": \"T\"}, {\"role\": \"user\", \"content\": \"hello\"}]}";
    tide_route_req c;
    assert_int_equal(tide_route_req_read(TIDE_ROUTE_API_CHAT, t3, strlen(t3), &c), 0);
    assert_true(c.chain[0] != a.chain[0] && c.chain[1] != a.chain[1]);
    /* a preamble is a unit of its own, first */
    const char *t4 = "{\"system\": \"S\", \"messages\": [{\"role\": \"user\", \"content\": \"hello\"}]}";
    assert_int_equal(tide_route_req_read(TIDE_ROUTE_API_MESSAGES, t4, strlen(t4), &c), 0);
    assert_int_equal(c.n_chain, 2);
    /* a Completions prompt of token ids: its count, 128-id units */
    char body[8192] = "{\"prompt\": [";
    for (int i = 0; i < 300; i++) snprintf(body + strlen(body), sizeof body - strlen(body), "%s%d", i ? "," : "", i);
    strcat(body, "]}");
    tide_route_req d;
    assert_int_equal(tide_route_req_read(TIDE_ROUTE_API_COMPLETIONS, body, strlen(body), &d), 0);
    assert_int_equal(d.prompt_tokens, 300);
    assert_int_equal(d.n_chain, 3);
    assert_true(d.upto[0] == 128 && d.upto[1] == 256 && d.upto[2] == 300);
    assert_int_equal(tide_route_req_read(TIDE_ROUTE_API_CHAT, "nope", 4, &d), -1);
    assert_int_equal(d.prompt_tokens, 1);
    /* the prefill leg's body: one token, not streamed */
    size_t n = 0;
    char *pb = tide_route_prefill_body(TIDE_ROUTE_API_CHAT, t1, strlen(t1), &n);
    assert_non_null(pb);
    assert_non_null(strstr(pb, "\"stream\":false"));
    assert_non_null(strstr(pb, "\"max_completion_tokens\":1"));
    free(pb);
    const char *rb = "{\"input\": \"x\", \"max_output_tokens\": 50}";
    pb = tide_route_prefill_body(TIDE_ROUTE_API_RESPONSES, rb, strlen(rb), &n);
    assert_non_null(pb);
    assert_non_null(strstr(pb, "\"max_output_tokens\":1"));
    free(pb);
    assert_null(tide_route_prefill_body(TIDE_ROUTE_API_MESSAGES, "[1]", 3, &n));
    assert_int_equal(tide_route_api_of_path("/v1/messages"), TIDE_ROUTE_API_MESSAGES);
    assert_int_equal(tide_route_api_of_path("/v1/models"), TIDE_ROUTE_API_NONE);
}

/* Which streams can be resumed, and what resumption reads of their events. */
static void test_resume_events(void **state) {
    (void)state;
    static const struct {
        tide_route_api api;
        const char *body;
        int resumable;
    } reqs[] = {
        {TIDE_ROUTE_API_CHAT, "{\"stream\": true, \"temperature\": 0, \"messages\": []}", 1},
        {TIDE_ROUTE_API_CHAT, "{\"stream\": true, \"temperature\": 0.0, \"n\": 1, \"messages\": []}", 1},
        {TIDE_ROUTE_API_MESSAGES, "{\"stream\": true, \"seed\": 7, \"temperature\": 1}", 1},
        {TIDE_ROUTE_API_COMPLETIONS, "{\"stream\": true, \"temperature\": 0, \"prompt\": \"x\"}", 1},
        {TIDE_ROUTE_API_CHAT, "{\"stream\": true, \"messages\": []}", 0},                    /* sampled */
        {TIDE_ROUTE_API_CHAT, "{\"stream\": true, \"temperature\": 0.5}", 0},
        {TIDE_ROUTE_API_CHAT, "{\"stream\": true, \"temperature\": 0, \"n\": 2}", 0},     /* two choices */
        {TIDE_ROUTE_API_CHAT, "{\"stream\": false, \"temperature\": 0}", 0},               /* not a stream */
        {TIDE_ROUTE_API_RESPONSES, "{\"stream\": true, \"temperature\": 0, \"input\": \"x\"}", 0},
        {TIDE_ROUTE_API_CHAT, "{\"stream\": true, \"seed\": \"7\"}", 0},                     /* not a seed */
    };
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        tide_route_req q;
        assert_int_equal(tide_route_req_read(reqs[i].api, reqs[i].body, strlen(reqs[i].body), &q), 0);
        if (q.resumable != reqs[i].resumable) fail_msg("%s: resumable %d", reqs[i].body, q.resumable);
    }
    static const struct {
        tide_route_api api;
        const char *data;
        int want;
        const char *text;
    } ev[] = {
        {TIDE_ROUTE_API_CHAT, "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}", 1, NULL},
        {TIDE_ROUTE_API_CHAT, "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}", 1, "Hel"},
        {TIDE_ROUTE_API_CHAT, "{\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"},\"finish_reason\":null}]}", 1, "hm"},
        {TIDE_ROUTE_API_CHAT, "{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}", 0, NULL},
        {TIDE_ROUTE_API_CHAT, "{\"choices\":[],\"usage\":{\"completion_tokens\":3}}", 0, NULL},
        {TIDE_ROUTE_API_CHAT, "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0}]},\"finish_reason\":null}]}", 0, NULL},
        {TIDE_ROUTE_API_CHAT, "[DONE]", 0, NULL},
        {TIDE_ROUTE_API_CHAT, "{\"error\":{\"message\":\"x\"}}", 0, NULL},
        {TIDE_ROUTE_API_CHAT, "{nope", -1, NULL},
        {TIDE_ROUTE_API_COMPLETIONS, "{\"choices\":[{\"text\":\" a\",\"index\":0,\"finish_reason\":null}]}", 1, " a"},
        {TIDE_ROUTE_API_COMPLETIONS, "{\"choices\":[{\"text\":\"\",\"index\":0,\"finish_reason\":\"length\"}]}", 0, NULL},
        {TIDE_ROUTE_API_MESSAGES, "{\"type\":\"message_start\",\"message\":{}}", 1, NULL},
        {TIDE_ROUTE_API_MESSAGES, "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}", 1, NULL},
        {TIDE_ROUTE_API_MESSAGES, "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}", 1, "Hi"},
        {TIDE_ROUTE_API_MESSAGES, "{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\"}}", 0, NULL},
        {TIDE_ROUTE_API_MESSAGES, "{\"type\":\"content_block_stop\",\"index\":0}", 0, NULL},
        {TIDE_ROUTE_API_MESSAGES, "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}", 0, NULL},
    };
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++) {
        char *text = (char *)1;
        int k = tide_route_event_text(ev[i].api, ev[i].data, strlen(ev[i].data), &text);
        if (k != ev[i].want) fail_msg("%s: %d, want %d", ev[i].data, k, ev[i].want);
        if (ev[i].text) assert_string_equal(text, ev[i].text);
        else assert_null(text);
        free(text);
    }
}

static void trace_bad(const char *text, const char *want) {
    tide_trace t;
    tide_status st = {0};
    assert_int_equal(tide_trace_parse(text, strlen(text), "tr", &t, &st), -1);
    if (!strstr(st.msg, want)) fprintf(stderr, "message '%s' lacks '%s'\n", st.msg, want);
    assert_non_null(strstr(st.msg, want));
}

static void test_traces(void **state) {
    (void)state;
    const char *mc = "{\"timestamp\": 1500, \"input_length\": 1100, \"output_length\": 7, \"hash_ids\": [0, 1, 2]}\n"
                     "\n{\"timestamp\": 500, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [0, 1]}\r\n"
                     "{\"timestamp\": 1500, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [5]}";
    tide_trace t;
    tide_status st = {0};
    assert_int_equal(tide_trace_parse(mc, strlen(mc), "tr", &t, &st), 0);
    assert_string_equal(t.format, "mooncake");
    assert_int_equal(t.n, 3);
    assert_int_equal(t.block_tokens, 512);
    assert_true(t.reqs[0].t == 0 && fabs(t.reqs[1].t - 1.0) < 1e-12 && fabs(t.reqs[2].t - 1.0) < 1e-12);
    assert_int_equal(t.reqs[0].in_len, 600);
    assert_int_equal(t.reqs[1].in_len, 1100); /* equal times keep the file's order */
    assert_int_equal(t.reqs[1].n_hash, 3);
    /* chained: the same ids give the same chain, a later id covers the ones before */
    assert_true(t.hashes[t.reqs[0].hash_off] == t.hashes[t.reqs[1].hash_off]);
    assert_true(t.hashes[t.reqs[0].hash_off + 1] == t.hashes[t.reqs[1].hash_off + 1]);
    assert_true(t.hashes[t.reqs[2].hash_off] != t.hashes[t.reqs[0].hash_off]);
    tide_trace_free(&t);
    const char *az = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900,4808,10\n"
                     "2023-11-16 18:15:50.1805900,100,2\r\n"
                     "2023-11-17 00:00:00,1,1\n";
    assert_int_equal(tide_trace_parse(az, strlen(az), "az", &t, &st), 0);
    assert_string_equal(t.format, "azure");
    assert_int_equal(t.n, 3);
    assert_true(fabs(t.reqs[1].t - 3.5) < 1e-6);
    assert_true(fabs(t.reqs[2].t - (5 * 3600 + 44 * 60 + 13.31941)) < 1e-4);
    assert_int_equal(t.reqs[0].in_len, 4808);
    assert_int_equal(t.reqs[2].n_hash, 0);
    tide_trace_free(&t);
    trace_bad("", "no requests");
    trace_bad("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no requests");
    trace_bad("time,a,b\n", "line 1");
    trace_bad("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n{\"timestamp\": 0}", "line 2");
    trace_bad("{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 1}", "\"timestamp\"");
    trace_bad("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1, \"x\"]}", "\"hash_ids\"[1]");
    trace_bad("{\"timestamp\": 0, \"input_length\": 1.5, \"output_length\": 1}", "\"input_length\"");
    trace_bad("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1} x", "line 1");
    trace_bad("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10\n", "line 2");
    trace_bad("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-16 25:15:46,10,1\n", "TIMESTAMP");
    trace_bad("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-16 20:15:46.,10,1\n", "TIMESTAMP");
    trace_bad("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-16 20:15:46,-10,1\n", "ContextTokens");
    trace_bad("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-16 20:15:46,10,1x\n", "GeneratedTokens");
}

/* The committed traces through the simulation: the figures docs/route.md
 * quotes hold (prefix-aware above round-robin), and a tiny trace whose
 * outcome is known exactly. */
static void test_sim(void **state) {
    (void)state;
    tide_trace t;
    tide_status st = {0};
    assert_int_equal(tide_trace_load(TIDE_SOURCE_DIR "/tests/data/route/mooncake_synth.jsonl", &t, &st), 0);
    assert_int_equal(t.n, 550);
    tide_sim_config c = tide_sim_config_default();
    tide_sim_result aware, rr;
    assert_int_equal(tide_sim_run(&t, &c, &aware, &st), 0);
    c.policy.mode = TIDE_PLACE_ROUND_ROBIN;
    assert_int_equal(tide_sim_run(&t, &c, &rr, &st), 0);
    double ha = (double)aware.hit_tokens / (double)aware.prompt_tokens, hr = (double)rr.hit_tokens / (double)rr.prompt_tokens;
    printf("hit rate: aware %.3f, round-robin %.3f; TTFT p90 %.3f vs %.3f s\n", ha, hr, aware.ttft[1], rr.ttft[1]);
    assert_true(ha > hr + 0.1);
    assert_true(aware.ttft[1] < rr.ttft[1]);
    assert_true(aware.bal_decode / aware.ideal_decode > rr.bal_decode / rr.ideal_decode);
    assert_true(aware.ideal_prefill <= 1.0 + 1e-12 && aware.bal_prefill > 0);
    /* no assignment beats the bound: neither ours nor LPT */
    assert_true(aware.ideal_prefill <= aware.bound_prefill + 1e-12 && aware.bal_prefill <= aware.bound_prefill + 1e-12);
    assert_true(aware.ideal_decode <= aware.bound_decode + 1e-12 && aware.bal_decode <= aware.bound_decode + 1e-12);
    tide_trace_free(&t);
    /* two turns of one conversation on 2 + 1 replicas: the second is placed where the first was and hits 2 blocks */
    const char *mc = "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 2, \"hash_ids\": [1, 2]}\n"
                     "{\"timestamp\": 10000, \"input_length\": 1600, \"output_length\": 2, \"hash_ids\": [1, 2, 3, 4]}\n";
    assert_int_equal(tide_trace_parse(mc, strlen(mc), "mc", &t, &st), 0);
    c = tide_sim_config_default();
    c.n_prefill = 2;
    c.n_decode = 1;
    c.policy.n_buckets = 1;
    c.policy.prefill_memory_s = 0; /* (with it, the first turn's 1024 tokens would send the second elsewhere) */
    assert_int_equal(tide_sim_run(&t, &c, &aware, &st), 0);
    assert_int_equal(aware.hit_tokens, 1024);
    assert_int_equal(aware.prompt_tokens, 2624);
    /* the cost model by hand: 5 ms + uncached tokens at 20K/s, then one decode step */
    double s1 = c.decode_step_s + c.decode_s_per_seq + c.decode_s_per_ctx_token * 1024;
    double s2 = c.decode_step_s + c.decode_s_per_seq + c.decode_s_per_ctx_token * 1600;
    double t1 = 0.005 + 1024 / 20000.0 + s1, t2 = 0.005 + 576 / 20000.0 + s2;
    assert_true(fabs(aware.ttft[0] - (t1 + t2) / 2) < 1e-9); /* p50 of two: their mean */
    assert_true(fabs(aware.tpot[0] - (s1 + s2) / 2) < 1e-12);
    tide_trace_free(&t);
    /* bad pools */
    c.n_decode = 0;
    assert_int_equal(tide_trace_parse(mc, strlen(mc), "mc", &t, &st), 0);
    assert_int_equal(tide_sim_run(&t, &c, &aware, &st), -1);
    assert_non_null(strstr(st.msg, "decode"));
    tide_trace_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),  cmocka_unit_test(test_buckets),       cmocka_unit_test(test_decode_reference),
        cmocka_unit_test(test_affinity), cmocka_unit_test(test_request_chain), cmocka_unit_test(test_traces),
        cmocka_unit_test(test_sim),     cmocka_unit_test(test_resume_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
