/* Constrained decoding through the engine on the tiny synthetic model (its
 * vocabulary given random token bytes: every single byte plus random
 * multi-byte pieces, some splitting UTF-8 characters): every request that
 * stops has an output the constraint matches in full, JSON outputs parse,
 * a request cut at max_tokens ends with reason "length" on a valid prefix,
 * and a constraint whose output is complete with nothing to add stops the
 * request without an end token. Random prompts and sampling (seed printed). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/constrain.h"
#include "engine/engine.h"
#include "model/model.h"
#include "test_ops_util.h"
#include "tide.h"
#include "cons_testutil.h"

typedef tn_model_fixture fixture;

static int setup(void **state) { return tn_model_setup(state, "cons", 0, 3); }
static int teardown(void **state) { return tn_model_teardown(state); }

typedef struct cons_case { tide_cons_kind k; const char *text; int json; } cons_case;

/* overlap: 1 runs the forward pass on the engine's thread, the masks being
 * computed meanwhile (prefetch_masks); the tokens must be the same. */
static void run_constrained(fixture *f, int overlap, int32_t *out_tokens, int64_t *n_out) {
    tu_rng r = {f->seed};
    tide_engine_config c = tide_engine_config_default();
    c.n_threads = 1;
    c.overlap = overlap;
    c.max_seqs = 8;
    c.seed = f->seed;
    c.model_dir = f->dir;
    tide_status st = {0};
    tide_engine *e;
    assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), 0);
    const int32_t *eos;
    int n_eos = tide_engine_eos_tokens(e, &eos);
    assert_true(n_eos > 0);
    int V = (int)tide_engine_vocab_size(e);
    vocab vb = make_vocab(&r, V, eos, n_eos);
    tide_cons_vocab *cv = NULL;
    assert_int_equal(tide_cons_vocab_new((const uint8_t *const *)vb.b, vb.len, vb.skip, V, &cv, &st), 0);
    static const cons_case cases[] = {
        {TIDE_CONS_REGEX, "(ab|cd)+-[0-9]{2}", 0},
        {TIDE_CONS_REGEX, "x[\xc3\xa9\xe2\x82\xac]{1,3}y?", 0},
        {TIDE_CONS_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":4},"
                                "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99}},\"required\":[\"name\",\"age\"],"
                                "\"additionalProperties\":false}", 1},
        {TIDE_CONS_JSON_SCHEMA, "{\"type\":\"array\",\"items\":{\"enum\":[\"a\",1,null]},\"minItems\":1,\"maxItems\":3}", 1},
        {TIDE_CONS_JSON_SCHEMA, "{\"enum\":[\"only\"]}", 1},
    };
    enum { N = 5, PER = 4 };
    tide_request_id ids[N * PER];
    tide_cons_grammar *gs[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(tide_cons_compile(cases[i].k, cases[i].text, strlen(cases[i].text), &gs[i], &st), 0);
        for (int k = 0; k < PER; k++) {
            int32_t prompt[6];
            for (int j = 0; j < 6; j++) prompt[j] = 2 + (int32_t)(tu_next(&r) % (uint64_t)(V - 2));
            tide_request q = tide_request_default();
            q.prompt = prompt;
            q.n_prompt = 6;
            q.sampling.temperature = 1.5;
            q.sampling.max_tokens = k == 0 ? 3 : 80; /* the first of each is cut short */
            q.stop_at_eos = k != 3;                  /* the last has no end token to stop with */
            assert_int_equal(tide_cons_new(gs[i], cv, &q.constraint, &st), 0);
            assert_int_equal(tide_engine_submit(e, &q, &ids[i * PER + k], &st), 0);
        }
    }
    assert_int_equal(tide_engine_run(e, &st), 0);
    int stopped = 0;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < PER; k++) {
            tide_request_info info;
            assert_int_equal(tide_engine_get(e, ids[i * PER + k], &info, &st), 0);
            if (info.reason == TIDE_FINISH_ERROR) fprintf(stderr, "error: %s\n", info.error);
            assert_true(info.reason == TIDE_FINISH_STOP || info.reason == TIDE_FINISH_LENGTH);
            /* the output's bytes (a final end token is not text) */
            char text[4096];
            size_t n = 0;
            int64_t no = info.n_output;
            if (info.reason == TIDE_FINISH_STOP && no > 0 && vb.skip[info.output[no - 1]]) no--;
            for (int64_t t = 0; t < no; t++) {
                int32_t id = info.output[t];
                assert_false(vb.skip[id]);
                assert_true(n + vb.len[id] < sizeof text);
                memcpy(text + n, vb.b[id], vb.len[id]);
                n += vb.len[id];
            }
            text[n] = 0;
            int full = tide_cons_grammar_matches(gs[i], text, n, &st);
            if (info.reason == TIDE_FINISH_STOP) {
                if (full != 1) fprintf(stderr, "/%s/: stopped on \"%s\"\n", cases[i].text, text);
                assert_int_equal(full, 1);
                stopped++;
                if (cases[i].json) {
                    json_error_t je;
                    json_t *j = json_loadb(text, n, JSON_DECODE_ANY, &je);
                    if (!j) fprintf(stderr, "not JSON: %s\n", text);
                    assert_non_null(j);
                    json_decref(j);
                }
            } else {
                assert_int_equal((int)info.n_output, k == 0 ? 3 : 80);
            }
            if (k == 3 && i == 4) { /* {"enum":["only"]} without an end token: stops when complete */
                assert_int_equal(info.reason, TIDE_FINISH_STOP);
                assert_string_equal(text, "\"only\"");
            }
            for (int64_t t = 0; t < info.n_output && *n_out < 4096; t++) out_tokens[(*n_out)++] = info.output[t];
            out_tokens[(*n_out)++] = -1;
            tide_engine_release(e, ids[i * PER + k]);
        }
    assert_true(stopped >= N);
    /* a constraint over another vocabulary is refused (and freed) */
    tide_cons_vocab *small = NULL;
    assert_int_equal(tide_cons_vocab_new((const uint8_t *const *)vb.b, vb.len, vb.skip, 300, &small, &st), 0);
    tide_request q = tide_request_default();
    int32_t p[2] = {5, 6};
    q.prompt = p;
    q.n_prompt = 2;
    assert_int_equal(tide_cons_new(gs[0], small, &q.constraint, &st), 0);
    tide_request_id id;
    assert_int_equal(tide_engine_submit(e, &q, &id, &st), -1);
    assert_non_null(strstr(st.msg, "vocabulary"));
    tide_cons_vocab_free(small);
    for (int i = 0; i < N; i++) tide_cons_grammar_unref(gs[i]);
    tide_engine_destroy(e);
    tide_cons_vocab_free(cv);
    free_vocab(&vb);
}

static void test_constrained_generation(void **state) {
    fixture *f = *state;
    static int32_t a[8192], b[8192];
    int64_t na = 0, nb = 0;
    run_constrained(f, 0, a, &na);
    run_constrained(f, 1, b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, (size_t)na * sizeof *a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_constrained_generation, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
