/* The constraint extensions of request bodies (src/api/req_guided.c):
 * guided_regex / guided_json / guided_grammar / guided_choice and
 * structured_outputs set one constraint; two are refused naming both; bad
 * values name the field; guided_choice escapes regex syntax so each choice
 * matches itself only. */
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "constrain/constrain.h"
#include "testutil.h"

static void parse_ok(const char *body, tide_api_req *req) {
    tide_api_err err = {0};
    if (tide_api_parse(TIDE_API_CHAT, body, strlen(body), req, &err) != 0) {
        fprintf(stderr, "%s: %s\n", body, err.st.msg);
        fail();
    }
}

static void parse_bad(const char *body, const char *needle) {
    tide_api_req req;
    tide_api_err err = {0};
    int rc = tide_api_parse(TIDE_API_CHAT, body, strlen(body), &req, &err);
    if (rc == 0 || !strstr(err.st.msg, needle)) fprintf(stderr, "%s -> %d \"%s\", want \"%s\"\n", body, rc, err.st.msg, needle);
    assert_int_equal(rc, -1);
    assert_int_equal(err.http_status, 400);
    assert_non_null(strstr(err.st.msg, needle));
}

#define MSG "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]"

static void test_fields(void **state) {
    (void)state;
    tide_api_req req;
    parse_ok("{" MSG ", \"guided_regex\": \"a+\"}", &req);
    assert_int_equal(req.gen.guided, 1 + TIDE_CONS_REGEX);
    assert_string_equal(req.gen.guided_text, "a+");
    tide_api_req_free(&req);
    parse_ok("{" MSG ", \"guided_json\": {\"type\": \"integer\"}}", &req);
    assert_int_equal(req.gen.guided, 1 + TIDE_CONS_JSON_SCHEMA);
    assert_string_equal(req.gen.guided_text, "{\"type\":\"integer\"}");
    tide_api_req_free(&req);
    parse_ok("{" MSG ", \"structured_outputs\": {\"grammar\": \"root ::= \\\"a\\\"\"}}", &req);
    assert_int_equal(req.gen.guided, 1 + TIDE_CONS_GBNF);
    assert_string_equal(req.gen.guided_param, "structured_outputs.grammar");
    tide_api_req_free(&req);
    parse_ok("{" MSG ", \"guided_grammar\": \"start: \\\"a\\\" NAME\\nNAME: /[a-z]+/\"}", &req); /* Lark: no ::= */
    assert_int_equal(req.gen.guided, 1 + TIDE_CONS_LARK);
    assert_string_equal(req.gen.guided_text, "start: \"a\" NAME\nNAME: /[a-z]+/");
    tide_api_req_free(&req);
    /* choices with regex syntax match themselves only */
    parse_ok("{" MSG ", \"guided_choice\": [\"a.b\", \"(x)?\", \"1+1\"]}", &req);
    assert_int_equal(req.gen.guided, 1 + TIDE_CONS_REGEX);
    tide_cons_grammar *g = NULL;
    tide_status st = {0};
    assert_int_equal(tide_cons_compile(TIDE_CONS_REGEX, req.gen.guided_text, strlen(req.gen.guided_text), &g, &st), 0);
    assert_int_equal(tide_cons_grammar_matches(g, "a.b", 3, &st), 1);
    assert_int_equal(tide_cons_grammar_matches(g, "axb", 3, &st), 0);
    assert_int_equal(tide_cons_grammar_matches(g, "(x)?", 4, &st), 1);
    assert_int_equal(tide_cons_grammar_matches(g, "x", 1, &st), 0);
    assert_int_equal(tide_cons_grammar_matches(g, "1+1", 3, &st), 1);
    assert_int_equal(tide_cons_grammar_matches(g, "11", 2, &st), 0);
    tide_cons_grammar_unref(g);
    tide_api_req_free(&req);
    /* refusals */
    parse_bad("{" MSG ", \"guided_regex\": \"a\", \"guided_json\": {}}", "only one output constraint");
    parse_bad("{" MSG ", \"guided_regex\": 3}", "guided_regex: expected string");
    parse_bad("{" MSG ", \"guided_choice\": []}", "guided_choice: expected a non-empty array");
    parse_bad("{" MSG ", \"guided_choice\": [\"a\", 2]}", "guided_choice[1]");
    parse_bad("{" MSG ", \"structured_outputs\": {\"xml\": \"x\"}}", "structured_outputs.xml");
    parse_bad("{" MSG ", \"guided_json\": [1]}", "guided_json: expected a JSON schema");
}

/* "strict": true on a tool is read by all three APIs (a constraint with
 * tool_choice auto, docs/structured.md); absent or false is not strict. */
static void test_strict_tools(void **state) {
    (void)state;
    static const struct { tide_api_kind k; const char *body; } cases[] = {
        {TIDE_API_CHAT, "{" MSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\", \"strict\": true, "
                        "\"parameters\": {\"type\": \"object\"}}}, {\"type\": \"function\", \"function\": {\"name\": \"b\"}}]}"},
        {TIDE_API_RESPONSES, "{\"input\": \"x\", \"tools\": [{\"type\": \"function\", \"name\": \"a\", \"strict\": true, "
                             "\"parameters\": {\"type\": \"object\"}}, {\"type\": \"function\", \"name\": \"b\", \"strict\": false}]}"},
        {TIDE_API_MESSAGES, "{\"model\": \"m\", \"max_tokens\": 5, " MSG ", \"tools\": [{\"name\": \"a\", \"strict\": true, "
                            "\"input_schema\": {\"type\": \"object\"}}, {\"name\": \"b\", \"input_schema\": {\"type\": \"object\"}}]}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tide_api_req req;
        tide_api_err err = {0};
        if (tide_api_parse(cases[i].k, cases[i].body, strlen(cases[i].body), &req, &err) != 0) {
            fprintf(stderr, "%s: %s\n", cases[i].body, err.st.msg);
            fail();
        }
        assert_int_equal(req.conv.n_tools, 2);
        assert_int_equal(req.gen.tool_choice, TIDE_TOOLS_AUTO);
        assert_int_equal(req.conv.tools[0].strict, 1);
        assert_int_equal(req.conv.tools[1].strict, 0);
        tide_api_req_free(&req);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fields), cmocka_unit_test(test_strict_tools)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
