/* Event generation for the three APIs: a sample model output (reasoning,
 * text, two tool calls) is streamed in small chunks; every emitted event is
 * parsed back with jansson and its fields and order checked. Also the
 * complete non-streaming responses, finish reasons (stop, length, tool
 * calls, stop sequence) and mid-stream failure. */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/out.h"
#include "testutil.h"
#include "text/render.h"
#include "text/sbuf.h"

#define MAX_EV 512

typedef struct events {
    char *name[MAX_EV];
    json_t *data[MAX_EV]; /* NULL for [DONE] */
    int done_marker[MAX_EV];
    int n;
} events;

static int sink(void *ud, const char *event, const char *data, size_t len, tide_status *st) {
    (void)st;
    events *e = ud;
    assert_true(e->n < MAX_EV);
    e->name[e->n] = event ? strdup(event) : NULL;
    e->done_marker[e->n] = len == 6 && !memcmp(data, "[DONE]", 6);
    if (!e->done_marker[e->n]) {
        json_error_t jerr;
        e->data[e->n] = json_loadb(data, len, 0, &jerr);
        if (!e->data[e->n]) fail_msg("event %d is not JSON (%s): %.*s", e->n, jerr.text, (int)len, data);
    }
    e->n++;
    return 0;
}

static void events_free(events *e) {
    for (int i = 0; i < e->n; i++) free(e->name[i]), json_decref(e->data[i]);
    memset(e, 0, sizeof *e);
}

#define CALL_TEXT                                                                                                   \
    "\n\n" TIDE_DSML_CALLS_OPEN "\n" TIDE_DSML_INVOKE_OPEN "get_weather\">\n" TIDE_DSML_PARAM_OPEN                  \
    "city\" string=\"true\">Paris \"é\"" TIDE_DSML_PARAM_CLOSE "\n" TIDE_DSML_PARAM_OPEN "days\" string=\"false\">2" \
    TIDE_DSML_PARAM_CLOSE "\n" TIDE_DSML_INVOKE_CLOSE "\n" TIDE_DSML_INVOKE_OPEN "now\">\n" TIDE_DSML_INVOKE_CLOSE   \
    "\n" TIDE_DSML_CALLS_CLOSE

static const char OUTPUT[] = "Need the weather, ünïcode.</think>Let me check ✓." CALL_TEXT TIDE_TOK_EOS;
static const char TOOLS_CHAT[] = ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
                                 "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]";

static const char *S(json_t *o, const char *path) {
    /* dotted path with numeric indices: "choices.0.delta.content" */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *v = o;
    for (char *tok = strtok(buf, "."); tok && v; tok = strtok(NULL, "."))
        v = json_is_array(v) ? json_array_get(v, (size_t)atoi(tok)) : json_object_get(v, tok);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static json_t *J(json_t *o, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *v = o;
    for (char *tok = strtok(buf, "."); tok && v; tok = strtok(NULL, "."))
        v = json_is_array(v) ? json_array_get(v, (size_t)atoi(tok)) : json_object_get(v, tok);
    return v;
}

/* Runs one request through the output side; chunks of `step` bytes. */
static tide_api_out *run(tide_api_kind kind, const char *body, const char *output, size_t step, tide_gen_end end,
                         events *ev, tide_api_req *req) {
    tide_api_err err;
    if (tide_api_parse(kind, body, strlen(body), req, &err) != 0) fail_msg("%s", err.st.msg);
    tide_prompt p;
    tide_status st = {0};
    assert_int_equal(tide_render(&req->conv, &p, &st), 0);
    tide_api_out *o;
    assert_int_equal(tide_api_out_new(req, p.in_reasoning, "X1", 1700000000, sink, ev, &o, &st), 0);
    tide_usage u = {.prompt_tokens = 11, .completion_tokens = 0, .cached_tokens = 3};
    assert_int_equal(tide_api_out_begin(o, &u, &st), 0);
    size_t n = strlen(output);
    for (size_t at = 0; at < n && !tide_api_out_ended(o); at += step)
        assert_int_equal(tide_api_out_text(o, output + at, at + step < n ? step : n - at, &st), 0);
    u.completion_tokens = 42;
    u.reasoning_tokens = 7;
    assert_int_equal(tide_api_out_finish(o, end, &u, &st), 0);
    tide_prompt_free(&p);
    return o;
}

static char *response_of(tide_api_out *o) {
    tide_status st = {0};
    char *s = tide_api_out_response(o, &st);
    assert_non_null(s);
    return s;
}

static void test_chat_stream(void **state) {
    (void)state;
    char body[1024];
    snprintf(body, sizeof body, "{\"model\":\"ds\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
             "\"reasoning_effort\":\"high\",\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}]%s}", TOOLS_CHAT);
    events ev = {0};
    tide_api_req req;
    tide_api_out *o = run(TIDE_API_CHAT, body, OUTPUT, 3, TIDE_GEN_STOP, &ev, &req);
    assert_true(ev.n > 5);
    assert_string_equal(S(ev.data[0], "choices.0.delta.role"), "assistant");
    tide_sb reasoning, content, args0, args1;
    tide_sb_init(&reasoning), tide_sb_init(&content), tide_sb_init(&args0), tide_sb_init(&args1);
    int phase = 0, finish_at = -1;
    for (int i = 0; i < ev.n; i++) {
        assert_null(ev.name[i]); /* Chat Completions events have no names */
        if (ev.done_marker[i]) {
            assert_int_equal(i, ev.n - 1); /* [DONE] is last */
            continue;
        }
        json_t *d = ev.data[i];
        assert_string_equal(S(d, "object"), "chat.completion.chunk");
        assert_string_equal(S(d, "id"), "X1");
        assert_string_equal(S(d, "model"), "ds");
        assert_true(json_object_get(d, "usage") != NULL); /* null until the usage chunk */
        if (json_array_size(json_object_get(d, "choices")) == 0) {
            assert_int_equal(i, ev.n - 2); /* the usage chunk comes right before [DONE] */
            assert_int_equal(json_integer_value(J(d, "usage.prompt_tokens")), 11);
            assert_int_equal(json_integer_value(J(d, "usage.completion_tokens")), 42);
            assert_int_equal(json_integer_value(J(d, "usage.total_tokens")), 53);
            assert_int_equal(json_integer_value(J(d, "usage.completion_tokens_details.reasoning_tokens")), 7);
            continue;
        }
        const char *r = S(d, "choices.0.delta.reasoning_content"), *c = S(d, "choices.0.delta.content");
        json_t *tc = J(d, "choices.0.delta.tool_calls.0");
        if (r) { assert_true(phase <= 0); tide_sb_add(&reasoning, r); }
        if (c && i > 0) { assert_true(phase <= 1); phase = 1; tide_sb_add(&content, c); }
        if (tc) {
            phase = 2;
            json_int_t idx = json_integer_value(json_object_get(tc, "index"));
            if (S(tc, "id")) {
                assert_string_equal(S(tc, "type"), "function");
                assert_string_equal(S(tc, "function.name"), idx == 0 ? "get_weather" : "now");
            }
            if (S(tc, "function.arguments")) tide_sb_add(idx == 0 ? &args0 : &args1, S(tc, "function.arguments"));
        }
        if (S(d, "choices.0.finish_reason")) {
            finish_at = i;
            assert_string_equal(S(d, "choices.0.finish_reason"), "tool_calls");
        }
    }
    assert_int_equal(finish_at, ev.n - 3);
    assert_string_equal(reasoning.s, "Need the weather, ünïcode.");
    assert_string_equal(content.s, "Let me check ✓.");
    json_t *a0 = json_loads(args0.s, 0, NULL);
    assert_string_equal(S(a0, "city"), "Paris \"é\"");
    assert_int_equal(json_integer_value(json_object_get(a0, "days")), 2);
    assert_string_equal(args1.s, "{}");
    json_decref(a0);
    /* the complete response agrees */
    char *s = response_of(o);
    json_t *r = json_loads(s, 0, NULL);
    assert_string_equal(S(r, "object"), "chat.completion");
    assert_string_equal(S(r, "choices.0.message.content"), "Let me check ✓.");
    assert_string_equal(S(r, "choices.0.message.reasoning_content"), "Need the weather, ünïcode.");
    assert_string_equal(S(r, "choices.0.message.tool_calls.1.function.name"), "now");
    assert_string_equal(S(r, "choices.0.message.tool_calls.0.function.arguments"), args0.s);
    assert_string_equal(S(r, "choices.0.finish_reason"), "tool_calls");
    json_decref(r);
    free(s);
    tide_sb_free(&reasoning), tide_sb_free(&content), tide_sb_free(&args0), tide_sb_free(&args1);
    tide_api_out_free(o);
    tide_api_req_free(&req);
    events_free(&ev);
}

static void test_chat_plain_and_length(void **state) {
    (void)state;
    events ev = {0};
    tide_api_req req;
    tide_api_out *o = run(TIDE_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"##\"]}",
                          "Hello there ## ignored", 4, TIDE_GEN_STOP, &ev, &req);
    assert_int_equal(ev.n, 0); /* not streaming: no events */
    assert_true(tide_api_out_ended(o));
    char *s = response_of(o);
    json_t *r = json_loads(s, 0, NULL);
    assert_string_equal(S(r, "choices.0.message.content"), "Hello there ");
    assert_null(J(r, "choices.0.message.tool_calls"));
    assert_null(J(r, "choices.0.message.reasoning_content"));
    assert_string_equal(S(r, "choices.0.finish_reason"), "stop");
    json_decref(r), free(s);
    tide_api_out_free(o), tide_api_req_free(&req);

    o = run(TIDE_API_CHAT, "{\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "cut sho", 2,
            TIDE_GEN_LENGTH, &ev, &req);
    assert_string_equal(S(ev.data[ev.n - 2], "choices.0.finish_reason"), "length");
    assert_null(json_object_get(ev.data[0], "usage")); /* no include_usage: no usage field */
    assert_true(ev.done_marker[ev.n - 1]);
    tide_api_out_free(o), tide_api_req_free(&req), events_free(&ev);
}

static void test_responses_stream(void **state) {
    (void)state;
    const char *body = "{\"model\":\"ds\",\"stream\":true,\"reasoning\":{\"effort\":\"high\"},\"input\":\"Weather?\","
                       "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\"},{\"type\":\"function\",\"name\":\"now\"}]}";
    events ev = {0};
    tide_api_req req;
    tide_api_out *o = run(TIDE_API_RESPONSES, body, OUTPUT, 5, TIDE_GEN_STOP, &ev, &req);
    assert_string_equal(ev.name[0], "response.created");
    assert_string_equal(ev.name[1], "response.in_progress");
    assert_string_equal(ev.name[ev.n - 1], "response.completed");
    const char *added_types[8] = {0};
    int n_added = 0, open = -1;
    tide_sb text, args;
    tide_sb_init(&text), tide_sb_init(&args);
    for (int i = 0; i < ev.n; i++) {
        json_t *d = ev.data[i];
        assert_string_equal(S(d, "type"), ev.name[i]);
        assert_int_equal(json_integer_value(json_object_get(d, "sequence_number")), i);
        const char *t = ev.name[i];
        if (!strcmp(t, "response.output_item.added")) {
            assert_int_equal(open, -1); /* one item open at a time */
            open = (int)json_integer_value(json_object_get(d, "output_index"));
            assert_int_equal(open, n_added);
            added_types[n_added++] = S(d, "item.type");
        } else if (!strcmp(t, "response.output_item.done")) {
            assert_int_equal(json_integer_value(json_object_get(d, "output_index")), open);
            open = -1;
        } else if (!strcmp(t, "response.output_text.delta")) {
            tide_sb_add(&text, S(d, "delta"));
        } else if (!strcmp(t, "response.function_call_arguments.delta") && open == 2) {
            tide_sb_add(&args, S(d, "delta"));
        } else if (!strcmp(t, "response.function_call_arguments.done") && open == 2) {
            assert_string_equal(S(d, "arguments"), args.s);
        }
    }
    assert_int_equal(n_added, 4);
    assert_string_equal(added_types[0], "reasoning");
    assert_string_equal(added_types[1], "message");
    assert_string_equal(added_types[2], "function_call");
    assert_string_equal(added_types[3], "function_call");
    assert_string_equal(text.s, "Let me check ✓.");
    json_t *done = J(ev.data[ev.n - 1], "response");
    assert_string_equal(S(done, "status"), "completed");
    assert_string_equal(S(done, "output.0.content.0.text"), "Need the weather, ünïcode.");
    assert_string_equal(S(done, "output.1.content.0.text"), "Let me check ✓.");
    assert_string_equal(S(done, "output.2.name"), "get_weather");
    assert_string_equal(S(done, "output.2.arguments"), args.s);
    assert_int_equal(json_integer_value(J(done, "usage.output_tokens")), 42);
    assert_int_equal(json_integer_value(J(done, "usage.input_tokens_details.cached_tokens")), 3);
    char *s = response_of(o);
    json_t *r = json_loads(s, 0, NULL);
    assert_true(json_equal(r, done));
    json_decref(r), free(s);
    tide_sb_free(&text), tide_sb_free(&args);
    tide_api_out_free(o), tide_api_req_free(&req), events_free(&ev);

    /* max_output_tokens ran out: response.incomplete */
    o = run(TIDE_API_RESPONSES, "{\"stream\":true,\"input\":\"x\"}", "partial", 3, TIDE_GEN_LENGTH, &ev, &req);
    assert_string_equal(ev.name[ev.n - 1], "response.incomplete");
    assert_string_equal(S(ev.data[ev.n - 1], "response.incomplete_details.reason"), "max_output_tokens");
    assert_string_equal(S(ev.data[ev.n - 2], "type"), "response.output_item.done");
    tide_api_out_free(o), tide_api_req_free(&req), events_free(&ev);

    /* failure mid-stream */
    tide_api_err err;
    tide_status st = {0};
    const char *b = "{\"stream\":true,\"input\":\"x\"}";
    assert_int_equal(tide_api_parse(TIDE_API_RESPONSES, b, strlen(b), &req, &err), 0);
    assert_int_equal(tide_api_out_new(&req, 0, "F", 1, sink, &ev, &o, &st), 0);
    assert_int_equal(tide_api_out_text(o, "abc", 3, &st), 0);
    assert_int_equal(tide_api_out_fail(o, "GPU fell over", &st), 0);
    assert_string_equal(ev.name[ev.n - 1], "response.failed");
    assert_string_equal(S(ev.data[ev.n - 1], "response.error.message"), "GPU fell over");
    assert_int_equal(tide_api_out_finish(o, TIDE_GEN_STOP, NULL, &st), 0); /* no-op after failure */
    assert_string_equal(ev.name[ev.n - 1], "response.failed");
    tide_api_out_free(o), tide_api_req_free(&req), events_free(&ev);
}

static void test_messages_stream(void **state) {
    (void)state;
    const char *body = "{\"model\":\"claude-ish\",\"max_tokens\":100,\"stream\":true,\"thinking\":{\"type\":\"enabled\","
                       "\"budget_tokens\":50},\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],"
                       "\"tools\":[{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\"}},{\"name\":\"now\"}]}";
    events ev = {0};
    tide_api_req req;
    tide_api_out *o = run(TIDE_API_MESSAGES, body, OUTPUT, 1, TIDE_GEN_STOP, &ev, &req);
    assert_string_equal(ev.name[0], "message_start");
    assert_string_equal(S(ev.data[0], "message.role"), "assistant");
    assert_int_equal(json_integer_value(J(ev.data[0], "message.usage.input_tokens")), 11);
    assert_string_equal(ev.name[ev.n - 2], "message_delta");
    assert_string_equal(S(ev.data[ev.n - 2], "delta.stop_reason"), "tool_use");
    assert_int_equal(json_integer_value(J(ev.data[ev.n - 2], "usage.output_tokens")), 42);
    assert_string_equal(ev.name[ev.n - 1], "message_stop");
    int open = -1, blocks = 0;
    const char *types[8] = {0};
    tide_sb thinking, json0;
    tide_sb_init(&thinking), tide_sb_init(&json0);
    for (int i = 1; i < ev.n - 2; i++) {
        json_t *d = ev.data[i];
        assert_string_equal(S(d, "type"), ev.name[i]);
        int idx = (int)json_integer_value(json_object_get(d, "index"));
        if (!strcmp(ev.name[i], "content_block_start")) {
            assert_int_equal(open, -1);
            assert_int_equal(idx, blocks);
            types[blocks++] = S(d, "content_block.type");
            open = idx;
        } else if (!strcmp(ev.name[i], "content_block_stop")) {
            assert_int_equal(idx, open);
            open = -1;
        } else {
            assert_string_equal(ev.name[i], "content_block_delta");
            assert_int_equal(idx, open);
            if (S(d, "delta.thinking")) tide_sb_add(&thinking, S(d, "delta.thinking"));
            if (idx == 2) tide_sb_add(&json0, S(d, "delta.partial_json"));
        }
    }
    assert_int_equal(blocks, 4);
    assert_string_equal(types[0], "thinking");
    assert_string_equal(types[1], "text");
    assert_string_equal(types[2], "tool_use");
    assert_string_equal(thinking.s, "Need the weather, ünïcode.");
    json_t *in = json_loads(json0.s, 0, NULL);
    assert_string_equal(S(in, "city"), "Paris \"é\"");
    json_decref(in);
    char *s = response_of(o);
    json_t *r = json_loads(s, 0, NULL);
    assert_string_equal(S(r, "type"), "message");
    assert_string_equal(S(r, "content.0.type"), "thinking");
    assert_string_equal(S(r, "content.1.text"), "Let me check ✓.");
    assert_string_equal(S(r, "content.2.name"), "get_weather");
    assert_int_equal(json_integer_value(J(r, "content.2.input.days")), 2);
    assert_true(json_is_object(J(r, "content.3.input")));
    assert_string_equal(S(r, "stop_reason"), "tool_use");
    json_decref(r), free(s);
    tide_sb_free(&thinking), tide_sb_free(&json0);
    tide_api_out_free(o), tide_api_req_free(&req), events_free(&ev);

    /* stop sequence and max_tokens */
    o = run(TIDE_API_MESSAGES, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop_sequences\":[\"\\n\\nHuman:\"]}",
            "Sure.\n\nHuman: more", 2, TIDE_GEN_STOP, &ev, &req);
    s = response_of(o);
    r = json_loads(s, 0, NULL);
    assert_string_equal(S(r, "stop_reason"), "stop_sequence");
    assert_string_equal(S(r, "stop_sequence"), "\n\nHuman:");
    assert_string_equal(S(r, "content.0.text"), "Sure.");
    json_decref(r), free(s);
    tide_api_out_free(o), tide_api_req_free(&req);
    o = run(TIDE_API_MESSAGES, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "long", 2, TIDE_GEN_LENGTH, &ev,
            &req);
    s = response_of(o);
    r = json_loads(s, 0, NULL);
    assert_string_equal(S(r, "stop_reason"), "max_tokens");
    assert_true(json_is_null(json_object_get(r, "stop_sequence")));
    json_decref(r), free(s);
    tide_api_out_free(o), tide_api_req_free(&req), events_free(&ev);
}

static void test_invalid_utf8_output(void **state) {
    (void)state;
    events ev = {0};
    tide_api_req req;
    tide_api_out *o = run(TIDE_API_CHAT, "{\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                          "ok \xff\xfe bad \xc3", 1, TIDE_GEN_STOP, &ev, &req);
    char *s = response_of(o);
    json_t *r = json_loads(s, 0, NULL);
    assert_non_null(r); /* still valid JSON, bad bytes replaced */
    assert_string_equal(S(r, "choices.0.message.content"), "ok \xef\xbf\xbd\xef\xbf\xbd bad \xef\xbf\xbd");
    json_decref(r), free(s);
    tide_api_out_free(o), tide_api_req_free(&req), events_free(&ev);
}

/* The complete response does not depend on how the text arrived. */
static void test_chunking_invariance(void **state) {
    (void)state;
    static const char *const BODIES[3] = {
        "{\"stream\":true,\"reasoning_effort\":\"high\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}",
        "{\"stream\":true,\"reasoning\":{},\"input\":\"q\"}",
        "{\"stream\":true,\"thinking\":{\"type\":\"enabled\"},\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}"};
    static const tide_api_kind KINDS[3] = {TIDE_API_CHAT, TIDE_API_RESPONSES, TIDE_API_MESSAGES};
    static const size_t STEPS[] = {1, 2, 3, 5, 8, 13, 1000};
    for (int k = 0; k < 3; k++) {
        char *first = NULL;
        int first_events = 0;
        for (size_t s = 0; s < sizeof STEPS / sizeof *STEPS; s++) {
            events ev = {0};
            tide_api_req req;
            tide_api_out *o = run(KINDS[k], BODIES[k], OUTPUT, STEPS[s], TIDE_GEN_STOP, &ev, &req);
            char *resp = response_of(o);
            if (!first) {
                first = resp;
                first_events = ev.n;
            } else {
                assert_string_equal(resp, first);
                assert_true(ev.n >= 8 && first_events >= 8);
                free(resp);
            }
            tide_api_out_free(o), tide_api_req_free(&req), events_free(&ev);
        }
        free(first);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_stream),     cmocka_unit_test(test_chat_plain_and_length),
        cmocka_unit_test(test_responses_stream), cmocka_unit_test(test_messages_stream),
        cmocka_unit_test(test_invalid_utf8_output),   cmocka_unit_test(test_chunking_invariance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
