/* The request side of sampling (api/req_sampling.c: n, min_p, penalties,
 * logit_bias, ignore_eos, stop_token_ids), the Completions request
 * (api/req_completions.c) and the Completions output (api/out_completions.c):
 * values land in tide_gen, wrong values are refused naming the field, and
 * the text_completion events and response have their official shape. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/api.h"
#include "api/out.h"
#include "testutil.h"

static tide_api_req parse_ok(tide_api_kind kind, const char *body) {
    tide_api_req req;
    tide_api_err err;
    if (tide_api_parse(kind, body, strlen(body), &req, &err) != 0) fail_msg("unexpected error: %s", err.st.msg);
    return req;
}

static void expect_error(tide_api_kind kind, const char *body, const char *param, const char *part) {
    tide_api_req req;
    tide_api_err err;
    assert_int_equal(tide_api_parse(kind, body, strlen(body), &req, &err), -1);
    if (!strstr(err.st.msg, part)) fail_msg("error \"%s\" lacks \"%s\"", err.st.msg, part);
    assert_string_equal(err.param, param);
    assert_int_equal(err.http_status, 400);
    tide_api_req_free(&req);
}

#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]"

static void test_chat_sampling(void **state) {
    (void)state;
    tide_api_req r = parse_ok(TIDE_API_CHAT, "{" MSGS ",\"n\":3,\"min_p\":0.05,\"frequency_penalty\":0.5,"
                                             "\"presence_penalty\":-1.5,\"repetition_penalty\":1.2,"
                                             "\"logit_bias\":{\"15\":-100,\"7\":2.5},\"ignore_eos\":true,"
                                             "\"stop_token_ids\":[4,9]}");
    assert_int_equal(r.gen.n, 3);
    assert_true(r.gen.min_p == 0.05);
    assert_true(r.gen.frequency_penalty == 0.5 && r.gen.presence_penalty == -1.5);
    assert_true(r.gen.repetition_penalty == 1.2);
    assert_int_equal(r.gen.n_logit_bias, 2);
    float sum = 0;
    for (size_t i = 0; i < 2; i++) sum += r.gen.logit_bias[i].bias + (float)r.gen.logit_bias[i].token;
    assert_true(sum == -100 + 15 + 2.5f + 7);
    assert_true(r.gen.ignore_eos);
    assert_int_equal(r.gen.n_stop_token_ids, 2);
    assert_int_equal(r.gen.stop_token_ids[1], 9);
    tide_api_req_free(&r);
    r = parse_ok(TIDE_API_CHAT, "{" MSGS "}"); /* defaults: everything off */
    assert_int_equal(r.gen.n, 1);
    assert_true(r.gen.repetition_penalty == 1 && r.gen.frequency_penalty == 0 && r.gen.n_logit_bias == 0);
    tide_api_req_free(&r);
}

static void test_chat_sampling_errors(void **state) {
    (void)state;
    const tide_api_kind C = TIDE_API_CHAT;
    expect_error(C, "{" MSGS ",\"logit_bias\":{\"x1\":1}}", "logit_bias.x1", "token id");
    expect_error(C, "{" MSGS ",\"logit_bias\":{\"-3\":1}}", "logit_bias.-3", "token id");
    expect_error(C, "{" MSGS ",\"logit_bias\":{\"5\":101}}", "logit_bias.5", "[-100, 100]");
    expect_error(C, "{" MSGS ",\"logit_bias\":{\"5\":\"a\"}}", "logit_bias.5", "expected number");
    expect_error(C, "{" MSGS ",\"frequency_penalty\":2.5}", "frequency_penalty", "outside");
    expect_error(C, "{" MSGS ",\"repetition_penalty\":0}", "repetition_penalty", "> 0");
    expect_error(C, "{" MSGS ",\"min_p\":-0.1}", "min_p", "outside");
    expect_error(C, "{" MSGS ",\"stop_token_ids\":[1,\"x\"]}", "stop_token_ids[1]", "token id");
    expect_error(C, "{" MSGS ",\"n\":0}", "n", "outside");
    expect_error(C, "{" MSGS ",\"top_logprobs\":2}", "top_logprobs", "logprobs");
    expect_error(C, "{" MSGS ",\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs", "outside");
}

static void test_completions_request(void **state) {
    (void)state;
    const tide_api_kind K = TIDE_API_COMPLETIONS;
    tide_api_req r = parse_ok(K, "{\"model\":\"m\",\"prompt\":\"Once upon\",\"stop\":[\"\\n\"],\"n\":2,\"seed\":5}");
    assert_string_equal(r.prompt, "Once upon");
    assert_int_equal(r.prompt_len, 9);
    assert_null(r.prompt_ids);
    assert_int_equal(r.gen.max_tokens, 16); /* OpenAI's default */
    assert_int_equal(r.gen.n, 2);
    assert_int_equal(r.gen.n_stop, 1);
    assert_true(r.gen.has_seed && r.gen.seed == 5);
    assert_string_equal(r.gen.model, "m");
    tide_api_req_free(&r);
    r = parse_ok(K, "{\"prompt\":[\"one\"]}");
    assert_string_equal(r.prompt, "one");
    tide_api_req_free(&r);
    r = parse_ok(K, "{\"prompt\":[0,100,200],\"max_tokens\":3}");
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.prompt_ids[2], 200);
    assert_int_equal(r.gen.max_tokens, 3);
    tide_api_req_free(&r);
    r = parse_ok(K, "{\"prompt\":[[7,8]]}");
    assert_int_equal(r.n_prompt_ids, 2);
    tide_api_req_free(&r);
    expect_error(K, "{}", "prompt", "required");
    expect_error(K, "{\"prompt\":[]}", "prompt", "empty");
    expect_error(K, "{\"prompt\":[1,-2]}", "prompt[1]", "token id");
    expect_error(K, "{\"prompt\":[\"a\",\"b\"]}", "prompt", "one prompt");
    expect_error(K, "{\"prompt\":5}", "prompt", "expected string or array");
    expect_error(K, "{\"prompt\":\"a\",\"echo\":true}", "echo", "not supported");
    expect_error(K, "{\"prompt\":\"a\",\"logprobs\":21}", "logprobs", "outside");
    expect_error(K, "{\"prompt\":\"a\",\"logprobs\":true}", "logprobs", "legacy");
    r = parse_ok(K, "{\"prompt\":\"a\",\"logprobs\":0}");
    assert_true(r.gen.logprobs && r.gen.top_logprobs == 0);
    tide_api_req_free(&r);
    r = parse_ok(K, "{\"prompt\":\"a\",\"logprobs\":5}");
    assert_true(r.gen.logprobs && r.gen.top_logprobs == 5);
    tide_api_req_free(&r);
    r = parse_ok(K, "{\"prompt\":\"a\",\"logprobs\":null}");
    assert_false(r.gen.logprobs);
    tide_api_req_free(&r);
    /* Responses: include or top_logprobs turns them on */
    const tide_api_kind R = TIDE_API_RESPONSES;
    r = parse_ok(R, "{\"input\":\"a\",\"include\":[\"reasoning.encrypted_content\",\"message.output_text.logprobs\"]}");
    assert_true(r.gen.logprobs && r.gen.top_logprobs == 0);
    tide_api_req_free(&r);
    r = parse_ok(R, "{\"input\":\"a\",\"top_logprobs\":4}");
    assert_true(r.gen.logprobs && r.gen.top_logprobs == 4);
    tide_api_req_free(&r);
    r = parse_ok(R, "{\"input\":\"a\",\"include\":[\"reasoning.encrypted_content\"]}");
    assert_false(r.gen.logprobs);
    tide_api_req_free(&r);
    expect_error(R, "{\"input\":\"a\",\"top_logprobs\":21}", "top_logprobs", "outside");
    expect_error(R, "{\"input\":\"a\",\"include\":[3]}", "include[0]", "expected string");
    expect_error(R, "{\"input\":\"a\",\"include\":\"x\"}", "include", "expected");
}

typedef struct {
    int n;
    char data[16][512];
} events;

static int sink_any(void *ud, const char *event, const char *data, size_t len, tide_status *st) {
    events *e = ud;
    (void)st, (void)event;
    if (e->n < 16) snprintf(e->data[e->n++], sizeof e->data[0], "%.*s", (int)len, data);
    return 0;
}

static int sink(void *ud, const char *event, const char *data, size_t len, tide_status *st) {
    events *e = ud;
    (void)st;
    assert_null(event);
    if (e->n < 16) snprintf(e->data[e->n++], sizeof e->data[0], "%.*s", (int)len, data);
    return 0;
}

static void test_completions_output(void **state) {
    (void)state;
    tide_status st = {0};
    for (int stream = 0; stream < 2; stream++) {
        tide_api_req r = parse_ok(TIDE_API_COMPLETIONS, stream ? "{\"prompt\":\"a\",\"stream\":true,\"stop\":[\"END\"],"
                                                                 "\"stream_options\":{\"include_usage\":true}}"
                                                               : "{\"prompt\":\"a\",\"stop\":[\"END\"]}");
        events ev = {0};
        tide_api_out *o;
        assert_int_equal(tide_api_out_new(&r, 1, "cmpl-1", 42, sink, &ev, &o, &st), 0);
        /* raw text: no reasoning even though in_reasoning was 1, markup stays text */
        static const char *const PIECES[] = {"x</think>y <", "\xef\xbd\x9c" "DSML\xef\xbd\x9c calls> EN", "D more"};
        for (int i = 0; i < 3; i++) assert_int_equal(tide_api_out_text(o, PIECES[i], strlen(PIECES[i]), &st), 0);
        assert_true(tide_api_out_ended(o));
        tide_usage u = {.prompt_tokens = 2, .completion_tokens = 5, .cached_tokens = 1};
        assert_int_equal(tide_api_out_finish(o, TIDE_GEN_STOP, &u, &st), 0);
        size_t len;
        assert_string_equal(tide_api_out_content(o, &len), "x</think>y <\xef\xbd\x9c" "DSML\xef\xbd\x9c calls> ");
        assert_string_equal(tide_api_out_finish_reason(o), "stop");
        if (!stream) {
            assert_int_equal(ev.n, 0);
            char *js = tide_api_out_response(o, &st);
            json_t *v = json_loads(js, 0, NULL);
            assert_string_equal(json_string_value(json_object_get(v, "object")), "text_completion");
            json_t *c = json_array_get(json_object_get(v, "choices"), 0);
            assert_string_equal(json_string_value(json_object_get(c, "text")), tide_api_out_content(o, &len));
            assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "stop");
            assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "usage"), "total_tokens")), 7);
            json_decref(v);
            free(js);
        } else {
            assert_true(ev.n >= 4);
            assert_string_equal(ev.data[ev.n - 1], "[DONE]");
            json_t *usage = json_loads(ev.data[ev.n - 2], 0, NULL);
            assert_int_equal(json_integer_value(json_object_get(json_object_get(usage, "usage"), "completion_tokens")), 5);
            assert_int_equal(json_array_size(json_object_get(usage, "choices")), 0);
            json_decref(usage);
            json_t *fin = json_loads(ev.data[ev.n - 3], 0, NULL);
            json_t *c = json_array_get(json_object_get(fin, "choices"), 0);
            assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "stop");
            json_decref(fin);
            json_t *first = json_loads(ev.data[0], 0, NULL);
            assert_string_equal(json_string_value(json_object_get(first, "object")), "text_completion");
            assert_string_equal(json_string_value(json_object_get(first, "id")), "cmpl-1");
            json_decref(first);
        }
        tide_api_out_free(o);
        tide_api_req_free(&r);
    }
}

static void test_chat_logprobs(void **state) {
    (void)state;
    tide_api_req r = parse_ok(TIDE_API_CHAT, "{" MSGS ",\"logprobs\":true,\"top_logprobs\":5}");
    assert_true(r.gen.logprobs);
    assert_int_equal(r.gen.top_logprobs, 5);
    tide_api_req_free(&r);
    /* the output: entries in the response, and streamed with the next chunk */
    for (int stream = 0; stream < 2; stream++) {
        r = parse_ok(TIDE_API_CHAT, stream ? "{" MSGS ",\"logprobs\":true,\"stream\":true}" : "{" MSGS ",\"logprobs\":true}");
        events ev = {0};
        tide_api_out *o;
        tide_status st = {0};
        assert_int_equal(tide_api_out_new(&r, 0, "c1", 1, sink_any, &ev, &o, &st), 0);
        const uint8_t *alt[1] = {(const uint8_t *)"b"};
        size_t alt_len[1] = {1};
        float alt_lp[1] = {-2.5f};
        assert_int_equal(tide_api_out_logprob(o, (const uint8_t *)"\xe4", 1, -0.5f, alt, alt_len, alt_lp, 1, &st), 0);
        assert_int_equal(tide_api_out_text(o, "hi", 2, &st), 0);
        assert_int_equal(tide_api_out_finish(o, TIDE_GEN_STOP, NULL, &st), 0);
        const char *body = NULL;
        char *resp = NULL;
        if (stream) {
            for (int i = 0; i < ev.n && !body; i++)
                if (strstr(ev.data[i], "\"content\":\"hi\"")) body = ev.data[i];
        } else {
            body = resp = tide_api_out_response(o, &st);
        }
        assert_non_null(body);
        json_t *v = json_loads(body, 0, NULL);
        json_t *e = json_array_get(json_object_get(json_object_get(json_array_get(json_object_get(v, "choices"), 0),
                                                                   "logprobs"), "content"), 0);
        assert_non_null(e);
        assert_true(json_real_value(json_object_get(e, "logprob")) == -0.5);
        assert_int_equal(json_integer_value(json_array_get(json_object_get(e, "bytes"), 0)), 0xe4);
        assert_string_equal(json_string_value(json_object_get(e, "token")), "\xef\xbf\xbd"); /* a partial character */
        json_t *alt0 = json_array_get(json_object_get(e, "top_logprobs"), 0);
        assert_string_equal(json_string_value(json_object_get(alt0, "token")), "b");
        json_decref(v);
        free(resp);
        tide_api_out_free(o);
        tide_api_req_free(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_sampling),
        cmocka_unit_test(test_chat_sampling_errors),
        cmocka_unit_test(test_completions_request),
        cmocka_unit_test(test_completions_output),
        cmocka_unit_test(test_chat_logprobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
