/* The streaming output parser: exact results on sample outputs, and the
 * same result (accumulated and as reconstructed from the streamed events)
 * for every split of each sample into two chunks, byte-by-byte feeding, and
 * random partitions — including splits inside UTF-8 characters, markers and
 * stop sequences. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "testutil.h"
#include "text/outparse.h"
#include "text/render.h"

#define EOS TIDE_TOK_EOS
#define CALLS "<\xef\xbd\x9c" "DSML\xef\xbd\x9c calls>"
#define ECALLS "</\xef\xbd\x9c" "DSML\xef\xbd\x9c calls>"
#define INV(n) "<\xef\xbd\x9c" "DSML\xef\xbd\x9c invoke name=\"" n "\">"
#define EINV "</\xef\xbd\x9c" "DSML\xef\xbd\x9c invoke>"
#define PAR(n, s) "<\xef\xbd\x9c" "DSML\xef\xbd\x9c parameter name=\"" n "\" string=\"" s "\">"
#define EPAR "</\xef\xbd\x9c" "DSML\xef\xbd\x9c parameter>"

/* What the events say, rebuilt independently of the parser's accumulators. */
typedef struct seen {
    tide_sb reasoning, content, names, args[8];
    int begins, ends, order_ok;
    size_t last_call;
} seen;

static int on_event(void *ud, const tide_pev *ev, tide_status *st) {
    (void)st;
    seen *s = ud;
    switch (ev->kind) {
    case TIDE_PEV_REASONING:
        if (s->content.len || s->begins) s->order_ok = 0; /* reasoning comes first */
        tide_sb_addn(&s->reasoning, ev->text, ev->len);
        break;
    case TIDE_PEV_CONTENT: tide_sb_addn(&s->content, ev->text, ev->len); break;
    case TIDE_PEV_CALL_BEGIN:
        if (ev->call != (size_t)s->begins) s->order_ok = 0;
        tide_sb_add(&s->names, ev->name);
        tide_sb_addc(&s->names, ';');
        s->begins++;
        break;
    case TIDE_PEV_CALL_ARGS:
        if (ev->call < 8) tide_sb_addn(&s->args[ev->call], ev->text, ev->len);
        break;
    case TIDE_PEV_CALL_END: s->ends++; break;
    }
    return 0;
}

typedef struct result {
    char *text; /* a canonical dump of everything observable */
} result;

static char *describe(tide_outparse *p, seen *s) {
    tide_sb d;
    tide_sb_init(&d);
    size_t n;
    const char *r = tide_outparse_reasoning(p, &n);
    tide_sb_add(&d, "R[");
    tide_sb_addn(&d, r, n);
    tide_sb_add(&d, "] C[");
    r = tide_outparse_content(p, &n);
    tide_sb_addn(&d, r, n);
    tide_sb_addf(&d, "] end=%d json=%d", (int)tide_outparse_end(p), tide_outparse_json_ok(p));
    for (size_t i = 0; i < tide_outparse_ncalls(p); i++) {
        const tide_parsed_call *c = tide_outparse_call(p, i);
        tide_sb_addf(&d, " %s%s", c->name, c->complete ? "" : "(cut)");
        tide_sb_addn(&d, c->args.s, c->args.len);
        /* the streamed argument pieces add up to the arguments */
        assert_int_equal(s->args[i].len, c->args.len);
        assert_memory_equal(s->args[i].s, c->args.s, c->args.len);
    }
    /* the streamed text adds up to the accumulated text */
    r = tide_outparse_reasoning(p, &n);
    assert_int_equal(s->reasoning.len, n);
    if (n) assert_memory_equal(s->reasoning.s, r, n);
    r = tide_outparse_content(p, &n);
    assert_int_equal(s->content.len, n);
    if (n) assert_memory_equal(s->content.s, r, n);
    assert_int_equal(s->begins, (int)tide_outparse_ncalls(p));
    assert_int_equal(s->ends, (int)tide_outparse_ncalls(p));
    assert_true(s->order_ok);
    return tide_sb_take(&d);
}

typedef struct sample {
    const char *text;
    int in_reasoning, json_mode;
    const char *stops[3];
    const char *want; /* describe() of the whole text */
} sample;

/* Parses text cut at the given boundaries (cuts[0..ncuts) ascending). */
static char *parse_cut(const sample *sm, const size_t *cuts, size_t ncuts) {
    seen s;
    memset(&s, 0, sizeof s);
    s.order_ok = 1;
    size_t nstops = 0;
    while (nstops < 3 && sm->stops[nstops]) nstops++;
    tide_outparse_cfg cfg = {.in_reasoning = sm->in_reasoning, .json_mode = sm->json_mode,
                             .stops = sm->stops, .n_stops = nstops, .fn = on_event, .ud = &s};
    tide_outparse *p;
    tide_status st = {0};
    assert_int_equal(tide_outparse_new(&cfg, &p, &st), 0);
    size_t len = strlen(sm->text), at = 0;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t to = i < ncuts ? cuts[i] : len;
        assert_int_equal(tide_outparse_feed(p, sm->text + at, to - at, &st), 0);
        at = to;
    }
    assert_int_equal(tide_outparse_finish(p, &st), 0);
    char *d = describe(p, &s);
    tide_outparse_free(p);
    tide_sb_free(&s.reasoning), tide_sb_free(&s.content), tide_sb_free(&s.names);
    for (int i = 0; i < 8; i++) tide_sb_free(&s.args[i]);
    return d;
}

static const sample SAMPLES[] = {
    {"Let me think. 2+2=4.</think>The answer is **4**." EOS, 1, 0, {0},
     "R[Let me think. 2+2=4.] C[The answer is **4**.] end=1 json=0"},
    {"Ünïcödé 😀 reasoning</think>中文回答 ✓" EOS "ignored after EOS", 1, 0, {0},
     "R[Ünïcödé 😀 reasoning] C[中文回答 ✓] end=1 json=0"},
    {"Checking the weather.\n\n" CALLS "\n" INV("get_weather") "\n" PAR("city", "true") "Paris \"FR\"\\n" EPAR "\n"
     PAR("days", "false") "3" EPAR "\n" EINV "\n" INV("done") "\n" EINV "\n" ECALLS EOS, 0, 0, {0},
     "R[] C[Checking the weather.] end=1 json=0 get_weather{\"city\": \"Paris \\\"FR\\\"\\\\n\", \"days\": 3} done{}"},
    {"plan</think>\n\n" CALLS "\n" INV("f") "\n" PAR("obj", "false") " {\"x\": [1, true, null, 0.5], \"é\": \"ü\"} " EPAR
     "\n" PAR("bad", "false") "not json" EPAR "\n" PAR("s", "true") "line1\nline2\t<tag>" EPAR "\n" EINV "\n" ECALLS EOS,
     1, 0, {0},
     "R[plan] C[] end=1 json=0 f{\"obj\": {\"x\": [1, true, null, 0.5], \"é\": \"ü\"}, \"bad\": \"not json\", "
     "\"s\": \"line1\\nline2\\t<tag>\"}"},
    {"Hello world, STOP here and more", 0, 0, {"STOP", "never", NULL}, "R[] C[Hello world, ] end=2 json=0"},
    {"reason with STOP inside</think>content then ∎end∎ rest", 1, 0, {"∎end∎", "STOP", NULL},
     "R[reason with STOP inside] C[content then ] end=2 json=0"},
    {"abcabd", 0, 0, {"abd", "bca", NULL}, "R[] C[a] end=2 json=0"},
    {"  {\"a\": [1, {\"b\": \"}\\\"\"}], \"c\": \"]\"}\n trailing", 0, 1, {0},
     "R[] C[  {\"a\": [1, {\"b\": \"}\\\"\"}], \"c\": \"]\"}] end=3 json=1"},
    {"cut off in a call\n\n" CALLS "\n" INV("search") "\n" PAR("q", "true") "partial que", 0, 0, {0},
     "R[] C[cut off in a call] end=0 json=0 search(cut){\"q\": \"partial que\"}"},
    {"text with a lone < and \n\n newlines and </think> in content" EOS, 0, 0, {0},
     "R[] C[text with a lone < and \n\n newlines and </think> in content] end=1 json=0"},
    {"ends in a partial marker \n\n<\xef\xbd\x9c" "DS", 0, 0, {0},
     "R[] C[ends in a partial marker \n\n<\xef\xbd\x9c" "DS] end=0 json=0"},
    {"no close of reasoning at all", 1, 0, {0}, "R[no close of reasoning at all] C[] end=0 json=0"},
};

static void test_whole(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof SAMPLES / sizeof SAMPLES[0]; i++) {
        char *d = parse_cut(&SAMPLES[i], NULL, 0);
        if (strcmp(d, SAMPLES[i].want) != 0)
            fail_msg("sample %zu:\n got %s\nwant %s", i, d, SAMPLES[i].want);
        free(d);
    }
}

static void test_every_split(void **state) {
    (void)state;
    tu_rng r = {tu_seed()};
    for (size_t i = 0; i < sizeof SAMPLES / sizeof SAMPLES[0]; i++) {
        const sample *sm = &SAMPLES[i];
        char *want = parse_cut(sm, NULL, 0);
        size_t len = strlen(sm->text);
        for (size_t k = 0; k <= len; k++) { /* every single split point */
            char *got = parse_cut(sm, &k, 1);
            if (strcmp(got, want) != 0) fail_msg("sample %zu split at %zu:\n got %s\nwant %s", i, k, got, want);
            free(got);
        }
        size_t *cuts = malloc(len * sizeof *cuts);
        for (size_t k = 0; k < len; k++) cuts[k] = k; /* byte by byte */
        char *got = parse_cut(sm, cuts, len);
        if (strcmp(got, want) != 0) fail_msg("sample %zu byte-by-byte:\n got %s\nwant %s", i, got, want);
        free(got);
        for (int t = 0; t < 50; t++) { /* random partitions */
            size_t n = 0;
            for (size_t k = 1; k < len; k++)
                if (tu_uniform(&r) < 0.2) cuts[n++] = k;
            got = parse_cut(sm, cuts, n);
            if (strcmp(got, want) != 0) fail_msg("sample %zu random partition %d:\n got %s\nwant %s", i, t, got, want);
            free(got);
        }
        free(cuts);
        free(want);
    }
}

/* Random well-formed outputs from the format's grammar: the parse must give
 * back exactly the pieces they were built from, whole and in random chunks. */
static const char *const ALPHABET[] = {"a", "b", " ", "\n", "<", ">", "/", "\"", "\\", "=", "\t",
                                       "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xef\xbd\x9c", "think", "DSML"};
static const char *const MARKERS[] = {"</think>", TIDE_TOK_EOS, CALLS, ECALLS, ("<\xef\xbd\x9c" "DSML"), "\">", "STOP"};

static void rand_text(tu_rng *r, tide_sb *out, int max) {
    for (;;) {
        tide_sb_reset(out);
        int n = (int)(tu_uniform(r) * max);
        for (int i = 0; i < n; i++) tide_sb_add(out, ALPHABET[tu_next(r) % (sizeof ALPHABET / sizeof *ALPHABET)]);
        int bad = 0;
        for (size_t m = 0; m < sizeof MARKERS / sizeof *MARKERS && out->s; m++) bad |= strstr(out->s, MARKERS[m]) != NULL;
        if (!bad) return;
    }
}

static void test_random_grammar(void **state) {
    (void)state;
    tu_rng r = {tu_seed()};
    static const char *const VALUES[] = {"1", "2.5", "[1, 2]", "{\"a\": null}", "true", "\"q\"", "not json", " -3e-05 "};
    tide_sb text, piece;
    tide_sb_init(&text), tide_sb_init(&piece);
    for (int iter = 0; iter < 300; iter++) {
        int thinking = tu_next(&r) % 2, ncalls = (int)(tu_next(&r) % 4);
        tide_sb_reset(&text);
        tide_sb want_r, want_c;
        tide_sb_init(&want_r), tide_sb_init(&want_c);
        if (thinking) {
            rand_text(&r, &piece, 12);
            tide_sb_addn(&want_r, piece.s, piece.len);
            tide_sb_addn(&text, piece.s, piece.len);
            tide_sb_add(&text, "</think>");
        }
        rand_text(&r, &piece, 12);
        if (ncalls && piece.len && piece.s[piece.len - 1] == '\n') tide_sb_add(&piece, "x"); /* keep the \n\n rule simple */
        tide_sb_addn(&want_c, piece.s, piece.len);
        tide_sb_addn(&text, piece.s, piece.len);
        json_t *want_calls = json_array();
        char names[4][24];
        if (ncalls) tide_sb_add(&text, "\n\n" CALLS "\n");
        for (int c = 0; c < ncalls; c++) {
            snprintf(names[c], sizeof names[c], "tool_%d", c);
            tide_sb_add(&text, "<\xef\xbd\x9c" "DSML\xef\xbd\x9c invoke name=\"");
            tide_sb_add(&text, names[c]);
            tide_sb_add(&text, "\">\n");
            json_t *args = json_object();
            int np = (int)(tu_next(&r) % 3);
            for (int k = 0; k < np; k++) {
                char key[16];
                snprintf(key, sizeof key, "k%d", k);
                int is_str = tu_next(&r) % 2;
                tide_sb_add(&text, "<\xef\xbd\x9c" "DSML\xef\xbd\x9c parameter name=\"");
                tide_sb_add(&text, key);
                tide_sb_add(&text, is_str ? "\" string=\"true\">" : "\" string=\"false\">");
                if (is_str) {
                    rand_text(&r, &piece, 10);
                    tide_sb_addn(&text, piece.s, piece.len);
                    json_object_set_new(args, key, json_stringn(piece.s ? piece.s : "", piece.len));
                } else {
                    const char *v = VALUES[tu_next(&r) % (sizeof VALUES / sizeof *VALUES)];
                    tide_sb_add(&text, v);
                    json_t *jv = json_loads(v, JSON_DECODE_ANY, NULL);
                    json_object_set_new(args, key, jv ? jv : json_string(v));
                }
                tide_sb_add(&text, EPAR "\n");
            }
            tide_sb_add(&text, EINV "\n");
            json_array_append_new(want_calls, args);
        }
        if (ncalls) tide_sb_add(&text, ECALLS);
        tide_sb_add(&text, EOS);
        /* parse whole and in random chunks */
        for (int split = 0; split < 3; split++) {
            tide_outparse_cfg cfg = {.in_reasoning = thinking};
            const char *stops[] = {"STOP"};
            cfg.stops = stops, cfg.n_stops = 1;
            tide_outparse *p;
            tide_status st = {0};
            assert_int_equal(tide_outparse_new(&cfg, &p, &st), 0);
            for (size_t at = 0; at < text.len;) {
                size_t step = split ? 1 + tu_next(&r) % (split == 1 ? 3 : 40) : text.len;
                if (step > text.len - at) step = text.len - at;
                assert_int_equal(tide_outparse_feed(p, text.s + at, step, &st), 0);
                at += step;
            }
            assert_int_equal(tide_outparse_finish(p, &st), 0);
            size_t n;
            const char *got = tide_outparse_reasoning(p, &n);
            if (n != want_r.len || (n && memcmp(got, want_r.s, n))) fail_msg("iter %d: reasoning differs", iter);
            got = tide_outparse_content(p, &n);
            if (n != want_c.len || (n && memcmp(got, want_c.s, n)))
                fail_msg("iter %d: content \"%.*s\" want \"%.*s\"", iter, (int)n, got, (int)want_c.len, want_c.s);
            assert_int_equal(tide_outparse_end(p), TIDE_PEND_EOS);
            assert_int_equal(tide_outparse_ncalls(p), (size_t)ncalls);
            for (int c = 0; c < ncalls; c++) {
                const tide_parsed_call *pc = tide_outparse_call(p, (size_t)c);
                assert_string_equal(pc->name, names[c]);
                assert_true(pc->complete);
                json_error_t jerr;
                json_t *args = json_loadb(pc->args.s, pc->args.len, 0, &jerr);
                if (!args) fail_msg("iter %d: arguments are not JSON: %.*s", iter, (int)pc->args.len, pc->args.s);
                if (!json_equal(args, json_array_get(want_calls, (size_t)c)))
                    fail_msg("iter %d call %d: %.*s", iter, c, (int)pc->args.len, pc->args.s);
                json_decref(args);
            }
            tide_outparse_free(p);
        }
        json_decref(want_calls);
        tide_sb_free(&want_r), tide_sb_free(&want_c);
    }
    tide_sb_free(&text), tide_sb_free(&piece);
}

static void test_limits(void **state) {
    (void)state;
    tide_outparse *p;
    tide_status st = {0};
    const char *stops[17];
    for (int i = 0; i < 17; i++) stops[i] = "x";
    tide_outparse_cfg cfg = {.stops = stops, .n_stops = 17};
    assert_int_equal(tide_outparse_new(&cfg, &p, &st), -1);
    const char *empty[] = {""};
    cfg = (tide_outparse_cfg){.stops = empty, .n_stops = 1};
    assert_int_equal(tide_outparse_new(&cfg, &p, &st), -1);
    /* A flood of invokes is capped, not grown without bound. */
    cfg = (tide_outparse_cfg){0};
    assert_int_equal(tide_outparse_new(&cfg, &p, &st), 0);
    assert_int_equal(tide_outparse_feed(p, CALLS, strlen(CALLS), &st), 0);
    for (int i = 0; i < 300; i++) {
        const char *one = INV("f") EINV;
        assert_int_equal(tide_outparse_feed(p, one, strlen(one), &st), 0);
    }
    assert_int_equal(tide_outparse_finish(p, &st), 0);
    assert_int_equal(tide_outparse_ncalls(p), TIDE_OUTPARSE_MAX_CALLS);
    tide_outparse_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole),
        cmocka_unit_test(test_every_split),
        cmocka_unit_test(test_random_grammar),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
