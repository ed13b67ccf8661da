/* tide's request parsing + prompt rendering against the release's own
 * encoder (encoding/encoding.py of DeepSeek-V4.1-Flash). The golden data
 * in tests/data/render_release/ comes from tools/render_release.py: a few
 * hundred OpenAI Chat Completions request bodies (inputs.jsonl) and what
 * the release's encoder renders for each, or that it refuses it
 * (expected.jsonl). Every case must come out byte for byte the same, or be
 * refused by both, except the cases marked with a deviation: each of those
 * names one of the deliberate differences listed in docs/text.md, and must
 * differ exactly in the way the list below says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "testutil.h"
#include "text/render.h"

#define DIR TIDE_SOURCE_DIR "/tests/data/render_release"

typedef enum { TIDE_RENDERS, TIDE_REFUSES } dev_kind;

/* The deliberate deviations (docs/text.md, "Deliberate differences"). */
static const struct { const char *id; dev_kind kind; } DEVIATIONS[] = {
    {"effort_alias", TIDE_RENDERS},         /* minimal, medium, xhigh, maximum are accepted */
    {"effort_none", TIDE_RENDERS},          /* "none" turns thinking off */
    {"arguments_not_string", TIDE_REFUSES}, /* arguments must be a string or an object */
    {"nul", TIDE_REFUSES},                  /* no NUL characters in text */
    {"tool_content_null", TIDE_REFUSES},    /* a tool result needs content */
    {"names", TIDE_REFUSES},                /* tool names are [A-Za-z0-9_.:-]{1,128} */
    {"body_numbers", TIDE_REFUSES},         /* numbers in the body beyond int64 / double */
    {"depth", TIDE_REFUSES},                /* JSON nested deeper than 64 levels */
};

static int deviation_kind(const char *id) {
    for (size_t i = 0; i < sizeof DEVIATIONS / sizeof DEVIATIONS[0]; i++)
        if (!strcmp(DEVIATIONS[i].id, id)) return (int)DEVIATIONS[i].kind;
    return -1;
}

/* Next line of f as a JSON object; NULL at the end. */
static json_t *next_record(FILE *f, const char *what) {
    static const size_t MAX = 8u << 20;
    char *line = malloc(MAX);
    assert_non_null(line);
    json_t *v = NULL;
    if (fgets(line, (int)MAX, f)) {
        json_error_t jerr;
        v = json_loads(line, JSON_ALLOW_NUL, &jerr);
        if (!json_is_object(v)) fail_msg("%s: bad line: %s", what, jerr.text);
    }
    free(line);
    return v;
}

static const char *field(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Renders one request body; returns the prompt (malloc'd, *len bytes) or
 * NULL with the refusal in msg. */
static char *tide_prompt_of(const char *body, size_t *len, char *msg, size_t msg_size) {
    tide_api_req req;
    tide_api_err err;
    char *out = NULL;
    if (tide_api_parse(TIDE_API_CHAT, body, strlen(body), &req, &err) != 0) {
        snprintf(msg, msg_size, "%s", err.st.msg);
        return NULL;
    }
    tide_prompt p;
    tide_status st = {0};
    if (tide_render(&req.conv, &p, &st) != 0) {
        snprintf(msg, msg_size, "render: %.900s", st.msg);
    } else {
        /* The generation starts in reasoning exactly when the prompt ends in <think>. */
        assert_int_equal(p.in_reasoning, p.len >= 7 && !memcmp(p.text + p.len - 7, "<think>", 7));
        out = p.text;
        *len = p.len;
        p.text = NULL;
    }
    tide_prompt_free(&p);
    tide_api_req_free(&req);
    return out;
}

static void show_diff(const char *name, const char *got, size_t got_len, const char *want, size_t want_len) {
    size_t k = 0;
    while (k < got_len && k < want_len && got[k] == want[k]) k++;
    size_t from = k > 40 ? k - 40 : 0;
    print_message("%s differs at byte %zu:\n  tide:    ...%.*s\n  release: ...%.*s\n", name, k,
                  (int)(got_len - from < 120 ? got_len - from : 120), got + from,
                  (int)(want_len - from < 120 ? want_len - from : 120), want + from);
}

static void test_release_encoder(void **state) {
    (void)state;
    FILE *in = fopen(DIR "/inputs.jsonl", "rb"), *ex = fopen(DIR "/expected.jsonl", "rb");
    if (!in || !ex) fail_msg("cannot open the golden data in %s", DIR);
    int n = 0, same = 0, both_refuse = 0, deviations = 0, bad = 0;
    json_t *a, *b;
    while ((a = next_record(in, "inputs.jsonl"))) {
        b = next_record(ex, "expected.jsonl");
        if (!b) fail_msg("expected.jsonl has fewer cases than inputs.jsonl");
        const char *name = field(a, "name"), *body = field(a, "body"), *dev = field(a, "deviation");
        if (!name || !body || strcmp(name, field(b, "name") ? field(b, "name") : ""))
            fail_msg("case %d: inputs and expected are out of step", n);
        json_t *pv = json_object_get(b, "prompt");
        const char *want = json_string_value(pv);
        size_t want_len = want ? json_string_length(pv) : 0, got_len = 0;
        char msg[TIDE_STATUS_MSG];
        char *got = tide_prompt_of(body, &got_len, msg, sizeof msg);
        n++;
        if (dev) {
            int kind = deviation_kind(dev);
            if (kind < 0) {
                print_message("%s: deviation \"%s\" is not in the documented list\n", name, dev);
                bad++;
            } else if (kind == TIDE_RENDERS && !(got && !want)) {
                print_message("%s: deviation %s: expected tide to render what the release refuses (%s)\n", name,
                              dev, got ? "both render" : msg);
                bad++;
            } else if (kind == TIDE_REFUSES && !(!got && want)) {
                print_message("%s: deviation %s: expected tide to refuse what the release renders\n", name, dev);
                bad++;
            } else {
                deviations++;
            }
        } else if (got && want) {
            if (got_len == want_len && !memcmp(got, want, want_len)) same++;
            else show_diff(name, got, got_len, want, want_len), bad++;
        } else if (!got && !want) {
            both_refuse++;
        } else if (got) {
            print_message("%s: the release refuses (%s) but tide renders\n", name, field(b, "error"));
            bad++;
        } else {
            print_message("%s: the release renders but tide refuses: %s\n", name, msg);
            bad++;
        }
        free(got);
        json_decref(a);
        json_decref(b);
    }
    if ((b = next_record(ex, "expected.jsonl"))) fail_msg("expected.jsonl has more cases than inputs.jsonl");
    fclose(in);
    fclose(ex);
    print_message("%d cases: %d byte-identical, %d refused by both, %d documented deviations, %d wrong\n", n, same,
                  both_refuse, deviations, bad);
    assert_true(n >= 300);
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release_encoder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
