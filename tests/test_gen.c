/* The generation layer (api/gen.h): text through the engine on the tiny
 * synthetic checkpoint with the stand-in tokenizer.
 *
 * Two kinds of test. Through the engine: the model's tokens are random, so
 * the assertions are properties (the streamed text equals the detokenized
 * ids, n > 1 and seeds, cancellation frees the KV pool, the engine thread),
 * and logit_bias +100 forces a token where a fixed output is needed (stop
 * strings across tokens, stop ids, EOS). Scripted: the engine's events for
 * a chosen token sequence are handed to a session directly (its event
 * callback), which tests detokenizing and parsing (held-back UTF-8, tool
 * calls, the thinking split, stop strings) on exact outputs. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/gen_session.h"
#include "engine/engine.h"
#include "test_ops_util.h"
#include "text/prompt_tok.h"
#include "text/render.h"
#include "text/sbuf.h"

typedef tn_model_fixture fixture;

/* One generation engine for the tests that do not need their own (loading
 * costs more than most tests). */
typedef struct {
    fixture *f;
    tide_gen_engine *g;
} suite;

static tide_gen_engine *make_gen(const fixture *f);

static int setup(void **state) {
    suite *s = calloc(1, sizeof *s);
    void *fs = NULL;
    if (!s) return -1;
    *state = s;
    int rc = tn_model_setup(&fs, "gen", 1, 0);
    s->f = fs;
    if (rc == 0 && s->f && !s->f->skip) s->g = make_gen(s->f);
    return rc;
}

static int teardown(void **state) {
    suite *s = *state;
    if (!s) return 0;
    tide_gen_destroy(s->g);
    void *fs = s->f;
    tn_model_teardown(&fs);
    free(s);
    return 0;
}

/* The start of a test on the shared engine: f and g, or a skip. */
#define GEN_TEST(state, fv, gv)                \
    suite *su_ = *(state);                     \
    fixture *fv = su_->f;                      \
    SKIP_IF_NO_TOKENIZER(fv);                  \
    tide_gen_engine *gv = su_->g

#define SKIP_IF_NO_TOKENIZER(f) \
    do {                        \
        if ((f)->skip) {        \
            skip();             \
            return;             \
        }                       \
    } while (0)

static tide_gen_engine *make_gen(const fixture *f) {
    tide_engine_config c = tide_engine_config_default();
    c.model_dir = f->dir;
    c.n_threads = 2;
    c.seed = f->seed;
    tide_gen_engine *g = NULL;
    tide_status st = {0};
    if (tide_gen_create(&c, NULL, &g, &st) != 0) fail_msg("tide_gen_create: %s", st.msg);
    return g;
}

/* ---- what a session hands out ---- */

typedef struct rec {
    tide_sb content, reasoning, sse, args;
    char call_name[64];
    int n_calls, n_call_ends, bad_utf8, done, cancelled, n_tokens;
    size_t text_at_token[256]; /* content + reasoning bytes released after token i */
    int32_t ids[4096];
    float lp[256], top_lp[256][4]; /* the sink's logprobs of token i and its best alternatives */
    int n_top[256];
    int64_t n_output;
    tide_usage usage;
    char finish[32];
    char *error, *response, *result_content;
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
} rec;

static void rec_init(rec *r) {
    memset(r, 0, sizeof *r);
    tide_sb_init(&r->content);
    tide_sb_init(&r->reasoning);
    tide_sb_init(&r->sse);
    tide_sb_init(&r->args);
}

static void rec_free(rec *r) {
    tide_sb_free(&r->content);
    tide_sb_free(&r->reasoning);
    tide_sb_free(&r->sse);
    tide_sb_free(&r->args);
    free(r->error);
    free(r->response);
    free(r->result_content);
}

static const char *sbs(const tide_sb *b) { return b->s ? b->s : ""; }

static int on_text(void *ud, const tide_pev *ev, tide_status *st) {
    rec *r = ud;
    (void)st;
    if ((ev->kind == TIDE_PEV_CONTENT || ev->kind == TIDE_PEV_REASONING) &&
        tide_utf8_valid_prefix(ev->text, ev->len) != ev->len)
        r->bad_utf8++;
    if (ev->kind == TIDE_PEV_CONTENT) tide_sb_addn(&r->content, ev->text, ev->len);
    if (ev->kind == TIDE_PEV_REASONING) tide_sb_addn(&r->reasoning, ev->text, ev->len);
    if (ev->kind == TIDE_PEV_CALL_BEGIN) {
        r->n_calls++;
        snprintf(r->call_name, sizeof r->call_name, "%s", ev->name);
    }
    if (ev->kind == TIDE_PEV_CALL_ARGS) tide_sb_addn(&r->args, ev->text, ev->len);
    if (ev->kind == TIDE_PEV_CALL_END) r->n_call_ends++;
    return 0;
}

static void on_token(void *ud, int choice, const tide_gen_token *t) {
    rec *r = ud;
    if (choice != 0) return;
    if (r->n_tokens < 256) r->text_at_token[r->n_tokens] = r->content.len + r->reasoning.len;
    if (r->n_tokens < 4096) r->ids[r->n_tokens] = t->id;
    if (r->n_tokens < 256) {
        r->lp[r->n_tokens] = t->logprob;
        r->n_top[r->n_tokens] = t->n_top < 4 ? t->n_top : 4;
        for (int k = 0; k < r->n_top[r->n_tokens]; k++) r->top_lp[r->n_tokens][k] = t->top_logprobs[k];
    }
    r->n_tokens++;
}

static int on_sse(void *ud, const char *event, const char *data, size_t len, tide_status *st) {
    rec *r = ud;
    (void)st;
    tide_sb_add(&r->sse, event ? event : "-");
    tide_sb_add(&r->sse, "\n");
    tide_sb_addn(&r->sse, data, len);
    tide_sb_add(&r->sse, "\n");
    return 0;
}

static void on_done(void *ud, const tide_gen_result *res) {
    rec *r = ud;
    if (r->mu) pthread_mutex_lock(r->mu);
    r->done++;
    r->cancelled = res->cancelled;
    snprintf(r->finish, sizeof r->finish, "%s", res->finish_reason);
    r->n_output = res->n_output;
    for (int64_t i = 0; i < res->n_output && i < 4096; i++) r->ids[i] = res->output[i];
    r->usage = res->usage;
    if (res->error) r->error = strdup(res->error);
    if (res->response) r->response = strndup(res->response, res->response_len);
    r->result_content = strndup(res->content, res->content_len);
    if (r->cv) pthread_cond_broadcast(r->cv);
    if (r->mu) pthread_mutex_unlock(r->mu);
}

static tide_gen_input input(const tide_api_req *req, rec *r) {
    tide_gen_input in = {.req = req, .response_id = "test", .created = 1,
                         .sink = {.sse = on_sse, .text = on_text, .token = on_token, .done = on_done, .ud = r}};
    return in;
}

static void chat_req(tide_api_req *req, const char *user) {
    tide_status st = {0};
    tide_api_req_init(req, TIDE_API_CHAT);
    assert_int_equal(tide_conv_add(&req->conv, TIDE_ROLE_USER, user, strlen(user), &st), 0);
    req->gen.max_tokens = 8;
    req->gen.temperature = 0;
}

static void raw_req(tide_api_req *req, const char *prompt) {
    tide_api_req_init(req, TIDE_API_COMPLETIONS);
    req->prompt = strdup(prompt);
    req->prompt_len = strlen(prompt);
    req->gen.max_tokens = 8;
    req->gen.temperature = 0;
}

static void run_one(tide_gen_engine *g, const tide_api_req *req, rec *r) {
    tide_status st = {0};
    tide_gen_input in = input(req, r);
    if (tide_gen_submit(g, &in, NULL, &st) != 0) fail_msg("submit: %s", st.msg);
    if (tide_gen_run(g, &st) != 0) fail_msg("run: %s", st.msg);
    assert_int_equal(r->done, 1);
}

/* No KV block is held by a request any more (cached prefix pages aside),
 * and the pool's reference counts are consistent. */
static void assert_kv_idle(tide_gen_engine *g) {
    tide_status st = {0};
    tide_engine_stats s;
    tide_engine_get_stats(g->e, &s);
    assert_int_equal(s.n_running + s.n_waiting, 0);
    assert_int_equal(s.kv_blocks_used - s.kv_blocks_cached, 0);
    if (tide_engine_check(g->e, &st) != 0) fail_msg("tide_engine_check: %s", st.msg);
}

/* A token whose bytes are exactly s (the stand-in's byte-level vocabulary
 * has every byte and many short words), or -1. */
static int32_t token_of_bytes(const tide_tokenizer *tok, const char *s, size_t n) {
    for (uint32_t id = 0; id < tide_tokenizer_n_ids(tok); id++) {
        const uint8_t *b;
        size_t len;
        if (tide_tokenizer_is_added(tok, (int32_t)id)) continue;
        if (tide_tokenizer_token_bytes(tok, (int32_t)id, &b, &len) && len == n && memcmp(b, s, n) == 0)
            return (int32_t)id;
    }
    return -1;
}

/* ---- scripted: the engine's events for chosen tokens ---- */

/* Feeds ids to a new session for req as the engine would (TOKEN events,
 * then FINISHED with `reason`); the session ends (done) inside. */
static void script(tide_gen_engine *g, const tide_api_req *req, rec *r, const int32_t *ids, size_t n,
                   tide_finish_reason reason) {
    tide_status st = {0};
    gen_session *s;
    tide_gen_input in = input(req, r);
    if (tide_gen_session_new(g, &in, &s, &st) != 0) fail_msg("session: %s", st.msg);
    s->ch[0].rid = 1 << 30; /* an id the engine does not know: releasing it is a no-op */
    tide_event ev = {.id = s->ch[0].rid, .user = &s->ch[0], .output = ids, .n_prompt = s->n_prompt};
    for (size_t i = 0; i < n && !s->ch[0].ended; i++) {
        ev.kind = TIDE_EVENT_TOKEN;
        ev.token = ids[i];
        ev.n_output = (int64_t)i + 1;
        tide_gen_on_event(g, &ev);
    }
    ev.kind = TIDE_EVENT_FINISHED;
    ev.reason = s->ch[0].ended ? TIDE_FINISH_CANCELLED : reason;
    tide_gen_on_event(g, &ev); /* frees s */
    assert_int_equal(r->done, 1);
}

static size_t encode(tide_gen_engine *g, const char *text, int32_t *ids, size_t cap) {
    tide_tok_ids v = {0};
    tide_status st = {0};
    if (tide_tokenizer_encode(g->tok, text, strlen(text), 0, NULL, &v, &st) != 0) fail_msg("encode: %s", st.msg);
    assert_true(v.n <= cap);
    memcpy(ids, v.ids, v.n * sizeof *ids);
    size_t n = v.n;
    tide_tok_ids_free(&v);
    return n;
}

static void test_utf8_held_back(void **state) {
    GEN_TEST(state, f, g);
    /* "你" is E4 BD A0: three byte tokens, then "a" */
    int32_t ids[5] = {token_of_bytes(g->tok, "\xe4", 1), token_of_bytes(g->tok, "\xbd", 1),
                      token_of_bytes(g->tok, "\xa0", 1), token_of_bytes(g->tok, "a", 1),
                      token_of_bytes(g->tok, "\xe4", 1)};
    for (int i = 0; i < 5; i++) assert_true(ids[i] >= 0);
    tide_api_req req;
    raw_req(&req, "x");
    rec r;
    rec_init(&r);
    script(g, &req, &r, ids, 5, TIDE_FINISH_LENGTH);
    assert_int_equal(r.text_at_token[1], 0); /* after E4: nothing */
    assert_int_equal(r.text_at_token[2], 0); /* after E4 BD: nothing */
    assert_int_equal(r.text_at_token[3], 3); /* 你 */
    assert_int_equal(r.text_at_token[4], 4); /* 你a; the last E4 is held */
    assert_string_equal(sbs(&r.content), "\xe4\xbd\xa0" "a\xef\xbf\xbd"); /* ... and becomes U+FFFD at the end */
    assert_string_equal(r.result_content, sbs(&r.content));
    assert_int_equal(r.bad_utf8, 0);
    assert_string_equal(r.finish, "length");
    rec_free(&r);
    tide_api_req_free(&req);
}

static void test_stop_string_across_tokens(void **state) {
    GEN_TEST(state, f, g);
    int32_t ids[64];
    size_t n = encode(g, "hello world, this is more text", ids, 64);
    tide_api_req req;
    chat_req(&req, "hi");
    req.gen.stop[req.gen.n_stop++] = strdup("o w"); /* spans "hello" | " world" */
    rec r;
    rec_init(&r);
    script(g, &req, &r, ids, n, TIDE_FINISH_LENGTH);
    assert_string_equal(sbs(&r.content), "hell");
    assert_string_equal(r.finish, "stop");
    assert_true(r.n_tokens < (int)n); /* the session stopped feeding once the output ended */
    json_t *resp = json_loads(r.response, 0, NULL);
    assert_non_null(resp);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_array_get(json_object_get(resp, "choices"), 0), "message"), "content")),
                        "hell");
    json_decref(resp);
    rec_free(&r);
    tide_api_req_free(&req);
}

#define DSML "\xef\xbd\x9c" "DSML\xef\xbd\x9c"

static void test_tool_call_events(void **state) {
    GEN_TEST(state, f, g);
    int32_t ids[256];
    size_t n = encode(g,
                      "Let me check.\n\n<" DSML " calls>\n<" DSML " invoke name=\"get_weather\">\n<" DSML
                      " parameter name=\"city\" string=\"true\">Paris \"Nord\"</" DSML " parameter>\n</" DSML
                      " invoke>\n</" DSML " calls>",
                      ids, 250);
    ids[n++] = 1; /* EOS, a stop id: not output as text */
    tide_api_req req;
    chat_req(&req, "weather?");
    req.gen.stream = 1;
    tide_status st = {0};
    assert_int_equal(tide_conv_add_tool(&req.conv, "get_weather", "the weather", NULL, &st), 0);
    rec r;
    rec_init(&r);
    script(g, &req, &r, ids, n, TIDE_FINISH_STOP);
    assert_string_equal(sbs(&r.content), "Let me check.");
    assert_int_equal(r.n_calls, 1);
    assert_int_equal(r.n_call_ends, 1);
    assert_string_equal(r.call_name, "get_weather");
    json_t *args = json_loads(sbs(&r.args), 0, NULL);
    assert_non_null(args);
    assert_string_equal(json_string_value(json_object_get(args, "city")), "Paris \"Nord\"");
    json_decref(args);
    assert_string_equal(r.finish, "tool_calls");
    /* the stream: proper tool-call deltas, never the markup */
    assert_null(strstr(sbs(&r.sse), "DSML"));
    assert_non_null(strstr(sbs(&r.sse), "\"tool_calls\""));
    assert_non_null(strstr(sbs(&r.sse), "\"finish_reason\":\"tool_calls\""));
    assert_non_null(strstr(sbs(&r.sse), "[DONE]"));
    assert_null(r.response); /* streaming: no body */
    rec_free(&r);
    tide_api_req_free(&req);
}

static void test_thinking_split(void **state) {
    GEN_TEST(state, f, g);
    int32_t ids[64];
    size_t n = encode(g, "Two and two.</think>Four.", ids, 64);
    tide_api_req req;
    chat_req(&req, "2+2?");
    req.conv.thinking = 1;
    rec r;
    rec_init(&r);
    script(g, &req, &r, ids, n, TIDE_FINISH_LENGTH);
    assert_string_equal(sbs(&r.reasoning), "Two and two.");
    assert_string_equal(sbs(&r.content), "Four.");
    assert_true(r.usage.reasoning_tokens > 0 && r.usage.reasoning_tokens < (int64_t)n);
    json_t *resp = json_loads(r.response, 0, NULL);
    json_t *msg = json_object_get(json_array_get(json_object_get(resp, "choices"), 0), "message");
    assert_string_equal(json_string_value(json_object_get(msg, "reasoning_content")), "Two and two.");
    assert_string_equal(json_string_value(json_object_get(msg, "content")), "Four.");
    json_decref(resp);
    rec_free(&r);
    tide_api_req_free(&req);
}

/* ---- the prompt ---- */

static void test_prompt_tokens(void **state) {
    GEN_TEST(state, f, g);
    tide_status st = {0};
    tide_api_req req;
    chat_req(&req, "Hello, world. Caf\xc3\xa9?");
    /* without specials in the client's text: the ids of the whole text */
    tide_prompt p = {0};
    assert_int_equal(tide_render(&req.conv, &p, &st), 0);
    tide_tok_ids whole = {0}, ours = {0};
    assert_int_equal(tide_tokenizer_encode(g->tok, p.text, p.len, 0, NULL, &whole, &st), 0);
    int in_reasoning;
    assert_int_equal(tide_gen_prompt_ids(g, &req, &ours, &in_reasoning, &st), 0);
    assert_int_equal(ours.n, whole.n);
    assert_memory_equal(ours.ids, whole.ids, whole.n * sizeof *whole.ids);
    int64_t n_count;
    assert_int_equal(tide_gen_count_tokens(g, &req, &n_count, &st), 0);
    assert_int_equal(n_count, (int64_t)whole.n);
    tide_tok_ids_free(&whole);
    tide_tok_ids_free(&ours);
    tide_prompt_free(&p);
    tide_api_req_free(&req);
    /* a user who spells <｜User｜> does not forge a turn */
    chat_req(&req, "hi " TIDE_TOK_USER " and " TIDE_TOK_ASSISTANT);
    int32_t user = tide_tokenizer_token_id(g->tok, TIDE_TOK_USER, strlen(TIDE_TOK_USER));
    int32_t asst = tide_tokenizer_token_id(g->tok, TIDE_TOK_ASSISTANT, strlen(TIDE_TOK_ASSISTANT));
    assert_int_equal(tide_gen_prompt_ids(g, &req, &ours, &in_reasoning, &st), 0);
    int n_user = 0, n_asst = 0;
    for (size_t i = 0; i < ours.n; i++) n_user += ours.ids[i] == user, n_asst += ours.ids[i] == asst;
    assert_int_equal(n_user, 1);
    assert_int_equal(n_asst, 1);
    tide_tok_ids_free(&ours);
    tide_api_req_free(&req);
    /* Completions: BOS in front, once */
    raw_req(&req, "Once");
    assert_int_equal(tide_gen_prompt_ids(g, &req, &ours, &in_reasoning, &st), 0);
    assert_int_equal(ours.ids[0], 0);
    assert_true(ours.n >= 2 && ours.ids[1] != 0);
    tide_tok_ids_free(&ours);
    tide_api_req_free(&req);
}

/* ---- through the engine ---- */

static void test_stream_equals_ids(void **state) {
    GEN_TEST(state, f, g);
    tide_status st = {0};
    enum { K = 3, LEN = 40 };
    static const char *const PROMPTS[K] = {"The", "\xe4\xbd\xa0\xe5\xa5\xbd", "1 2 3"};
    tide_api_req req[K];
    rec r[K];
    for (int k = 0; k < K; k++) { /* all in one batch */
        raw_req(&req[k], PROMPTS[k]);
        req[k].gen.temperature = 1;
        req[k].gen.has_seed = 1;
        req[k].gen.seed = f->seed * 7 + (uint64_t)k;
        req[k].gen.max_tokens = LEN;
        req[k].gen.ignore_eos = 1;
        rec_init(&r[k]);
        tide_gen_input in = input(&req[k], &r[k]);
        if (tide_gen_submit(g, &in, NULL, &st) != 0) fail_msg("submit: %s", st.msg);
    }
    assert_int_equal(tide_gen_run(g, &st), 0);
    for (int k = 0; k < K; k++) {
        assert_int_equal(r[k].done, 1);
        assert_int_equal(r[k].n_output, LEN);
        assert_string_equal(r[k].finish, "length");
        char *text;
        size_t len;
        assert_int_equal(tide_detok_decode_all(g->tok, 0, r[k].ids, (size_t)r[k].n_output, &text, &len, &st), 0);
        assert_int_equal(r[k].content.len, len);
        assert_memory_equal(sbs(&r[k].content), text, len);
        assert_int_equal(r[k].bad_utf8, 0);
        assert_int_equal(r[k].usage.completion_tokens, LEN);
        free(text);
        rec_free(&r[k]);
        tide_api_req_free(&req[k]);
    }
    assert_kv_idle(g);
}

/* logit_bias +100 on one token: the output is that token, repeated. */
static void force(tide_api_req *req, int32_t id) {
    req->gen.logit_bias = calloc(1, sizeof *req->gen.logit_bias);
    req->gen.logit_bias[0] = (tide_logit_bias){id, 100};
    req->gen.n_logit_bias = 1;
}

static void test_forced_stops(void **state) {
    GEN_TEST(state, f, g);
    int32_t ab = token_of_bytes(g->tok, "ab", 2);
    assert_true(ab >= 0);
    /* a stop string across two forced tokens: "ab" "ab" -> "a" */
    tide_api_req req;
    chat_req(&req, "x");
    force(&req, ab);
    req.gen.max_tokens = 50;
    req.gen.stop[req.gen.n_stop++] = strdup("ba");
    rec r;
    rec_init(&r);
    run_one(g, &req, &r);
    assert_string_equal(r.result_content, "a");
    assert_string_equal(r.finish, "stop");
    assert_int_equal(r.n_output, 2); /* the engine request stopped right after */
    assert_kv_idle(g);
    rec_free(&r);
    tide_api_req_free(&req);
    /* a stop id: the request ends, its text is not output */
    chat_req(&req, "x");
    force(&req, ab);
    req.gen.stop_token_ids = calloc(1, sizeof(int32_t));
    req.gen.stop_token_ids[0] = ab;
    req.gen.n_stop_token_ids = 1;
    rec_init(&r);
    run_one(g, &req, &r);
    assert_int_equal(r.n_output, 1);
    assert_int_equal(r.ids[0], ab);
    assert_string_equal(r.result_content, "");
    assert_string_equal(r.finish, "stop");
    rec_free(&r);
    tide_api_req_free(&req);
    /* the model's end id, from tide_gen_stop_ids; ignore_eos runs on */
    size_t n_stop;
    const int32_t *stop = tide_gen_stop_ids(g, &n_stop);
    assert_true(n_stop >= 1);
    for (int ignore = 0; ignore < 2; ignore++) {
        raw_req(&req, "x");
        force(&req, stop[0]);
        req.gen.ignore_eos = ignore;
        req.gen.max_tokens = 5;
        rec_init(&r);
        run_one(g, &req, &r);
        assert_int_equal(r.n_output, ignore ? 5 : 1);
        assert_string_equal(r.finish, ignore ? "length" : "stop"); /* an end id is never text */
        assert_string_equal(r.result_content, "");
        rec_free(&r);
        tide_api_req_free(&req);
    }
    assert_kv_idle(g);
}

static json_t *choices_of(const char *response) {
    json_t *resp = json_loads(response, 0, NULL);
    assert_non_null(resp);
    json_t *c = json_incref(json_object_get(resp, "choices"));
    json_decref(resp);
    return c;
}

static void test_n_and_seeds(void **state) {
    GEN_TEST(state, f, g);
    uint64_t seed = f->seed * 13 + 1;
    char *first = NULL;
    for (int rep = 0; rep < 2; rep++) {
        tide_api_req req;
        chat_req(&req, "Tell me");
        req.gen.n = 3;
        req.gen.temperature = 1;
        req.gen.has_seed = 1;
        req.gen.seed = seed;
        req.gen.max_tokens = 10;
        req.gen.ignore_eos = 1;
        rec r;
        rec_init(&r);
        run_one(g, &req, &r);
        json_t *ch = choices_of(r.response);
        assert_int_equal(json_array_size(ch), 3);
        for (int i = 0; i < 3; i++)
            assert_int_equal(json_integer_value(json_object_get(json_array_get(ch, (size_t)i), "index")), i);
        assert_int_equal(r.usage.completion_tokens, 30);
        char *s = json_dumps(ch, JSON_COMPACT);
        if (rep == 0) first = s;
        else assert_string_equal(s, first); /* same seed, same choices */
        if (rep == 1) {
            /* choice i is the request with seed + i alone (the three in one batch) */
            tide_api_req one[3];
            rec r1[3];
            for (int i = 0; i < 3; i++) {
                chat_req(&one[i], "Tell me");
                one[i].gen.temperature = 1;
                one[i].gen.has_seed = 1;
                one[i].gen.seed = seed + (uint64_t)i;
                one[i].gen.max_tokens = 10;
                one[i].gen.ignore_eos = 1;
                rec_init(&r1[i]);
                tide_gen_input in = input(&one[i], &r1[i]);
                tide_status st = {0};
                if (tide_gen_submit(g, &in, NULL, &st) != 0) fail_msg("submit: %s", st.msg);
            }
            tide_status st = {0};
            assert_int_equal(tide_gen_run(g, &st), 0);
            for (int i = 0; i < 3; i++) {
                json_t *c1 = choices_of(r1[i].response);
                json_t *a = json_object_get(json_array_get(c1, 0), "message");
                json_t *b = json_object_get(json_array_get(ch, (size_t)i), "message");
                assert_true(json_equal(a, b));
                json_decref(c1);
                rec_free(&r1[i]);
                tide_api_req_free(&one[i]);
            }
            free(s);
        }
        json_decref(ch);
        rec_free(&r);
        tide_api_req_free(&req);
    }
    free(first);
    assert_kv_idle(g);
}

static void test_stream_sse(void **state) {
    GEN_TEST(state, f, g);
    tide_api_req req;
    chat_req(&req, "Stream it");
    req.gen.stream = 1;
    req.gen.include_usage = 1;
    req.gen.n = 2;
    req.gen.max_tokens = 12;
    req.gen.ignore_eos = 1;
    rec r;
    rec_init(&r);
    run_one(g, &req, &r);
    /* every data line is JSON but the final [DONE]; the deltas of choice 0 add up to its content */
    char *all = strdup(sbs(&r.sse)), *save = NULL;
    tide_sb joined;
    tide_sb_init(&joined);
    int n_data = 0, done_seen = 0, finishes = 0, usage_seen = 0;
    for (char *line = strtok_r(all, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *data = strtok_r(NULL, "\n", &save);
        assert_non_null(data);
        assert_false(done_seen);
        if (!strcmp(data, "[DONE]")) {
            done_seen = 1;
            continue;
        }
        n_data++;
        json_t *c = json_loads(data, 0, NULL);
        assert_non_null(c);
        json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
        if (json_is_object(json_object_get(c, "usage"))) usage_seen++;
        if (ch && json_string_value(json_object_get(ch, "finish_reason"))) finishes++;
        const char *t = json_string_value(json_object_get(json_object_get(ch, "delta"), "content"));
        if (ch && json_integer_value(json_object_get(ch, "index")) == 0 && t) tide_sb_add(&joined, t);
        json_decref(c);
    }
    assert_true(done_seen);
    assert_int_equal(finishes, 2);
    assert_int_equal(usage_seen, 1);
    assert_true(n_data > 4);
    assert_string_equal(sbs(&joined), r.result_content);
    assert_int_equal(r.usage.completion_tokens, 24);
    free(all);
    tide_sb_free(&joined);
    rec_free(&r);
    tide_api_req_free(&req);
}

/* The generated tokens that are text (stop and end ids are not): their
 * indices into r->ids. */
static int text_tokens(tide_gen_engine *g, const rec *r, int *idx) {
    size_t n_stop;
    const int32_t *stop = tide_gen_stop_ids(g, &n_stop);
    int n = 0;
    for (int i = 0; i < r->n_tokens && i < 256; i++) {
        int is_stop = 0;
        for (size_t k = 0; k < n_stop; k++) is_stop |= r->ids[i] == stop[k];
        if (!is_stop) idx[n++] = i;
    }
    return n;
}

/* The SSE data lines of events named `event` (NULL: all), parsed. */
static json_t *sse_events(const rec *r, const char *event) {
    json_t *out = json_array();
    char *all = strdup(sbs(&r->sse)), *save = NULL;
    for (char *name = strtok_r(all, "\n", &save); name; name = strtok_r(NULL, "\n", &save)) {
        char *data = strtok_r(NULL, "\n", &save);
        if (data && (!event || !strcmp(name, event))) {
            json_t *v = json_loads(data, 0, NULL);
            if (v) json_array_append_new(out, v);
        }
    }
    free(all);
    return out;
}

/* Completions' legacy logprobs (logprobs: 3), streamed and not: per text
 * token its string, its logprob (the sink's, exactly), a dict of at most 3
 * alternatives whose values are the sink's best logprobs, and text_offset =
 * the bytes of the tokens before it. */
static void test_logprobs_completions(void **state) {
    GEN_TEST(state, f, g);
    for (int stream = 0; stream < 2; stream++) {
        tide_api_req req;
        tide_api_err err;
        const char *body = stream ? "{\"prompt\":\"Log me\",\"max_tokens\":7,\"temperature\":0,\"logprobs\":3,\"stream\":true}"
                                  : "{\"prompt\":\"Log me\",\"max_tokens\":7,\"temperature\":0,\"logprobs\":3}";
        if (tide_api_parse(TIDE_API_COMPLETIONS, body, strlen(body), &req, &err) != 0) fail_msg("%s", err.st.msg);
        rec r;
        rec_init(&r);
        run_one(g, &req, &r);
        json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
        json_t *chunks = stream ? sse_events(&r, NULL) : json_pack("[o]", json_loads(r.response, 0, NULL));
        size_t i;
        json_t *c;
        json_array_foreach(chunks, i, c) {
            json_t *lp = json_object_get(json_array_get(json_object_get(c, "choices"), 0), "logprobs");
            if (!json_is_object(lp)) continue;
            json_array_extend(tokens, json_object_get(lp, "tokens"));
            json_array_extend(lps, json_object_get(lp, "token_logprobs"));
            json_array_extend(tops, json_object_get(lp, "top_logprobs"));
            json_array_extend(offs, json_object_get(lp, "text_offset"));
        }
        int idx[256], n = text_tokens(g, &r, idx);
        assert_true(n > 0);
        assert_int_equal(json_array_size(tokens), n);
        assert_int_equal(json_array_size(lps), n);
        assert_int_equal(json_array_size(tops), n);
        assert_int_equal(json_array_size(offs), n);
        int64_t off = 0;
        for (int k = 0; k < n; k++) {
            int t = idx[k];
            assert_true((float)json_real_value(json_array_get(lps, (size_t)k)) == r.lp[t]);
            assert_int_equal(json_integer_value(json_array_get(offs, (size_t)k)), off);
            const uint8_t *b;
            size_t len;
            assert_true(tide_tokenizer_token_bytes(g->tok, r.ids[t], &b, &len));
            off += (int64_t)len;
            assert_true(json_is_string(json_array_get(tokens, (size_t)k)));
            json_t *top = json_array_get(tops, (size_t)k), *v;
            const char *key;
            assert_true(json_object_size(top) >= 1 && json_object_size(top) <= 3);
            json_object_foreach(top, key, v) {
                int found = 0;
                for (int a = 0; a < r.n_top[t]; a++) found |= (float)json_real_value(v) == r.top_lp[t][a];
                assert_true(found);
            }
        }
        json_decref(tokens), json_decref(lps), json_decref(tops), json_decref(offs), json_decref(chunks);
        rec_free(&r);
        tide_api_req_free(&req);
    }
}

/* Responses' logprobs (include message.output_text.logprobs, top_logprobs
 * 2): the output_text part's entries, streamed in the deltas and whole in
 * output_text.done, are the text tokens' ({token, logprob, bytes,
 * top_logprobs}, the sink's values); without include or top_logprobs the
 * part's logprobs are []. */
static void test_logprobs_responses(void **state) {
    GEN_TEST(state, f, g);
    for (int mode = 0; mode < 3; mode++) {
        tide_api_req req;
        tide_api_err err;
        const char *body =
            mode == 0 ? "{\"input\":\"Log me\",\"max_output_tokens\":7,\"temperature\":0,\"top_logprobs\":2,"
                        "\"include\":[\"message.output_text.logprobs\"]}"
            : mode == 1 ? "{\"input\":\"Log me\",\"max_output_tokens\":7,\"temperature\":0,\"top_logprobs\":2,"
                          "\"stream\":true}"
                        : "{\"input\":\"Log me\",\"max_output_tokens\":7,\"temperature\":0}";
        if (tide_api_parse(TIDE_API_RESPONSES, body, strlen(body), &req, &err) != 0) fail_msg("%s", err.st.msg);
        rec r;
        rec_init(&r);
        run_one(g, &req, &r);
        json_t *entries = json_array(), *done_entries = NULL;
        if (mode != 1) {
            json_t *resp = json_loads(r.response, 0, NULL), *out = json_object_get(resp, "output"), *it;
            size_t i;
            json_array_foreach(out, i, it) if (!strcmp(json_string_value(json_object_get(it, "type")), "message"))
                json_array_extend(entries, json_object_get(json_array_get(json_object_get(it, "content"), 0), "logprobs"));
            json_decref(resp);
        } else {
            json_t *ev = sse_events(&r, "response.output_text.delta"), *e;
            size_t i;
            json_array_foreach(ev, i, e) json_array_extend(entries, json_object_get(e, "logprobs"));
            json_decref(ev);
            ev = sse_events(&r, "response.output_text.done");
            done_entries = json_incref(json_object_get(json_array_get(ev, 0), "logprobs"));
            json_decref(ev);
        }
        int idx[256], n = text_tokens(g, &r, idx);
        if (mode == 2) {
            assert_int_equal(json_array_size(entries), 0);
        } else {
            assert_true(n > 0);
            assert_int_equal(json_array_size(entries), n);
            if (done_entries) assert_true(json_equal(done_entries, entries));
            for (int k = 0; k < n; k++) {
                json_t *e = json_array_get(entries, (size_t)k);
                int t = idx[k];
                assert_true((float)json_real_value(json_object_get(e, "logprob")) == r.lp[t]);
                const uint8_t *b;
                size_t len;
                assert_true(tide_tokenizer_token_bytes(g->tok, r.ids[t], &b, &len));
                json_t *bytes = json_object_get(e, "bytes");
                assert_int_equal(json_array_size(bytes), len);
                for (size_t j = 0; j < len; j++) assert_int_equal(json_integer_value(json_array_get(bytes, j)), b[j]);
                json_t *top = json_object_get(e, "top_logprobs");
                assert_int_equal(json_array_size(top), 2);
                for (int a = 0; a < 2; a++)
                    assert_true((float)json_real_value(json_object_get(json_array_get(top, (size_t)a), "logprob")) ==
                                r.top_lp[t][a]);
            }
        }
        json_decref(done_entries);
        json_decref(entries);
        rec_free(&r);
        tide_api_req_free(&req);
    }
}

/* Chat logprobs: one entry per generated token (greedy: the chosen token is
 * the best alternative), the bytes add up to the text, streamed or not. */
static void test_logprobs(void **state) {
    GEN_TEST(state, f, g);
    for (int stream = 0; stream < 2; stream++) {
        tide_api_req req;
        chat_req(&req, "Log me");
        req.gen.max_tokens = 7;
        req.gen.ignore_eos = 1;
        req.gen.logprobs = 1;
        req.gen.top_logprobs = 3;
        req.gen.stream = stream;
        rec r;
        rec_init(&r);
        run_one(g, &req, &r);
        json_t *entries = json_array();
        if (!stream) {
            json_t *ch = choices_of(r.response);
            json_array_extend(entries, json_object_get(json_object_get(json_array_get(ch, 0), "logprobs"), "content"));
            json_decref(ch);
        } else {
            char *all = strdup(sbs(&r.sse)), *save = NULL;
            for (char *line = strtok_r(all, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char *data = strtok_r(NULL, "\n", &save);
                json_t *c = data ? json_loads(data, 0, NULL) : NULL;
                json_t *lp = json_object_get(json_array_get(json_object_get(c, "choices"), 0), "logprobs");
                if (json_is_object(lp)) json_array_extend(entries, json_object_get(lp, "content"));
                json_decref(c);
            }
            free(all);
        }
        assert_int_equal(json_array_size(entries), 7);
        tide_sb bytes;
        tide_sb_init(&bytes);
        size_t i;
        json_t *e;
        json_array_foreach(entries, i, e) {
            json_t *top = json_object_get(e, "top_logprobs");
            assert_int_equal(json_array_size(top), 3);
            double lp = json_number_value(json_object_get(e, "logprob"));
            assert_true(lp <= 0);
            double prev = 0;
            for (size_t k = 0; k < 3; k++) {
                double v = json_number_value(json_object_get(json_array_get(top, k), "logprob"));
                assert_true(v <= prev + 1e-6);
                prev = v;
            }
            /* greedy: the chosen token is the best one */
            assert_true(json_equal(json_object_get(e, "bytes"), json_object_get(json_array_get(top, 0), "bytes")));
            assert_true(fabs(lp - json_number_value(json_object_get(json_array_get(top, 0), "logprob"))) < 1e-6);
            size_t j;
            json_t *b;
            json_array_foreach(json_object_get(e, "bytes"), j, b) {
                char c = (char)json_integer_value(b);
                tide_sb_addn(&bytes, &c, 1);
            }
        }
        char *text;
        size_t len;
        tide_status st = {0};
        assert_int_equal(tide_detok_decode_all(g->tok, 0, r.ids, (size_t)r.n_output, &text, &len, &st), 0);
        char *lossy;
        size_t lossy_len;
        assert_int_equal(tide_utf8_lossy(bytes.s ? bytes.s : "", bytes.len, &lossy, &lossy_len, &st), 0);
        assert_int_equal(lossy_len, len);
        assert_memory_equal(lossy, text, len);
        free(lossy);
        free(text);
        tide_sb_free(&bytes);
        json_decref(entries);
        rec_free(&r);
        tide_api_req_free(&req);
    }
}

static void test_cancel_frees_kv(void **state) {
    GEN_TEST(state, f, g);
    tide_status st = {0};
    tide_api_req req;
    chat_req(&req, "A long answer please");
    req.gen.max_tokens = 30000;
    req.gen.ignore_eos = 1;
    req.gen.n = 2;
    rec r;
    rec_init(&r);
    tide_gen_input in = input(&req, &r);
    tide_gen_id id;
    tide_gen_stats before, gs;
    tide_gen_get_stats(g, &before);
    assert_int_equal(tide_gen_submit(g, &in, &id, &st), 0);
    for (int i = 0; i < 5; i++) assert_int_equal(tide_gen_step(g, &st), 0);
    tide_engine_stats s;
    tide_engine_get_stats(g->e, &s);
    assert_true(s.kv_blocks_used > 0);
    assert_int_equal(r.done, 0);
    tide_gen_cancel(g, id);
    assert_int_equal(r.done, 1);
    assert_true(r.cancelled);
    assert_string_equal(r.finish, "cancelled");
    tide_gen_cancel(g, id); /* done already: nothing */
    assert_int_equal(tide_gen_run(g, &st), 0);
    assert_int_equal(r.done, 1);
    assert_kv_idle(g);
    tide_gen_get_stats(g, &gs);
    assert_int_equal(gs.sessions_active, before.sessions_active);
    assert_int_equal(gs.sessions_done, before.sessions_done + 1);
    rec_free(&r);
    tide_api_req_free(&req);
}

static void test_bad_requests(void **state) {
    GEN_TEST(state, f, g);
    tide_status st = {0};
    rec r;
    rec_init(&r);
    tide_api_req req;
    raw_req(&req, "x");
    req.gen.logit_bias = calloc(1, sizeof *req.gen.logit_bias);
    req.gen.logit_bias[0] = (tide_logit_bias){1 << 30, 1};
    req.gen.n_logit_bias = 1;
    tide_gen_input in = input(&req, &r);
    assert_int_equal(tide_gen_submit(g, &in, NULL, &st), -1);
    assert_non_null(strstr(st.msg, "logit"));
    tide_api_req_free(&req);
    tide_api_req_init(&req, TIDE_API_COMPLETIONS);
    req.prompt_ids = calloc(1, sizeof(int32_t));
    req.prompt_ids[0] = -5;
    req.n_prompt_ids = 1;
    in = input(&req, &r);
    assert_int_equal(tide_gen_submit(g, &in, NULL, &st), -1);
    assert_non_null(strstr(st.msg, "vocabulary"));
    tide_api_req_free(&req);
    /* the context (32768 on the tiny shape): an explicit max_tokens beyond it
     * fails at submission, the mode's default is cut to fit */
    chat_req(&req, "x");
    req.gen.max_tokens = (int)tide_engine_context(g->e);
    in = input(&req, &r);
    assert_int_equal(tide_gen_submit(g, &in, NULL, &st), -1);
    assert_non_null(strstr(st.msg, "context"));
    tide_api_req_free(&req);
    chat_req(&req, "x");
    req.conv.thinking = 1;
    req.gen.max_tokens = tide_conv_default_max_tokens(&req.conv);
    if (req.gen.max_tokens > tide_engine_context(g->e)) { /* the tiny shape: 65536 > 32768 */
        tide_gen_id id;
        in = input(&req, &r);
        assert_int_equal(tide_gen_submit(g, &in, &id, &st), 0);
        tide_gen_cancel(g, id);
        assert_int_equal(r.done, 1);
        r.done = 0;
    }
    tide_api_req_free(&req);
    raw_req(&req, "");
    in = input(&req, &r);
    in.sink.done = NULL;
    assert_int_equal(tide_gen_submit(g, &in, NULL, &st), -1);
    tide_api_req_free(&req);
    assert_int_equal(r.done, 0);
    assert_false(tide_gen_busy(g));
    rec_free(&r);
}

/* The engine thread: submit and cancel from this thread, callbacks there;
 * the tokens are those of the synchronous run. */
static void test_engine_thread(void **state) {
    GEN_TEST(state, f, shared);
    tide_status st = {0};
    enum { N = 4 };
    rec sync[N], thr[N];
    tide_api_req req[N];
    for (int i = 0; i < N; i++) {
        chat_req(&req[i], i % 2 ? "odd" : "even");
        req[i].gen.temperature = 1;
        req[i].gen.has_seed = 1;
        req[i].gen.seed = f->seed + (uint64_t)i;
        req[i].gen.max_tokens = i == N - 1 ? 30000 : 6;
        req[i].gen.ignore_eos = 1;
        req[i].gen.stream = i == 1;
    }
    tide_gen_engine *g = shared;
    for (int i = 0; i < N - 1; i++) {
        rec_init(&sync[i]);
        run_one(g, &req[i], &sync[i]);
    }
    g = make_gen(f);
    assert_int_equal(tide_gen_start(g, &st), 0);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    tide_gen_id ids[N];
    for (int i = 0; i < N; i++) {
        rec_init(&thr[i]);
        thr[i].mu = &mu;
        thr[i].cv = &cv;
        tide_gen_input in = input(&req[i], &thr[i]);
        assert_int_equal(tide_gen_submit(g, &in, &ids[i], &st), 0);
    }
    pthread_mutex_lock(&mu);
    for (int i = 0; i < N - 1; i++)
        while (!thr[i].done) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    tide_gen_cancel(g, ids[N - 1]); /* the endless one */
    pthread_mutex_lock(&mu);
    while (!thr[N - 1].done) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    if (!thr[N - 1].cancelled) fail_msg("not cancelled: finish %s, error %s", thr[N - 1].finish, thr[N - 1].error ? thr[N - 1].error : "-");
    for (int i = 0; i < N - 1; i++) {
        assert_int_equal(thr[i].n_output, sync[i].n_output);
        assert_memory_equal(thr[i].ids, sync[i].ids, (size_t)sync[i].n_output * sizeof(int32_t));
        assert_string_equal(thr[i].result_content, sync[i].result_content);
    }
    tide_gen_stats gs;
    tide_gen_get_stats(g, &gs);
    assert_int_equal(gs.sessions_done, N);
    tide_gen_destroy(g); /* joins the thread */
    for (int i = 0; i < N; i++) {
        if (i < N - 1) rec_free(&sync[i]);
        rec_free(&thr[i]);
        tide_api_req_free(&req[i]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_held_back),
        cmocka_unit_test(test_stop_string_across_tokens),
        cmocka_unit_test(test_tool_call_events),
        cmocka_unit_test(test_thinking_split),
        cmocka_unit_test(test_prompt_tokens),
        cmocka_unit_test(test_stream_equals_ids),
        cmocka_unit_test(test_forced_stops),
        cmocka_unit_test(test_n_and_seeds),
        cmocka_unit_test(test_stream_sse),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_logprobs_completions),
        cmocka_unit_test(test_logprobs_responses),
        cmocka_unit_test(test_cancel_frees_kv),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_engine_thread),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
