/* Request conversion for the three APIs: fields -> conversation and
 * settings, the same conversation rendering the same prompt through every
 * API, and invalid requests answered in each API's own error shape with the
 * offending field named. */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "testutil.h"
#include "text/render.h"

static tide_api_req parse_ok(tide_api_kind kind, const char *body) {
    tide_api_req req;
    tide_api_err err;
    if (tide_api_parse(kind, body, strlen(body), &req, &err) != 0) fail_msg("unexpected error: %s", err.st.msg);
    return req;
}

static char *render(const tide_api_req *req) {
    tide_prompt p;
    tide_status st = {0};
    if (tide_render(&req->conv, &p, &st) != 0) fail_msg("render: %s", st.msg);
    char *text = strdup(p.text);
    tide_prompt_free(&p);
    return text;
}

/* Parses an invalid request; checks the message and the API's error shape. */
static void expect_error(tide_api_kind kind, const char *body, const char *param, const char *msg_part) {
    tide_api_req req;
    tide_api_err err;
    assert_int_equal(tide_api_parse(kind, body, strlen(body), &req, &err), -1);
    if (!strstr(err.st.msg, msg_part)) fail_msg("error \"%s\" lacks \"%s\"", err.st.msg, msg_part);
    assert_int_equal(req.conv.n_msgs, 0); /* nothing leaks into the request */
    char *js = tide_api_error_json(kind, &err);
    assert_non_null(js);
    json_t *e = json_loads(js, 0, NULL);
    assert_non_null(e);
    if (kind == TIDE_API_MESSAGES) {
        assert_string_equal(json_string_value(json_object_get(e, "type")), "error");
        json_t *in = json_object_get(e, "error");
        assert_non_null(json_string_value(json_object_get(in, "type")));
        assert_non_null(strstr(json_string_value(json_object_get(in, "message")), msg_part));
    } else {
        json_t *in = json_object_get(e, "error");
        assert_non_null(strstr(json_string_value(json_object_get(in, "message")), msg_part));
        assert_string_equal(json_string_value(json_object_get(in, "type")), "invalid_request_error");
        if (param) assert_string_equal(json_string_value(json_object_get(in, "param")), param);
        else assert_true(json_is_null(json_object_get(in, "param")));
        assert_non_null(json_object_get(in, "code"));
    }
    if (param && *param) {
        assert_string_equal(err.param, param);
        assert_memory_equal(err.st.msg, param, strlen(param)); /* the message starts with the field */
    }
    json_decref(e);
    free(js);
    tide_api_req_free(&req);
}

static void test_chat_fields(void **state) {
    (void)state;
    tide_api_req r = parse_ok(TIDE_API_CHAT,
        "{\"model\":\"ds\",\"messages\":[{\"role\":\"developer\",\"content\":\"sys\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
        "\"temperature\":0.3,\"top_p\":0.9,\"top_k\":40,\"max_completion_tokens\":100,\"stop\":[\"x\",\"yy\"],"
        "\"seed\":-7,\"stream\":true,\"stream_options\":{\"include_usage\":true},\"presence_penalty\":0.5}");
    assert_string_equal(r.gen.model, "ds");
    assert_true(r.gen.temperature == 0.3 && r.gen.top_p == 0.9 && r.gen.top_k == 40);
    assert_int_equal(r.gen.max_tokens, 100);
    assert_int_equal(r.gen.n_stop, 2);
    assert_string_equal(r.gen.stop[1], "yy");
    assert_true(r.gen.has_seed && r.gen.seed == (uint64_t)-7);
    assert_true(r.gen.stream && r.gen.include_usage);
    assert_int_equal(r.conv.n_msgs, 2);
    assert_int_equal(r.conv.msgs[0].role, TIDE_ROLE_SYSTEM);
    assert_string_equal(r.conv.msgs[1].content, "a\n\nb");
    assert_int_equal(r.conv.thinking, 0);
    char *p = render(&r);
    assert_string_equal(p, TIDE_TOK_BOS TIDE_TOK_SYSTEM "sys" TIDE_TOK_USER "a\n\nb" TIDE_TOK_ASSISTANT "</think>");
    free(p);
    tide_api_req_free(&r);

    r = parse_ok(TIDE_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}");
    assert_int_equal(r.gen.max_tokens, 8192);
    assert_true(r.gen.temperature == 1.0 && r.gen.top_p == 1.0 && r.gen.top_k == 0 && !r.gen.stream);
    tide_api_req_free(&r);
}

static void test_chat_thinking(void **state) {
    (void)state;
    static const struct { const char *extra; int thinking, effort; } CASES[] = {
        {"", 0, 75},
        {",\"reasoning_effort\":\"max\"", 1, 100},
        {",\"reasoning_effort\":\"low\"", 1, 50},
        {",\"reasoning_effort\":\"xhigh\"", 1, 100},
        {",\"reasoning_effort\":\"none\"", 0, 75},
        {",\"reasoning_effort\":37", 1, 37},
        {",\"thinking\":{\"type\":\"enabled\"}", 1, 75},
        {",\"thinking\":{\"type\":\"disabled\"},\"reasoning_effort\":\"max\"", 0, 100},
        {",\"thinking\":{\"type\":\"enabled\"},\"reasoning_effort\":\"none\"", 1, 75},
        {",\"chat_template_kwargs\":{\"thinking\":true}", 1, 75},
        {",\"chat_template_kwargs\":{\"enable_thinking\":true,\"reasoning_effort\":\"low\"}", 1, 50},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]%s}", CASES[i].extra);
        tide_api_req r = parse_ok(TIDE_API_CHAT, body);
        if (r.conv.thinking != CASES[i].thinking || r.conv.effort != CASES[i].effort)
            fail_msg("case %zu: thinking %d effort %d", i, r.conv.thinking, r.conv.effort);
        assert_int_equal(r.gen.max_tokens, CASES[i].thinking ? 65536 : 8192);
        tide_api_req_free(&r);
    }
}

static void test_chat_tools_history(void **state) {
    (void)state;
    tide_api_req r = parse_ok(TIDE_API_CHAT,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"go\"},"
        "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"think\",\"tool_calls\":["
        "{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}},"
        "{\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"b\",\"content\":\"B\"},{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"A\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"g\",\"description\":\"G\"}}],"
        "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}},"
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":\"object\"}}}}");
    assert_int_equal(r.gen.tool_choice, TIDE_TOOLS_NAMED);
    assert_int_equal(r.conv.n_tools, 1);
    assert_string_equal(r.conv.tools[0].name, "g");
    assert_int_equal(r.gen.format, TIDE_FMT_JSON_SCHEMA);
    assert_string_equal(json_string_value(json_object_get(r.gen.json_schema, "type")), "object");
    assert_int_equal(r.conv.msgs[1].n_calls, 2);
    assert_string_equal(r.conv.msgs[1].reasoning, "think");
    char *p = render(&r);
    assert_non_null(strstr(p, "<tool_result>A</tool_result>\n\n<tool_result>B</tool_result>"));
    assert_non_null(strstr(p, "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
                              "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"n\", \"schema\": {\"type\": \"object\"}}}"));
    assert_non_null(strstr(p, "{\"name\": \"g\", \"description\": \"G\"}"));
    assert_null(strstr(p, "{\"name\": \"f\""));
    free(p);
    tide_api_req_free(&r);

    r = parse_ok(TIDE_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tool_choice\":\"none\","
                                "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}");
    assert_int_equal(r.conv.n_tools, 0);
    tide_api_req_free(&r);
}

static void test_chat_errors(void **state) {
    (void)state;
    const tide_api_kind C = TIDE_API_CHAT;
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"},"
                    "{\"role\":\"user\",\"content\":5}]}",
                 "messages[2].content", "messages[2].content: expected string or array, got integer");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
                 "messages[0].content[0].image_url.url", "expected a data: URL");
    expect_error(C, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"a\"}]}", "messages[0].role", "unknown role");
    expect_error(C, "{\"messages\":[]}", "messages", "at least one message");
    expect_error(C, "{}", "messages", "required");
    expect_error(C, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", "required");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"temperature\":3}", "temperature", "outside");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"temperature\":\"hot\"}", "temperature",
                 "expected number, got string");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":17}", "n", "outside [1, 16]");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":0}", "max_tokens", "outside");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"stop\":[\"a\",2]}", "stop[1]", "expected string");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"stop\":[\"\"]}", "stop[0]", "1 to 256 bytes");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\","
                    "\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}", "stop", "at most 16");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"reasoning_effort\":\"extreme\"}",
                 "reasoning_effort", "unknown reasoning effort");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"reasoning_effort\":0}", "reasoning_effort",
                 "1..100");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"function\","
                    "\"function\":{\"name\":\"bad name\"}}]}", "tools[0].function.name", "outside [A-Za-z0-9_.:-]");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tool_choice\":\"required\"}", "tool_choice",
                 "defines none");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"function\","
                    "\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"h\"}}}",
                 "tool_choice", "no tool named");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"yaml\"}}",
                 "response_format.type", "expected text, json_object or json_schema");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", NULL,
                 "is not allowed"); /* NUL never reaches a C string */
    expect_error(C, "[1,2]", NULL, "must be a JSON object");
    expect_error(C, "{\"messages\": [", NULL, "invalid JSON");
    /* nesting */
    char deep[400] = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"x\":";
    for (int i = 0; i < 70; i++) strcat(deep, "[");
    for (int i = 0; i < 70; i++) strcat(deep, "]");
    strcat(deep, "}");
    expect_error(C, deep, NULL, "nested deeper than 64");
    /* size */
    size_t big = TIDE_API_MAX_BODY + 1;
    char *body = malloc(big);
    memset(body, ' ', big);
    tide_api_req req;
    tide_api_err err;
    assert_int_equal(tide_api_parse(C, body, big, &req, &err), -1);
    assert_int_equal(err.http_status, 413);
    free(body);
    tide_api_req_free(&req);
}

static const char *const SAME_CHAT =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},"
    "{\"role\":\"assistant\",\"content\":\"A1\",\"reasoning_content\":\"R1\",\"tool_calls\":[{\"id\":\"c1\",\"type\":"
    "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"k\\\":\\\"v\\\",\\\"n\\\":2}\"}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"OUT\"},{\"role\":\"user\",\"content\":\"U2\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"F\",\"parameters\":{\"type\":\"object\"}}}],"
    "\"reasoning_effort\":\"low\"}";
static const char *const SAME_RESPONSES =
    "{\"instructions\":\"S\",\"input\":[{\"role\":\"user\",\"content\":\"U1\"},"
    "{\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"R1\"}]},"
    "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"A1\"}]},"
    "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{\\\"k\\\":\\\"v\\\",\\\"n\\\":2}\"},"
    "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"OUT\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"U2\"}]}],"
    "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"description\":\"F\",\"parameters\":{\"type\":\"object\"}}],"
    "\"reasoning\":{\"effort\":\"low\"}}";
static const char *const SAME_MESSAGES =
    "{\"model\":\"m\",\"max_tokens\":10,\"system\":[{\"type\":\"text\",\"text\":\"S\"}],\"messages\":["
    "{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"R1\","
    "\"signature\":\"x\"},{\"type\":\"text\",\"text\":\"A1\"},{\"type\":\"tool_use\",\"id\":\"c1\",\"name\":\"f\","
    "\"input\":{\"k\":\"v\",\"n\":2}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"c1\","
    "\"content\":[{\"type\":\"text\",\"text\":\"OUT\"}]},{\"type\":\"text\",\"text\":\"U2\"}]}],"
    "\"tools\":[{\"name\":\"f\",\"description\":\"F\",\"input_schema\":{\"type\":\"object\"}}],"
    "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1000},\"output_config\":{\"effort\":\"low\"}}";

static void test_same_prompt_all_apis(void **state) {
    (void)state;
    tide_api_req a = parse_ok(TIDE_API_CHAT, SAME_CHAT), b = parse_ok(TIDE_API_RESPONSES, SAME_RESPONSES),
                 c = parse_ok(TIDE_API_MESSAGES, SAME_MESSAGES);
    char *pa = render(&a), *pb = render(&b), *pc = render(&c);
    assert_string_equal(pa, pb);
    assert_string_equal(pa, pc);
    assert_non_null(strstr(pa, "Reasoning Effort: 50 "));
    assert_non_null(strstr(pa, TIDE_TOK_ASSISTANT "<think>R1</think>A1\n\n" TIDE_DSML_CALLS_OPEN "\n"
                               TIDE_DSML_INVOKE_OPEN "f\">\n" TIDE_DSML_PARAM_OPEN "k\" string=\"true\">v" TIDE_DSML_PARAM_CLOSE
                               "\n" TIDE_DSML_PARAM_OPEN "n\" string=\"false\">2" TIDE_DSML_PARAM_CLOSE));
    assert_non_null(strstr(pa, TIDE_TOK_USER "<tool_result>OUT</tool_result>\n\nU2" TIDE_TOK_ASSISTANT "<think>"));
    assert_int_equal(c.gen.max_tokens, 10);
    assert_int_equal(a.gen.max_tokens, 65536);
    free(pa), free(pb), free(pc);
    tide_api_req_free(&a), tide_api_req_free(&b), tide_api_req_free(&c);
}

static void test_responses(void **state) {
    (void)state;
    tide_api_req r = parse_ok(TIDE_API_RESPONSES, "{\"model\":\"m\",\"input\":\"hi\",\"max_output_tokens\":50,"
                                                  "\"text\":{\"format\":{\"type\":\"json_object\"}},\"stream\":true}");
    assert_int_equal(r.conv.n_msgs, 1);
    assert_int_equal(r.gen.max_tokens, 50);
    assert_int_equal(r.gen.format, TIDE_FMT_JSON_OBJECT);
    assert_int_equal(r.conv.thinking, 0);
    assert_true(r.gen.stream);
    tide_api_req_free(&r);
    r = parse_ok(TIDE_API_RESPONSES, "{\"input\":\"hi\",\"reasoning\":{\"summary\":\"auto\"}}");
    assert_int_equal(r.conv.thinking, 1);
    assert_int_equal(r.conv.effort, 75);
    tide_api_req_free(&r);
    r = parse_ok(TIDE_API_RESPONSES, "{\"input\":\"hi\",\"reasoning\":{\"effort\":\"none\"}}");
    assert_int_equal(r.conv.thinking, 0);
    tide_api_req_free(&r);
    const tide_api_kind R = TIDE_API_RESPONSES;
    expect_error(R, "{\"input\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":7}]}",
                 "input[1].content", "input[1].content: expected string or array, got integer");
    expect_error(R, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}",
                 "input[0].content[0].image_url", "expected a data: URL");
    expect_error(R, "{\"input\":\"a\",\"previous_response_id\":\"resp_1\"}", "previous_response_id", "no response state");
    expect_error(R, "{\"input\":\"a\",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0].type", "only function tools");
    expect_error(R, "{\"input\":\"a\",\"max_output_tokens\":-1}", "max_output_tokens", "outside");
    expect_error(R, "{\"input\":\"a\",\"text\":{\"format\":{\"type\":\"json_schema\"}}}", "text.format.schema", "required");
    expect_error(R, "{\"model\":\"m\"}", "input", "required");
    expect_error(R, "{\"input\":[{\"type\":\"mystery\"}]}", "input[0].type", "not supported");
}

/* Image parts (docs/vision.md): the bytes of data: URLs and base64 sources
 * land in the conversation, a placeholder where each part was (rendered as
 * markup, so it becomes the image token); remote URLs, bad base64, other
 * media types, images outside user messages and a client's own placeholder
 * are refused with the field's path. Random bytes per run. */
static void test_images(void **state) {
    (void)state;
    static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    tu_rng g = {tu_seed() | 1};
    unsigned char raw[48];
    char b64[65], body[1024];
    for (int i = 0; i < 48; i++) raw[i] = (unsigned char)tu_next(&g);
    for (int i = 0; i < 16; i++) { /* 3 bytes -> 4 characters */
        uint32_t v = (uint32_t)raw[3 * i] << 16 | (uint32_t)raw[3 * i + 1] << 8 | raw[3 * i + 2];
        for (int k = 0; k < 4; k++) b64[4 * i + k] = B64[(v >> (18 - 6 * k)) & 63];
    }
    b64[64] = 0;
    const char *ph = TIDE_CONV_IMAGE_PLACEHOLDER;
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
             "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,%s\"}}]}]}", b64);
    tide_api_req r = parse_ok(TIDE_API_CHAT, body);
    assert_int_equal(r.conv.n_images, 1);
    assert_int_equal(r.conv.images[0].n, 48);
    assert_memory_equal(r.conv.images[0].data, raw, 48);
    assert_non_null(strstr(r.conv.msgs[0].content, ph));
    tide_prompt p;
    tide_status st = {0};
    assert_int_equal(tide_render(&r.conv, &p, &st), 0);
    const char *at = strstr(p.text, ph);
    assert_non_null(at);
    for (size_t i = 0; i < p.n_plain; i++) /* the placeholder is markup, not client text */
        assert_true((size_t)(at - p.text) + strlen(ph) <= p.plain[i].off ||
                    p.plain[i].off + p.plain[i].len <= (size_t)(at - p.text));
    tide_prompt_free(&p);
    tide_api_req_free(&r);
    snprintf(body, sizeof body, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\","
             "\"image_url\":\"data:image/jpeg;base64,%s\"}]}]}", b64);
    r = parse_ok(TIDE_API_RESPONSES, body);
    assert_int_equal(r.conv.n_images, 1);
    assert_memory_equal(r.conv.images[0].data, raw, 48);
    tide_api_req_free(&r);
    snprintf(body, sizeof body, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
             "\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"%s\"}},{\"type\":\"text\","
             "\"text\":\"b\"}]}]}", b64);
    r = parse_ok(TIDE_API_MESSAGES, body);
    assert_int_equal(r.conv.n_images, 1);
    assert_memory_equal(r.conv.images[0].data, raw, 48);
    tide_api_req_free(&r);

    const tide_api_kind C = TIDE_API_CHAT, M = TIDE_API_MESSAGES;
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
                    "{\"url\":\"https://example.com/a.png\"}}]}]}", "messages[0].content[0].image_url.url",
                 "no network access");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
                    "{\"url\":\"data:image/png;base64,AB$C\"}}]}]}", "messages[0].content[0].image_url.url",
                 "not valid base64 (at byte 2)");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
                    "{\"url\":\"data:text/plain;base64,QUJD\"}}]}]}", "messages[0].content[0].image_url.url",
                 "not an image");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
                    "{\"url\":\"data:image/png,QUJD\"}}]}]}", "messages[0].content[0].image_url.url", "not base64");
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":"
                    "[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,QUJD\"}}]}]}",
                 "messages[1].content[0]", "only in user messages");
    /* a client's own placeholder next to a real image part */
    expect_error(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"<\xef\xbd\x9c"
                    "deepseek_image\xef\xbd\x9c>\"},{\"type\":\"image_url\",\"image_url\":{\"url\":"
                    "\"data:image/png;base64,QUJD\"}}]}]}", "messages[0].content", "image placeholder");
    expect_error(M, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":"
                    "{\"type\":\"url\",\"url\":\"https://example.com/a.png\"}}]}]}",
                 "messages[0].content[0].source.type", "no network access");
    expect_error(M, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":"
                    "{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"\"}}]}]}",
                 "messages[0].content[0].source.data", "empty");
}

static void test_messages(void **state) {
    (void)state;
    tide_api_req r = parse_ok(TIDE_API_MESSAGES,
        "{\"model\":\"m\",\"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
        "\"stop_sequences\":[\"END\"],\"temperature\":0.5,\"top_k\":5,\"tool_choice\":{\"type\":\"any\","
        "\"disable_parallel_tool_use\":true},\"tools\":[{\"name\":\"t\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"output_format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\"}}}");
    assert_int_equal(r.gen.max_tokens, 64);
    assert_string_equal(r.gen.stop[0], "END");
    assert_int_equal(r.gen.top_k, 5);
    assert_int_equal(r.gen.tool_choice, TIDE_TOOLS_REQUIRED);
    assert_int_equal(r.gen.parallel_tool_calls, 0);
    assert_int_equal(r.gen.format, TIDE_FMT_JSON_SCHEMA);
    assert_int_equal(r.conv.thinking, 0);
    tide_api_req_free(&r);
    const tide_api_kind M = TIDE_API_MESSAGES;
    expect_error(M, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                    "{\"type\":\"image\",\"source\":{}}]}]}", "messages[0].content[1].source.type",
                 "messages[0].content[1].source.type: expected \"base64\"");
    expect_error(M, "{\"messages\":[{\"role\":\"system\",\"content\":\"a\"}]}", "messages[0].role", "expected \"user\" or \"assistant\"");
    expect_error(M, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"temperature\":1.5}", "temperature", "outside");
    expect_error(M, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"web_search_20250305\","
                    "\"name\":\"web_search\"}]}", "tools[0].type", "server tool");
    expect_error(M, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"thinking\":{\"type\":\"sometimes\"}}",
                 "thinking.type", "expected");
    expect_error(M, "{\"messages\":[{\"role\":\"user\",\"content\":{\"a\":1}}]}", "messages[0].content", "expected string or array");
}

/* The release's rules the comparison test (test_render_release) covers in
 * bulk, checked here through each API by name. */
static void test_release_rules(void **state) {
    (void)state;
    const char *EOS = TIDE_TOK_EOS;
    /* A final assistant message is closed unless continuation is asked for. */
    const char *conv = "\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"A\"}]";
    char body[512];
    snprintf(body, sizeof body, "{%s}", conv);
    tide_api_req r = parse_ok(TIDE_API_CHAT, body);
    char *p = render(&r);
    assert_string_equal(p + strlen(p) - strlen(EOS) - 1, "A" TIDE_TOK_EOS); /* the release's rule */
    free(p), tide_api_req_free(&r);
    snprintf(body, sizeof body, "{%s,\"continue_final_message\":true}", conv);
    r = parse_ok(TIDE_API_CHAT, body);
    p = render(&r);
    assert_string_equal(p + strlen(p) - strlen(TIDE_TOK_ASSISTANT "</think>A"), TIDE_TOK_ASSISTANT "</think>A");
    free(p), tide_api_req_free(&r);
    /* Anthropic: a final assistant message is a prefill, continued. */
    snprintf(body, sizeof body, "{\"max_tokens\":5,%s}", conv);
    r = parse_ok(TIDE_API_MESSAGES, body);
    p = render(&r);
    assert_int_equal(p[strlen(p) - 1], 'A');
    free(p), tide_api_req_free(&r);
    /* Tool definitions as sent: key order and extra keys kept (Responses: less "type"). */
    r = parse_ok(TIDE_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":[{\"type\":\"function\","
                                "\"function\":{\"strict\":true,\"name\":\"f\",\"x\":[1.0]}}]}");
    p = render(&r);
    assert_non_null(strstr(p, "\n\n{\"strict\": true, \"name\": \"f\", \"x\": [1.0]}\n\n"));
    free(p), tide_api_req_free(&r);
    r = parse_ok(TIDE_API_RESPONSES, "{\"input\":\"q\",\"tools\":[{\"name\":\"f\",\"type\":\"function\",\"strict\":false}]}");
    p = render(&r);
    assert_non_null(strstr(p, "\n\n{\"name\": \"f\", \"strict\": false}\n\n"));
    free(p), tide_api_req_free(&r);
    /* Arguments with numbers jansson cannot hold, rendered as Python does. */
    r = parse_ok(TIDE_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"\","
                                "\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
                                "\"{\\\"n\\\": 123456789012345678901234567890, \\\"i\\\": [1e400, NaN]}\"}}]}]}");
    p = render(&r);
    assert_non_null(strstr(p, "name=\"n\" string=\"false\">123456789012345678901234567890<"));
    assert_non_null(strstr(p, "name=\"i\" string=\"false\">[Infinity, NaN]<"));
    free(p), tide_api_req_free(&r);
    /* Refused as the release refuses: no arguments, a literal image placeholder. */
    expect_error(TIDE_API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"type\":"
                 "\"function\",\"function\":{\"name\":\"f\"}}]}]}", "messages[0].tool_calls[0].function.arguments", "required");
    expect_error(TIDE_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a<\xef\xbd\x9c" "deepseek_image\xef\xbd\x9c>\"}]}",
                 "messages[0].content", "image placeholder");
    /* null system content reads as empty, as in the release. */
    r = parse_ok(TIDE_API_CHAT, "{\"messages\":[{\"role\":\"system\",\"content\":null},{\"role\":\"user\",\"content\":\"q\"}]}");
    p = render(&r);
    assert_string_equal(p, TIDE_TOK_BOS TIDE_TOK_SYSTEM TIDE_TOK_USER "q" TIDE_TOK_ASSISTANT "</think>");
    free(p), tide_api_req_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_fields),   cmocka_unit_test(test_chat_thinking),
        cmocka_unit_test(test_chat_tools_history), cmocka_unit_test(test_chat_errors),
        cmocka_unit_test(test_same_prompt_all_apis), cmocka_unit_test(test_responses),
        cmocka_unit_test(test_messages),      cmocka_unit_test(test_images),      cmocka_unit_test(test_release_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
