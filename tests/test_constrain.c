/* src/constrain: regexes and JSON Schemas accept what they should and
 * reject the rest; unsupported input gets a clear error; the token mask
 * equals a brute-force check of every token on random vocabularies and
 * random positions; rollback restores the exact state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/constrain.h"
#include "constrain/schema.h"
#include "testutil.h"
#include "cons_testutil.h"

static tide_cons_grammar *compile_ok(tide_cons_kind k, const char *text) {
    tide_cons_grammar *g = NULL;
    tide_status st = {0};
    if (tide_cons_compile(k, text, strlen(text), &g, &st) != 0) {
        fprintf(stderr, "compile failed: %s: %s\n", text, st.msg);
        fail();
    }
    return g;
}

static int matches(tide_cons_grammar *g, const char *s) {
    tide_status st = {0};
    int r = tide_cons_grammar_matches(g, s, strlen(s), &st);
    if (r < 0) fprintf(stderr, "match error: %s\n", st.msg);
    return r;
}

typedef struct { const char *re; const char *yes[8]; const char *no[8]; } rx_case;

/* Each constraint matches its yes strings in full and none of its no strings. */
static void check_table(tide_cons_kind kind, const rx_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        tide_cons_grammar *g = compile_ok(kind, cases[i].re);
        for (int k = 0; k < 8 && cases[i].yes[k]; k++) {
            if (matches(g, cases[i].yes[k]) != 1) fprintf(stderr, "[%s] should match \"%s\"\n", cases[i].re, cases[i].yes[k]);
            assert_int_equal(matches(g, cases[i].yes[k]), 1);
        }
        for (int k = 0; k < 8 && cases[i].no[k]; k++) {
            if (matches(g, cases[i].no[k]) != 0) fprintf(stderr, "[%s] should not match \"%s\"\n", cases[i].re, cases[i].no[k]);
            assert_int_equal(matches(g, cases[i].no[k]), 0);
        }
        tide_cons_grammar_unref(g);
    }
}

static void test_regex(void **state) {
    (void)state;
    static const rx_case cases[] = {
        {"abc", {"abc"}, {"ab", "abcd", "", "xabc"}},
        {"a|bc|", {"a", "bc", ""}, {"b", "abc"}},
        {"[a-c]+x?", {"a", "cbax", "b"}, {"", "x", "d", "ax x"}},
        {"[^a-c]", {"d", "\xc3\xa9", "\xf0\x9f\x98\x80", "\n"}, {"a", "", "dd"}},
        {"\\d{2,3}", {"12", "123"}, {"1", "1234", "ab"}},
        {"x{3}", {"xxx"}, {"xx", "xxxx"}},
        {"x{2,}", {"xx", "xxxxx"}, {"x"}},
        {"(ab)*c", {"c", "abc", "ababc"}, {"abac", "ab"}},
        {"(?:a|b)+?", {"a", "abba"}, {""}},
        {"\\w\\s\\W", {"a !", "_\t-"}, {"ab!", "a bc"}},
        {".", {"a", "\xe2\x82\xac"}, {"\n", "\r", "ab"}},
        {"^[0-9a-f]{4}$", {"00ff", "abcd"}, {"00fg", "12345"}},
        {"\\u00e9|\\x41|\\n", {"\xc3\xa9", "A", "\n"}, {"e"}},
        {"a{", {"a{"}, {"a"}},
        {"[\\d.-]+", {"1.5", "-2", "."}, {"a"}},
        {"(?<year>\\d{4})-\\d\\d", {"2024-01"}, {"24-01"}},
        {"\xce\xb1+\xce\xb2", {"\xce\xb1\xce\xb1\xce\xb2"}, {"\xce\xb2", "\xce\xb1"}},
    };
    check_table(TIDE_CONS_REGEX, cases, sizeof cases / sizeof cases[0]);
}

static void test_gbnf(void **state) {
    (void)state;
    static const rx_case cases[] = {
        {"root ::= \"a\" | \"b\" c\nc ::= [0-9]+", {"a", "b1", "b42"}, {"b", "ab", "c1"}},
        {"# a comment\nroot ::=\n  \"(\" ( item (\",\" item)* )? \")\"   # trailing\nitem ::= [a-z]{1,3}",
         {"()", "(a)", "(ab,cde)"}, {"(", "(abcd)", "(a,)"}},
        {"root ::= list\nlist ::= \"[\" (list | [^\\[\\]])* \"]\"", {"[]", "[[x]y]", "[[[]]]"}, {"[", "[]]", "x"}},
        {"root ::= \"\\u00e9\\x41\\n\" . [^a-c]", {"\xc3\xa9" "A\nzd", "\xc3\xa9" "A\n\xe2\x82\xac" "z"}, {"\xc3\xa9" "A\nza"}},
        {"root ::= (\"ab\"){2,3} \"x\"?", {"abab", "abababx"}, {"ab", "abababab"}},
    };
    check_table(TIDE_CONS_GBNF, cases, sizeof cases / sizeof cases[0]);
}

static void test_lark(void **state) {
    (void)state;
    static const rx_case cases[] = {
        {"start: expr\nexpr: term ((\"+\" | \"-\") term)*\nterm: NUMBER | \"(\" expr \")\"\n%import common.NUMBER\n%ignore WS\n"
         "%import common.WS",
         {"1+2", " 1 + ( 2.5e3 - 4 ) ", "(((7)))", ".5-1."}, {"1+", "(1", "1 2", "e3"}},
        {"// comment\nstart: \"a\"i \"b\"..\"d\"~2..3 [X] /[0-9]+/ -> alias\nX: \"x\"\n  | \"y\"  // more\n",
         {"Abc1", "abcdx9", "acby12"}, {"abx1", "abcdex1", "ab1"}},
        {"?start: item+\n!item.2: \"\\u00e9\" | /[a-c]/ | \"\\n\"", {"\xc3\xa9", "ab\nc"}, {"", "d"}},
        {"%import common (ESCAPED_STRING, SIGNED_NUMBER -> NUM, CNAME)\nstart: \"[\" [value (\",\" value)*] \"]\"\n"
         "value: ESCAPED_STRING | NUM | CNAME\n%ignore \" \"",
         {"[\"a\\\"b\", -1.5 ]", "[]", " [ x_1 ,2] "}, {"[\"a]", "[1,]", "[\"a\nb\"]"}},
        {"start: (\"ab\")~2 \"x\"~0..1", {"abab", "ababx"}, {"ab", "ababab"}},
    };
    check_table(TIDE_CONS_LARK, cases, sizeof cases / sizeof cases[0]);
    assert_int_equal(tide_cons_grammar_kind("root ::= \"a\"", 12), TIDE_CONS_GBNF);
    assert_int_equal(tide_cons_grammar_kind("start: \"a\"", 11), TIDE_CONS_LARK);
}

/* The same grammar written in GBNF and in Lark accepts the same strings:
 * random grammars over a small alphabet, random strings. */
static void test_lark_vs_gbnf(void **state) {
    (void)state;
    uint64_t seed = tu_seed();
    tu_rng r = {seed};
    static const char *const atoms_g[] = {"\"a\"", "\"b\"", "[a-c]", "\"ab\"", "x", "(\"c\" | \"a\")", "[^a]"};
    static const char *const atoms_l[] = {"\"a\"", "\"b\"", "\"a\"..\"c\"", "\"ab\"", "x", "(\"c\" | \"a\")", "/[^a]/"};
    static const char *const reps_g[] = {"", "*", "+", "?", "{2}", "{1,3}"};
    static const char *const reps_l[] = {"", "*", "+", "?", "~2", "~1..3"};
    for (int rep = 0; rep < 40; rep++) {
        char g1[512] = "root ::= ", l1[512] = "start: ";
        int parts = 1 + (int)(tu_next(&r) % 4);
        for (int p = 0; p < parts; p++) {
            int a = (int)(tu_next(&r) % 7), q = (int)(tu_next(&r) % 6);
            if (p && tu_next(&r) % 4 == 0) strcat(g1, " | "), strcat(l1, " | ");
            strcat(g1, atoms_g[a]), strcat(g1, reps_g[q]), strcat(g1, " ");
            strcat(l1, atoms_l[a]), strcat(l1, reps_l[q]), strcat(l1, " ");
        }
        strcat(g1, "\nx ::= \"b\" [a-b]?"), strcat(l1, "\nx: \"b\" /[a-b]/?");
        tide_cons_grammar *gg = compile_ok(TIDE_CONS_GBNF, g1), *gl = compile_ok(TIDE_CONS_LARK, l1);
        for (int k = 0; k < 200; k++) {
            char s[12];
            int n = (int)(tu_next(&r) % 8);
            for (int i = 0; i < n; i++) s[i] = "abcd"[tu_next(&r) % 4];
            s[n] = 0;
            int a = matches(gg, s), b = matches(gl, s);
            if (a != b) fprintf(stderr, "seed %llu: \"%s\": GBNF [%s] %d, Lark [%s] %d\n", (unsigned long long)seed, s, g1, a, l1, b);
            assert_int_equal(a, b);
        }
        tide_cons_grammar_unref(gg), tide_cons_grammar_unref(gl);
    }
}

static void test_tool_calls(void **state) {
    (void)state;
#define P_OPEN "<\xef\xbd\x9c" "DSML\xef\xbd\x9c parameter name=\""
#define P_CLOSE "</\xef\xbd\x9c" "DSML\xef\xbd\x9c parameter>"
#define I_OPEN "<\xef\xbd\x9c" "DSML\xef\xbd\x9c invoke name=\""
#define I_CLOSE "</\xef\xbd\x9c" "DSML\xef\xbd\x9c invoke>"
#define C_OPEN "<\xef\xbd\x9c" "DSML\xef\xbd\x9c calls>\n"
#define C_CLOSE "\n</\xef\xbd\x9c" "DSML\xef\xbd\x9c calls>"
    static const rx_case cases[] = {
        {"{\"parallel\":false,\"tools\":[{\"name\":\"w\",\"parameters\":{\"type\":\"object\",\"properties\":{"
         "\"city\":{\"type\":\"string\",\"maxLength\":5},\"n\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7},"
         "\"u\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\",\"n\"]}},{\"name\":\"z\"}]}",
         {C_OPEN I_OPEN "w\">\n" P_OPEN "city\" string=\"true\">Paris" P_CLOSE "\n" P_OPEN "n\" string=\"false\">3" P_CLOSE
          "\n" I_CLOSE C_CLOSE,
          C_OPEN I_OPEN "w\">\n" P_OPEN "city\" string=\"true\">" P_CLOSE "\n" P_OPEN "n\" string=\"false\">7" P_CLOSE "\n"
          P_OPEN "u\" string=\"true\">f" P_CLOSE "\n" I_CLOSE C_CLOSE,
          C_OPEN I_OPEN "z\">\n\n" I_CLOSE C_CLOSE},
         {C_OPEN I_OPEN "w\">\n" P_OPEN "n\" string=\"false\">3" P_CLOSE "\n" I_CLOSE C_CLOSE, /* city missing */
          C_OPEN I_OPEN "w\">\n" P_OPEN "city\" string=\"true\">Paris!" P_CLOSE "\n" P_OPEN "n\" string=\"false\">3" P_CLOSE
          "\n" I_CLOSE C_CLOSE, /* too long */
          C_OPEN I_OPEN "z\">\n\n" I_CLOSE "\n" I_OPEN "z\">\n\n" I_CLOSE C_CLOSE, /* two calls, not parallel */
          C_OPEN I_OPEN "y\">\n\n" I_CLOSE C_CLOSE}},
        /* tool_choice auto: text, then maybe calls; w strict (its schema), f not (any parameters) */
        {"{\"parallel\":true,\"auto\":true,\"tools\":[{\"name\":\"w\",\"strict\":true,\"parameters\":{\"type\":\"object\","
         "\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7}},\"required\":[\"n\"]}},"
         "{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}}}}]}",
         {"", "Plain text, with < and <b> but no bar marker.",
          "Let me check. " C_OPEN I_OPEN "w\">\n" P_OPEN "n\" string=\"false\">3" P_CLOSE "\n" I_CLOSE C_CLOSE,
          C_OPEN I_OPEN "f\">\n" P_OPEN "anything\" string=\"true\">x < y" P_CLOSE "\n" P_OPEN "k\" string=\"false\">[1]" P_CLOSE
          "\n" I_CLOSE "\n" I_OPEN "f\">\n\n" I_CLOSE C_CLOSE},
         {C_OPEN I_OPEN "w\">\n" P_OPEN "n\" string=\"false\">9" P_CLOSE "\n" I_CLOSE C_CLOSE, /* strict: n <= 7 */
          C_OPEN I_OPEN "w\">\n\n" I_CLOSE C_CLOSE,                                              /* strict: n required */
          "text <\xef\xbd\x9c" "DSML\xef\xbd\x9c calls> not a block",                             /* the marker in text */
          C_OPEN I_OPEN "w\">\n" P_OPEN "n\" string=\"false\">3" P_CLOSE "\n" I_CLOSE C_CLOSE " after",  /* text after calls */
          C_OPEN I_OPEN "f\">\n" P_OPEN "q\" string=\"true\">a</b" P_CLOSE "\n" I_CLOSE C_CLOSE}},   /* "</" in a free value */
    };
    check_table(TIDE_CONS_TOOLS, cases, sizeof cases / sizeof cases[0]);
}

static void expect_error(tide_cons_kind k, const char *text, const char *needle) {
    tide_cons_grammar *g = NULL;
    tide_status st = {0};
    int rc = tide_cons_compile(k, text, strlen(text), &g, &st);
    if (rc == 0 || !strstr(st.msg, needle)) fprintf(stderr, "%s -> rc %d \"%s\", want \"%s\"\n", text, rc, st.msg, needle);
    assert_int_equal(rc, -1);
    assert_null(g);
    assert_non_null(strstr(st.msg, needle));
}

static void test_errors(void **state) {
    (void)state;
    expect_error(TIDE_CONS_LARK, "start: a\na: a \"x\" | \"y\"", "left recursion");
    expect_error(TIDE_CONS_LARK, "start: \"a\" b", "rule \"b\" is used but never defined");
    expect_error(TIDE_CONS_LARK, "start: \"a\" /x/i", "line 1, column 15: regex flags are not supported");
    expect_error(TIDE_CONS_LARK, "start: A\nA: b\nb: \"x\"", "line 2, column 4: a terminal cannot use a rule");
    expect_error(TIDE_CONS_LARK, "x: \"a\"", "no \"start\" rule");
    expect_error(TIDE_CONS_LARK, "start: \"a\"\n%declare X", "directive not supported");
    expect_error(TIDE_CONS_LARK, "%import other.X\nstart: \"a\"", "only %import common");
    expect_error(TIDE_CONS_LARK, "%import common.FOO\nstart: \"a\"", "not a terminal of common");
    expect_error(TIDE_CONS_LARK, "start: _sep{x}", "templates are not supported");
    expect_error(TIDE_CONS_LARK, "start: (\"a\"", "missing )");
    expect_error(TIDE_CONS_LARK, "start: \"a\"~5..2", "out of order");
    expect_error(TIDE_CONS_LARK, "start: \"ab\"..\"z\"", "one character each");
    expect_error(TIDE_CONS_REGEX, "(?=a)b", "lookaround");
    expect_error(TIDE_CONS_REGEX, "(a)\\1", "backreferences");
    expect_error(TIDE_CONS_REGEX, "\\bfoo", "\\b");
    expect_error(TIDE_CONS_REGEX, "a(b", "missing )");
    expect_error(TIDE_CONS_REGEX, "[a", "unterminated");
    expect_error(TIDE_CONS_REGEX, "*a", "nothing to repeat");
    expect_error(TIDE_CONS_REGEX, "a{5,2}", "out of order");
    expect_error(TIDE_CONS_REGEX, "a{99999}", "limit");
    expect_error(TIDE_CONS_REGEX, "\\p{L}", "property");
    expect_error(TIDE_CONS_JSON_SCHEMA, "{\"not\": {}}", "#: keyword \"not\" is not supported");
    expect_error(TIDE_CONS_JSON_SCHEMA, "{\"properties\": {\"a\": {\"if\": {}}}}", "#/properties/a: keyword \"if\"");
    expect_error(TIDE_CONS_JSON_SCHEMA, "{\"multipleOf\": 2}", "multipleOf");
    expect_error(TIDE_CONS_JSON_SCHEMA, "{\"type\": \"string\", \"format\": \"regex\"}", "format \"regex\"");
    expect_error(TIDE_CONS_JSON_SCHEMA, "{\"$ref\": \"#/$defs/x\"}", "does not point");
    expect_error(TIDE_CONS_JSON_SCHEMA, "{\"$ref\": \"http://x/y\"}", "does not point");
    expect_error(TIDE_CONS_JSON_SCHEMA, "{\"type\": \"str\"}", "\"type\" must be");
    expect_error(TIDE_CONS_JSON_SCHEMA, "{\"type\": ", "not JSON");
    expect_error(TIDE_CONS_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"(?!x)\"}", "#/pattern");
    expect_error(TIDE_CONS_JSON_SCHEMA, "{\"oneOf\": [{\"type\":\"string\"}, {\"minLength\": 2}]}", "oneOf");
    expect_error(TIDE_CONS_JSON_SCHEMA,
                 "{\"oneOf\": [{\"properties\":{\"k\":{\"const\":1}},\"required\":[\"k\"]}, {\"properties\":{\"k\":{\"const\":2}}}]}",
                 "oneOf"); /* no "type": "object": any non-object matches both */
    expect_error(TIDE_CONS_JSON_SCHEMA, "{\"type\":\"string\",\"maxLength\": 100000}", "limit");
    expect_error(TIDE_CONS_JSON_SCHEMA, "{\"type\":\"number\",\"minimum\": 1e-9}", "below 1e-6");
    expect_error(TIDE_CONS_JSON_SCHEMA, "{\"$ref\": \"#\"}", "left recursion");
    expect_error(TIDE_CONS_GBNF, "root ::= x\nx ::= x \"a\" | \"b\"", "left recursion");
    expect_error(TIDE_CONS_GBNF, "root ::= y", "\"y\" is used but never defined");
    expect_error(TIDE_CONS_GBNF, "item ::= \"a\"", "no \"root\"");
    expect_error(TIDE_CONS_GBNF, "root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule \"root\" is defined twice");
    expect_error(TIDE_CONS_GBNF, "root ::= (\"a\"", "missing )");
    expect_error(TIDE_CONS_GBNF, "root ::= \"a", "unterminated literal");
    expect_error(TIDE_CONS_GBNF, "root ::= [z-a]", "out of order");
    expect_error(TIDE_CONS_GBNF, "root = \"a\"", "expected ::=");
    expect_error(TIDE_CONS_GBNF, "root ::= <[12]>", "token references");
    expect_error(TIDE_CONS_TOOLS, "{\"tools\":[{\"name\":\"f\",\"parameters\":{\"type\":\"array\"}}]}", "must be an object schema");
    expect_error(TIDE_CONS_TOOLS, "{\"tools\":[{\"name\":\"f\",\"parameters\":{\"properties\":{\"a\":{\"type\":\"string\",\"not\":{}}}}}]}",
                 "tools[0].parameters/properties/a: keyword \"not\"");
    /* nesting past the limit */
    char deep[4096] = {0};
    for (int i = 0; i < 100; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 100; i++) strcat(deep, "}");
    expect_error(TIDE_CONS_JSON_SCHEMA, deep, "nested");
}

typedef struct { const char *schema; const char *yes[10]; const char *no[10]; } js_case;

static void test_schema(void **state) {
    (void)state;
    static const js_case cases[] = {
        {"{\"type\":\"integer\"}", {"0", "-7", "123"}, {"01", "-0", "1.5", "\"1\"", "", "1e3"}},
        {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120}", {"-5", "0", "99", "120", "7"}, {"-6", "121", "1000", "-10"}},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":9}", {"10", "99", "12345"}, {"9", "0", "-1"}},
        {"{\"type\":\"integer\",\"maximum\":-3}", {"-3", "-100"}, {"-2", "0", "5"}},
        {"{\"type\":\"number\"}", {"0", "-1.5", "2e10", "1E-3", "3.25"}, {".5", "1.", "+1", "01"}},
        {"{\"type\":\"number\",\"minimum\":0,\"maximum\":10}", {"0", "0.5", "10", "10.00", "9.999"}, {"-0.5", "10.01", "11", "-1"}},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}", {"0.5", "0.001"}, {"0", "1", "0.0", "1.0"}},
        {"{\"type\":\"number\",\"minimum\":-2,\"maximum\":-1}", {"-1", "-1.5", "-2"}, {"-2.5", "0", "-0.5"}},
        {"{\"type\":\"number\",\"minimum\":0.5,\"maximum\":2.25}", {"0.5", "0.50", "1", "2.25", "2.2", "0.99", "2.250"},
         {"0.49", "0.4999", "2.251", "2.3", "3", "0", "-1"}},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0.5,\"exclusiveMaximum\":0.57}", {"0.51", "0.5001", "0.5699"},
         {"0.5", "0.50", "0.57", "0.570", "0.58", "0.4"}},
        {"{\"type\":\"number\",\"minimum\":-1.5,\"exclusiveMaximum\":-0.25}", {"-1.5", "-1", "-0.3", "-0.2501"},
         {"-1.51", "-0.25", "-0.2", "0", "-2"}},
        {"{\"type\":\"number\",\"exclusiveMinimum\":-0.1}", {"-0.09", "0", "5.5", "-0.0999"}, {"-0.1", "-0.10", "-1", "-0.11"}},
        {"{\"type\":\"string\"}", {"\"\"", "\"a b\"", "\"\\\"\\\\\\n\"", "\"\xc3\xa9\""}, {"\"\n\"", "\"\\u0041\"", "a", "\"\\x\""}},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", {"\"ab\"", "\"\xc3\xa9\xc3\xa9\"", "\"\\n\\t\""}, {"\"a\"", "\"abcd\""}},
        {"{\"type\":\"string\",\"pattern\":\"^a+$\"}", {"\"a\"", "\"aaa\""}, {"\"\"", "\"ab\""}},
        {"{\"type\":\"string\",\"pattern\":\"b\"}", {"\"b\"", "\"abc\""}, {"\"ac\""}},
        {"{\"type\":\"string\",\"pattern\":\"^[\\\"]$\"}", {"\"\\\"\""}, {"\"\"\""}},
        {"{\"enum\":[1,\"a\",null,[1,2],{\"x\":1.0}]}", {"1", "\"a\"", "null", "[1,2]", "{\"x\":1}"}, {"2", "\"b\"", "[1]"}},
        {"{\"const\":\"hi\\n\"}", {"\"hi\\n\""}, {"\"hi\""}},
        {"{\"type\":[\"string\",\"null\"]}", {"null", "\"x\""}, {"1", "true"}},
        {"{\"type\":\"boolean\"}", {"true", "false"}, {"null", "1"}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},\"required\":[\"a\"],"
         "\"additionalProperties\":false}",
         {"{\"a\":1}", "{\"a\":1,\"b\":\"x\"}"}, {"{}", "{\"b\":\"x\"}", "{\"a\":1,\"c\":2}", "{\"a\":\"1\"}", "{\"b\":\"x\",\"a\":1}"}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}",
         {"{}", "{\"a\":1}", "{\"a\":1,\"z\":[true]}", "{\"ab\":\"x\"}", "{\"\":1}"}, {"{\"a\":\"x\"}", "{\"a\":1,\"a\":2}"}},
        {"{\"type\":\"object\",\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},\"additionalProperties\":false}",
         {"{}", "{\"x-a\":1,\"x-b\":2}"}, {"{\"y\":1}", "{\"x-a\":\"s\"}"}},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"boolean\"}}", {"{}", "{\"k\":true,\"j\":false}"}, {"{\"k\":1}"}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
         {"[1]", "[1,2,3]"}, {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]"}},
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}",
         {"[]", "[\"a\"]", "[\"a\",1]"}, {"[1]", "[\"a\",1,2]"}},
        {"{\"type\":\"array\",\"prefixItems\":[{\"const\":1}],\"minItems\":3}", {"[1,true,null]", "[1,2,3,4]"}, {"[1]", "[1,2]", "[2,3,4]"}},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", {"1", "\"a\""}, {"\"ab\"", "1.5"}},
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}", {"1", "\"a\""}, {"null"}},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},\"required\":[\"k\",\"x\"],"
         "\"additionalProperties\":false},{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"b\",\"c\"]}},\"required\":[\"k\"],"
         "\"additionalProperties\":false}]}",
         {"{\"k\":\"a\",\"x\":1}", "{\"k\":\"c\"}"}, {"{\"k\":\"a\"}", "{\"k\":\"b\",\"x\":1}"}},
        {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}},{\"required\":[\"a\"]}]}",
         {"{\"a\":1}"}, {"{}"}},
        {"{\"allOf\":[{\"type\":\"integer\",\"minimum\":0},{\"maximum\":5}]}", {"0", "5"}, {"6", "-1"}},
        {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#/$defs/n\"}},\"additionalProperties\":false}},"
         "\"$ref\":\"#/$defs/n\"}",
         {"{}", "{\"next\":{}}", "{\"next\":{\"next\":{}}}"}, {"{\"next\":1}"}},
        {"{\"type\":\"string\",\"format\":\"date-time\"}", {"\"2024-02-29T12:30:00Z\"", "\"1999-12-31t23:59:60.5+05:30\""},
         {"\"2024-13-01T00:00:00Z\"", "\"2024-01-01\""}},
        {"{\"type\":\"string\",\"format\":\"date\"}", {"\"2024-02-29\"", "\"2000-02-29\"", "\"0000-02-29\"", "\"2023-04-30\"", "\"2023-12-31\""},
         {"\"2023-02-29\"", "\"1900-02-29\"", "\"2023-11-31\"", "\"2023-06-31\"", "\"2024-02-30\""}},
        {"{\"type\":\"string\",\"format\":\"ipv4\"}", {"\"192.168.0.1\""}, {"\"256.1.1.1\"", "\"01.1.1.1\""}},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}", {"\"::1\"", "\"fe80::1:2\"", "\"1:2:3:4:5:6:7:8\"", "\"::ffff:1.2.3.4\""},
         {"\"1:2:3:4:5:6:7:8:9\"", "\"1::2::3\""}},
        {"{\"type\":\"string\",\"format\":\"uuid\"}", {"\"123e4567-e89b-12d3-a456-426614174000\""}, {"\"123e4567\""}},
        {"{\"type\":\"string\",\"format\":\"email\"}", {"\"a.b@c.org\""}, {"\"a@\"", "\"@b.c\""}},
        {"true", {"1", "{\"a\":[null,{}]}", "\"s\""}, {"", "{", "[1,]"}},
        {"{}", {"1", "[]"}, {"x"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tide_cons_grammar *g = compile_ok(TIDE_CONS_JSON_SCHEMA, cases[i].schema);
        for (int k = 0; k < 10 && cases[i].yes[k]; k++) {
            if (matches(g, cases[i].yes[k]) != 1) fprintf(stderr, "%s should accept %s\n", cases[i].schema, cases[i].yes[k]);
            assert_int_equal(matches(g, cases[i].yes[k]), 1);
        }
        for (int k = 0; k < 10 && cases[i].no[k]; k++) {
            if (matches(g, cases[i].no[k]) != 0) fprintf(stderr, "%s should reject %s\n", cases[i].schema, cases[i].no[k]);
            assert_int_equal(matches(g, cases[i].no[k]), 0);
        }
        tide_cons_grammar_unref(g);
    }
}

/* Number bounds with decimals against comparing the parsed values, on
 * random bounds and random numbers (seed printed). */
static void test_number_bounds(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x5eed};
    for (int rep = 0; rep < 40; rep++) {
        /* bounds with up to 3 decimals in [-30, 30] */
        double a = (double)((int64_t)(tu_next(&r) % 60001) - 30000) / 1000, b = (double)((int64_t)(tu_next(&r) % 60001) - 30000) / 1000;
        if (tu_next(&r) % 4 == 0) b = a + (double)(tu_next(&r) % 3) / 100;
        if (a > b) { double t = a; a = b; b = t; }
        int xa = (int)(tu_next(&r) % 2), xb = (int)(tu_next(&r) % 2);
        char ta[32], tb[32]; /* the bounds as the schema writes them */
        snprintf(ta, sizeof ta, "%.3f", a);
        snprintf(tb, sizeof tb, "%.3f", b);
        a = strtod(ta, NULL);
        b = strtod(tb, NULL);
        char schema[256];
        snprintf(schema, sizeof schema, "{\"type\":\"number\",\"%s\":%.3f,\"%s\":%.3f}", xa ? "exclusiveMinimum" : "minimum", a,
                 xb ? "exclusiveMaximum" : "maximum", b);
        tide_cons_grammar *g = compile_ok(TIDE_CONS_JSON_SCHEMA, schema);
        for (int k = 0; k < 200; k++) {
            /* numbers near the bounds, plain decimal, sometimes padded with zeros */
            double base = tu_next(&r) % 2 ? a : b;
            double x = base + (double)((int64_t)(tu_next(&r) % 2001) - 1000) / (tu_next(&r) % 2 ? 1000 : 10000);
            char t[64];
            int dec = (int)(tu_next(&r) % 6);
            snprintf(t, sizeof t, "%.*f", dec, x);
            if (t[0] == '-' && strspn(t + 1, "0.") == strlen(t + 1)) continue; /* a negative zero: never written */
            double v = strtod(t, NULL);
            int want = (xa ? v > a : v >= a) && (xb ? v < b : v <= b);
            int got = matches(g, t);
            if (got != want) fprintf(stderr, "%s: \"%s\" grammar %d, value %d\n", schema, t, got, want);
            assert_int_equal(got, want);
        }
        tide_cons_grammar_unref(g);
    }
}

static void test_canon(void **state) {
    (void)state;
    static const struct { double v; const char *s; } nums[] = {
        {1, "1"}, {-1.5, "-1.5"}, {1e21, "1e+21"}, {1e20, "100000000000000000000"}, {1e-7, "1e-7"},
        {0.000001, "0.000001"}, {0.1, "0.1"}, {123.456, "123.456"}, {-2.5e-10, "-2.5e-10"}, {1.7976931348623157e308, "1.7976931348623157e+308"},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        char b[64];
        tide_json_number_js(nums[i].v, b, sizeof b);
        assert_string_equal(b, nums[i].s);
    }
    json_t *j = json_loads("{\"a\":[1,2.0,\"\\u0001\\\"\\n\\/\"],\"b\":{}}", 0, NULL);
    size_t n;
    char *t = tide_json_canon(j, &n);
    assert_string_equal(t, "{\"a\":[1,2,\"\\u0001\\\"\\n/\"],\"b\":{}}");
    free(t);
    json_decref(j);
}

/* ---- masks against brute force ------------------------------------------------- */

static void check_masks(tu_rng *r, tide_cons_kind kind, const char *text, const vocab *vb, const tide_cons_vocab *cv) {
    tide_cons_grammar *g = compile_ok(kind, text);
    tide_cons *c = NULL;
    tide_status st = {0};
    assert_int_equal(tide_cons_new(g, cv, &c, &st), 0);
    int32_t end = vb->n - 1;
    int nw = (vb->n + 31) / 32;
    uint32_t *allow = calloc((size_t)nw, 4);
    int32_t *taken = calloc(200, sizeof *taken);
    int steps = 0;
    for (; steps < 60; steps++) {
        if (tide_cons_mask(c, allow, &end, 1, &st) != 0) {
            fprintf(stderr, "mask failed: %s\n", st.msg);
            fail();
        }
        /* brute force: every token from the current text */
        int n_allowed = 0;
        for (int t = 0; t < vb->n; t++) {
            int want;
            if (t == end) want = tide_cons_complete(c);
            else if (vb->skip[t]) want = 0;
            else {
                tide_status s2 = {0};
                want = tide_cons_accept(c, t, &end, 1, &s2) == 0;
                if (want) assert_int_equal(tide_cons_rollback(c, 1, &s2), 0);
            }
            int got = (allow[t >> 5] >> (t & 31)) & 1;
            if (got != want) fprintf(stderr, "%s: step %d token %d: mask %d, brute force %d\n", text, steps, t, got, want);
            assert_int_equal(got, want);
            n_allowed += want;
        }
        assert_true(n_allowed > 0);
        /* a random allowed token (the end token a third of the time it is allowed) */
        int pick = -1;
        if (tide_cons_complete(c) && tu_next(r) % 3 == 0) pick = end;
        while (pick < 0) {
            int t = (int)(tu_next(r) % (uint64_t)vb->n);
            if ((allow[t >> 5] >> (t & 31)) & 1) pick = t;
        }
        assert_int_equal(tide_cons_accept(c, pick, &end, 1, &st), 0);
        taken[steps] = pick;
        if (pick == end || tide_cons_done(c)) break;
    }
    /* rollback to a random earlier point, then the same tokens again */
    int64_t n = tide_cons_n_accepted(c);
    int back = (int)(tu_next(r) % (uint64_t)(n + 1));
    assert_int_equal(tide_cons_rollback(c, back, &st), 0);
    for (int64_t i = n - back; i < n; i++) assert_int_equal(tide_cons_accept(c, taken[i], &end, 1, &st), 0);
    assert_int_equal(tide_cons_n_accepted(c), n);
    assert_int_not_equal(tide_cons_rollback(c, (int)n + 1, &st), 0);
    free(allow);
    free(taken);
    tide_cons_free(c);
    tide_cons_grammar_unref(g);
}

static void test_mask_brute(void **state) {
    (void)state;
    uint64_t seed = tu_seed();
    tu_rng r = {seed};
    vocab vb = make_vocab(&r, 700, NULL, 0);
    for (int i = vb.n - 3; i < vb.n; i++) vb.skip[i] = 1; /* the last three: special (one is the end token) */
    tide_cons_vocab *cv = NULL;
    tide_status st = {0};
    assert_int_equal(tide_cons_vocab_new((const uint8_t *const *)vb.b, vb.len, vb.skip, vb.n, &cv, &st), 0);
    static const struct { tide_cons_kind k; const char *t; } cons[] = {
        {TIDE_CONS_REGEX, "(ab|x-)*[0-9]{1,3}\xc3\xa9?"},
        {TIDE_CONS_REGEX, "[^\"]{0,5}e"},
        {TIDE_CONS_JSON_OBJECT, ""},
        {TIDE_CONS_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-20,\"maximum\":150},"
                                "\"b\":{\"type\":\"array\",\"items\":{\"enum\":[\"x\",true,null]},\"maxItems\":4}},"
                                "\"required\":[\"b\"],\"additionalProperties\":false}"},
        {TIDE_CONS_JSON_SCHEMA, "{\"type\":\"string\",\"maxLength\":6}"},
        {TIDE_CONS_GBNF, "root ::= \"[\" (v (\",\" v)*)? \"]\"\nv ::= root | [0-9]+ | \"true\""},
        {TIDE_CONS_JSON_SCHEMA, "{\"$defs\":{\"t\":{\"anyOf\":[{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/t\"}},{\"type\":\"number\"}]}},"
                                "\"$ref\":\"#/$defs/t\"}"},
    };
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = 0; i < sizeof cons / sizeof cons[0]; i++) check_masks(&r, cons[i].k, cons[i].t, &vb, cv);
    tide_cons_vocab_free(cv);
    free_vocab(&vb);
}

/* ---- slices against the plain walk on random constraints ------------------------ */

static const char *pick(tu_rng *r, const char *const *a, size_t n) { return a[tu_next(r) % n]; }

/* A random regex from pieces: classes, literals, repeats, groups. */
static void rand_regex(tu_rng *r, char *out, size_t cap, int depth) {
    static const char *const atoms[] = {"[a-z]", "[^\"]", ".", "[^<]", "x", "\\d", "[a-zA-Z\u00e9]", "ab", "\"",
                                        "[ -~]", "[^a]", "\\w", "\u00e9", "[^\\\\\"\\n]", " "};
    static const char *const reps[] = {"", "", "*", "+", "?", "{0,3}", "{1,12}", "{2}", "{0,30}", "{5,}"};
    size_t len = strlen(out);
    int parts = 1 + (int)(tu_next(r) % 4);
    for (int p = 0; p < parts && len + 64 < cap; p++) {
        if (depth < 2 && tu_next(r) % 5 == 0) {
            strcat(out, "(");
            rand_regex(r, out, cap, depth + 1);
            strcat(out, tu_next(r) % 2 ? "|" : ")");
            if (out[strlen(out) - 1] == '|') {
                rand_regex(r, out, cap, depth + 1);
                strcat(out, ")");
            }
        } else strcat(out, pick(r, atoms, sizeof atoms / sizeof atoms[0]));
        strcat(out, pick(r, reps, sizeof reps / sizeof reps[0]));
        len = strlen(out);
    }
}

/* A random JSON Schema: strings (lengths, patterns, formats, enums),
 * numbers with bounds, arrays, objects with optional members. */
static void rand_schema(tu_rng *r, char *out, size_t cap, int depth) {
    char buf[2048];
    int k = (int)(tu_next(r) % (depth < 2 ? 7 : 4));
    switch (k) {
    case 0:
        snprintf(buf, sizeof buf, "{\"type\":\"string\",\"minLength\":%d,\"maxLength\":%d}", (int)(tu_next(r) % 3),
                 3 + (int)(tu_next(r) % 40));
        break;
    case 1: snprintf(buf, sizeof buf, "{\"type\":\"string\"%s}", tu_next(r) % 2 ? ",\"format\":\"email\"" : ""); break;
    case 2:
        snprintf(buf, sizeof buf, "{\"type\":\"%s\",\"minimum\":%d,\"maximum\":%d}", tu_next(r) % 2 ? "integer" : "number",
                 -(int)(tu_next(r) % 50), (int)(tu_next(r) % 5000));
        break;
    case 3: snprintf(buf, sizeof buf, "{\"type\":\"string\",\"pattern\":\"^[a-z ]{1,%d}$\"}", 1 + (int)(tu_next(r) % 20)); break;
    case 4: case 5: {
        char a[1024] = "", b[1024] = "";
        rand_schema(r, a, sizeof a, depth + 1);
        rand_schema(r, b, sizeof b, depth + 1);
        snprintf(buf, sizeof buf, "{\"type\":\"object\",\"properties\":{\"name\":%s,\"b\":%s},\"required\":[\"name\"]%s}", a, b,
                 tu_next(r) % 2 ? ",\"additionalProperties\":false" : "");
        break;
    }
    default: {
        char a[1024] = "";
        rand_schema(r, a, sizeof a, depth + 1);
        snprintf(buf, sizeof buf, "{\"type\":\"array\",\"items\":%s,\"maxItems\":%d}", a, 1 + (int)(tu_next(r) % 4));
    }
    }
    if (strlen(out) + strlen(buf) < cap) strcat(out, buf);
}

/* The mask with slices on (the fast path) equals the mask with slices off
 * (every live node walked) and the brute-force check of every token, at
 * every step of random generations of random regexes and schemas. The
 * vocabulary adds long tokens of letters, spaces and UTF-8 (so slices of
 * many characters, and tokens past a string's remaining length, occur). */
static void test_mask_slices(void **state) {
    (void)state;
    uint64_t seed = tu_seed();
    tu_rng r = {seed};
    vocab vb = make_vocab(&r, 900, NULL, 0);
    for (int i = 700; i < vb.n - 3; i++) { /* long text tokens */
        static const char *const atoms[] = {"a", "b", "x", " ", "\xc3\xa9", "ab", "0", "\xe2\x82\xac", "-", "\xc3", "\"", "<"};
        char buf[64] = {0};
        size_t len = 0;
        int parts = 3 + (int)(tu_next(&r) % 20);
        for (int k = 0; k < parts; k++) {
            const char *a = atoms[tu_next(&r) % (tu_next(&r) % 4 ? 9 : 12)];
            if (len + strlen(a) < sizeof buf) memcpy(buf + len, a, strlen(a)), len += strlen(a);
        }
        free(vb.b[i]);
        vb.b[i] = malloc(len);
        memcpy(vb.b[i], buf, len);
        vb.len[i] = (uint32_t)len;
    }
    for (int i = vb.n - 3; i < vb.n; i++) vb.skip[i] = 1;
    tide_cons_vocab *cv = NULL;
    tide_status st = {0};
    assert_int_equal(tide_cons_vocab_new((const uint8_t *const *)vb.b, vb.len, vb.skip, vb.n, &cv, &st), 0);
    int32_t end = vb.n - 1;
    int nw = (vb.n + 31) / 32;
    uint32_t *fast = calloc((size_t)nw, 4), *slow = calloc((size_t)nw, 4);
    for (int rep = 0; rep < 24; rep++) {
        char text[4096] = "";
        tide_cons_kind kind = rep % 2 ? TIDE_CONS_REGEX : TIDE_CONS_JSON_SCHEMA;
        if (kind == TIDE_CONS_REGEX) rand_regex(&r, text, sizeof text, 0);
        else rand_schema(&r, text, sizeof text, 0);
        tide_cons_grammar *ga = NULL, *gb = NULL; /* two compilations: their mask caches are apart */
        if (tide_cons_compile(kind, text, strlen(text), &ga, &st) != 0) continue; /* e.g. a regex with nothing to match */
        assert_int_equal(tide_cons_compile(kind, text, strlen(text), &gb, &st), 0);
        tide_cons *ca = NULL, *cb = NULL;
        assert_int_equal(tide_cons_new(ga, cv, &ca, &st), 0);
        assert_int_equal(tide_cons_new(gb, cv, &cb, &st), 0);
        for (int steps = 0; steps < 80; steps++) {
            tide_cons_set_slices(1);
            int ra = tide_cons_mask(ca, fast, &end, 1, &st);
            tide_cons_set_slices(0);
            int rb = tide_cons_mask(cb, slow, &end, 1, &st);
            tide_cons_set_slices(1);
            if (ra != rb) fprintf(stderr, "seed %llu %s: step %d: fast %d, plain %d: %s\n", (unsigned long long)seed, text, steps, ra, rb, st.msg);
            assert_int_equal(ra, rb);
            if (ra != 0) break;
            for (int t = 0; t < vb.n; t++) {
                int got = (fast[t >> 5] >> (t & 31)) & 1, want = (slow[t >> 5] >> (t & 31)) & 1, brute;
                if (t == end) brute = tide_cons_complete(ca);
                else if (vb.skip[t]) brute = 0;
                else {
                    tide_status s2 = {0};
                    brute = tide_cons_accept(ca, t, &end, 1, &s2) == 0;
                    if (brute) assert_int_equal(tide_cons_rollback(ca, 1, &s2), 0);
                }
                if (got != want || got != brute)
                    fprintf(stderr, "seed %llu %s: step %d token %d [%.*s]: fast %d, plain %d, brute force %d\n",
                            (unsigned long long)seed, text, steps, t, (int)vb.len[t], (const char *)vb.b[t], got, want, brute);
                assert_int_equal(got, want);
                assert_int_equal(got, brute);
            }
            /* a random allowed token; the longest one a third of the time (to run strings to their bounds) */
            int best = -1;
            if (tide_cons_complete(ca) && tu_next(&r) % 4 == 0) best = end;
            for (int tries = 0; best < 0 && tries < 4000; tries++) {
                int t = (int)(tu_next(&r) % (uint64_t)vb.n);
                if ((fast[t >> 5] >> (t & 31)) & 1) best = t;
            }
            if (best < 0) break;
            if (best != end && tu_next(&r) % 3 == 0)
                for (int t = 0; t < vb.n - 3; t++)
                    if (((fast[t >> 5] >> (t & 31)) & 1) && vb.len[t] > vb.len[best]) best = t;
            assert_int_equal(tide_cons_accept(ca, best, &end, 1, &st), 0);
            assert_int_equal(tide_cons_accept(cb, best, &end, 1, &st), 0);
            if (best == end || tide_cons_done(ca)) break;
        }
        tide_cons_free(ca), tide_cons_free(cb);
        tide_cons_grammar_unref(ga), tide_cons_grammar_unref(gb);
    }
    free(fast), free(slow);
    tide_cons_vocab_free(cv);
    free_vocab(&vb);
}

static void test_gate_and_cache(void **state) {
    (void)state;
    const uint8_t *b[4] = {(const uint8_t *)"a", (const uint8_t *)"b", (const uint8_t *)"</t>", (const uint8_t *)""};
    uint32_t len[4] = {1, 1, 4, 0};
    uint8_t skip[4] = {0, 0, 1, 1};
    tide_cons_vocab *cv = NULL;
    tide_status st = {0};
    assert_int_equal(tide_cons_vocab_new(b, len, skip, 4, &cv, &st), 0);
    tide_cons_cache *cache = tide_cons_cache_new(2);
    tide_cons_grammar *g1 = NULL, *g2 = NULL;
    assert_int_equal(tide_cons_cache_get(cache, TIDE_CONS_REGEX, "a+", 2, &g1, &st), 0);
    assert_int_equal(tide_cons_cache_get(cache, TIDE_CONS_REGEX, "a+", 2, &g2, &st), 0);
    assert_ptr_equal(g1, g2);
    tide_cons_grammar_unref(g2);
    assert_int_equal(tide_cons_cache_get(cache, TIDE_CONS_REGEX, "(", 1, &g2, &st), -1);
    tide_cons *c = NULL;
    assert_int_equal(tide_cons_new(g1, cv, &c, &st), 0);
    tide_cons_set_gate(c, 2);
    int32_t end = 3;
    uint32_t allow[1];
    assert_int_equal(tide_cons_mask(c, allow, &end, 1, &st), 0);
    assert_int_equal(allow[0], 7u); /* free text inside the gate, but not the end */
    assert_int_equal(tide_cons_accept(c, 1, &end, 1, &st), 0); /* "b": free text inside the gate */
    assert_int_equal(tide_cons_accept(c, 2, &end, 1, &st), 0); /* the gate */
    assert_int_equal(tide_cons_mask(c, allow, &end, 1, &st), 0);
    assert_int_equal(allow[0], 1u); /* only "a" */
    assert_int_equal(tide_cons_accept(c, 1, &end, 1, &st), -1);
    assert_int_equal(tide_cons_accept(c, 0, &end, 1, &st), 0);
    assert_int_equal(tide_cons_mask(c, allow, &end, 1, &st), 0);
    assert_int_equal(allow[0], 1u | 8u); /* "a" or the end */
    assert_int_equal(tide_cons_rollback(c, 2, &st), 0);
    assert_int_equal(tide_cons_mask(c, allow, &end, 1, &st), 0);
    assert_int_equal(allow[0], 7u); /* back inside the gate */
    tide_cons_free(c);
    tide_cons_grammar_unref(g1);
    tide_cons_cache_free(cache);
    tide_cons_vocab_free(cv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regex),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_gbnf),
        cmocka_unit_test(test_lark),
        cmocka_unit_test(test_lark_vs_gbnf),
        cmocka_unit_test(test_tool_calls),
        cmocka_unit_test(test_schema),
        cmocka_unit_test(test_number_bounds),
        cmocka_unit_test(test_canon),
        cmocka_unit_test(test_mask_brute),
        cmocka_unit_test(test_mask_slices),
        cmocka_unit_test(test_gate_and_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
