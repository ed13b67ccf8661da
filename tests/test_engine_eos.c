/* The stop ids come from the checkpoint (model/gen_config.h): `tide synth`
 * writes generation_config.json with EOS 1; eos_token_id may be an integer
 * or a list, in generation_config.json or config.json (top level or
 * text_config); bad values fail naming the file. A request with
 * stop_at_eos stops at the first of them it generates (reason "stop"), one
 * without runs to max_tokens; `tide run --prompt-ids` stops there unless
 * --ignore-eos. The prompt is random (seed printed). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/gen_config.h"
#include "model/model.h"
#include "test_ops_util.h"
#include "tide.h"

typedef tn_model_fixture fixture;

static int setup(void **state) { return tn_model_setup(state, "eos", 0, 0); }
static int teardown(void **state) { return tn_model_teardown(state); }

static void write_text(const char *dir, const char *name, const char *text) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    assert_int_equal(fclose(fp), 0);
}

static void remove_file(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    remove(path);
}

/* config.json with eos (a JSON text) set at the top level or in text_config
 * (NULL: removed from both). */
static void set_config_eos(const char *dir, const char *where, const char *eos) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *c = json_load_file(path, 0, &je);
    assert_non_null(c);
    json_t *t = json_object_get(c, "text_config");
    json_object_del(c, "eos_token_id");
    if (t) json_object_del(t, "eos_token_id");
    if (eos) {
        json_t *v = json_loads(eos, JSON_DECODE_ANY, &je);
        assert_non_null(v);
        json_object_set_new(!strcmp(where, "text") ? t : c, "eos_token_id", v);
    }
    assert_int_equal(json_dump_file(c, path, JSON_INDENT(2)), 0);
    json_decref(c);
}

static void test_synth_and_sources(void **state) {
    fixture *f = *state;
    int64_t V = f->m->cfg.text.vocab_size;
    tide_gen_config g;
    tide_status st = {0};
    /* what tide synth wrote */
    assert_int_equal(tide_gen_config_read(f->dir, V, &g, &st), 0);
    assert_int_equal(g.n_eos, 1);
    assert_int_equal(g.eos[0], 1);
    assert_non_null(strstr(g.source, "generation_config.json"));
    /* a list */
    write_text(f->dir, "generation_config.json", "{\"eos_token_id\": [7, 3, 9]}");
    assert_int_equal(tide_gen_config_read(f->dir, V, &g, &st), 0);
    assert_int_equal(g.n_eos, 3);
    assert_int_equal(g.eos[0], 7);
    assert_int_equal(g.eos[2], 9);
    /* none there: config.json's, then text_config's */
    write_text(f->dir, "generation_config.json", "{\"bos_token_id\": 0}");
    set_config_eos(f->dir, "top", "5");
    assert_int_equal(tide_gen_config_read(f->dir, V, &g, &st), 0);
    assert_int_equal(g.n_eos, 1);
    assert_int_equal(g.eos[0], 5);
    assert_non_null(strstr(g.source, "config.json"));
    remove_file(f->dir, "generation_config.json");
    set_config_eos(f->dir, "text", "[11, 12]");
    assert_int_equal(tide_gen_config_read(f->dir, V, &g, &st), 0);
    assert_int_equal(g.n_eos, 2);
    assert_int_equal(g.eos[1], 12);
    assert_non_null(strstr(g.source, "text_config"));
    /* none at all */
    set_config_eos(f->dir, "top", NULL);
    assert_int_equal(tide_gen_config_read(f->dir, V, &g, &st), 0);
    assert_int_equal(g.n_eos, 0);
    /* bad values name the file and the key */
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"{\"eos_token_id\": \"1\"}", "generation_config.json: eos_token_id: expected a token id, got a string"},
        {"{\"eos_token_id\": -1}", "outside the vocabulary"},
        {"{\"eos_token_id\": 99999999}", "outside the vocabulary"},
        {"{\"eos_token_id\": []}", "0 ids"},
        {"{\"eos_token_id\": [1, 2.5]}", "got a real number"},
        {"{\"eos_token_id\": 1", "generation_config.json: not JSON"},
        {"[1]", "expected an object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(f->dir, "generation_config.json", bad[i].text);
        st = (tide_status){0};
        assert_int_equal(tide_gen_config_read(f->dir, V, &g, &st), -1);
        if (!strstr(st.msg, bad[i].needle)) fail_msg("%s: '%s' lacks '%s'", bad[i].text, st.msg, bad[i].needle);
    }
    remove_file(f->dir, "generation_config.json");
}

/* The greedy first token of prompt (no stop ids). */
static int32_t first_token(const fixture *f, const int32_t *prompt, int64_t n) {
    tide_engine_config c = tide_engine_config_default();
    tide_engine *e;
    tide_status st = {0};
    if (tide_engine_create_with_model(&c, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
    const int32_t *ids;
    assert_int_equal(tide_engine_eos_tokens(e, &ids), 0); /* no model_dir: none */
    tide_request r = tide_request_default();
    r.prompt = prompt;
    r.n_prompt = n;
    r.sampling.temperature = 0;
    r.sampling.max_tokens = 1;
    tide_request_id id;
    assert_int_equal(tide_engine_submit(e, &r, &id, &st), 0);
    assert_int_equal(tide_engine_run(e, &st), 0);
    tide_request_info info;
    assert_int_equal(tide_engine_get(e, id, &info, &st), 0);
    assert_int_equal(info.n_output, 1);
    int32_t t = info.output[0];
    tide_engine_destroy(e);
    return t;
}

static void test_requests_stop_at_eos(void **state) {
    fixture *f = *state;
    tu_rng rng = {f->seed};
    int32_t prompt[5];
    for (int i = 0; i < 5; i++) prompt[i] = 2 + (int32_t)(tu_next(&rng) % 100);
    int32_t t = first_token(f, prompt, 5);
    /* the model's EOS list is [t + 1 mod 100 (never produced first), t] */
    char text[128];
    snprintf(text, sizeof text, "{\"eos_token_id\": [%d, %d]}", (t + 1) % 100 == t ? 0 : (t + 1) % 100, t);
    write_text(f->dir, "generation_config.json", text);
    tide_engine_config c = tide_engine_config_default();
    c.model_dir = f->dir;
    tide_engine *e;
    tide_status st = {0};
    if (tide_engine_create_with_model(&c, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
    const int32_t *ids;
    assert_int_equal(tide_engine_eos_tokens(e, &ids), 2);
    assert_int_equal(ids[1], t);
    tide_request_id a, b;
    tide_request r = tide_request_default();
    r.prompt = prompt;
    r.n_prompt = 5;
    r.sampling.temperature = 0;
    r.sampling.max_tokens = 4;
    r.stop_at_eos = 1;
    assert_int_equal(tide_engine_submit(e, &r, &a, &st), 0);
    r.stop_at_eos = 0;
    assert_int_equal(tide_engine_submit(e, &r, &b, &st), 0);
    assert_int_equal(tide_engine_run(e, &st), 0);
    tide_request_info info;
    assert_int_equal(tide_engine_get(e, a, &info, &st), 0);
    assert_int_equal(info.reason, TIDE_FINISH_STOP);
    assert_int_equal(info.n_output, 1);
    assert_int_equal(info.output[0], t);
    assert_int_equal(tide_engine_get(e, b, &info, &st), 0);
    assert_int_equal(info.reason, TIDE_FINISH_LENGTH);
    assert_int_equal(info.n_output, 4);
    tide_engine_destroy(e);
    /* a bad generation_config.json fails the engine, naming it */
    write_text(f->dir, "generation_config.json", "{\"eos_token_id\": \"x\"}");
    assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), -1);
    assert_non_null(strstr(st.msg, "generation_config.json"));

    /* tide run --prompt-ids: stops at the model's EOS unless --ignore-eos */
    write_text(f->dir, "generation_config.json", text);
    char cmd[8192], *out = NULL;
    for (int ignore = 0; ignore < 2; ignore++) {
        snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --prompt-ids %d,%d,%d,%d,%d --max-tokens 3 %s 2>/dev/null",
                 TIDE_EXE, f->dir, prompt[0], prompt[1], prompt[2], prompt[3], prompt[4], ignore ? "--ignore-eos" : "");
        assert_int_equal(tu_system(cmd, &out), 0);
        int commas = 0;
        for (const char *p = out; *p; p++) commas += *p == ',';
        assert_int_equal(atoi(out), t);
        assert_int_equal(commas, ignore ? 2 : 0);
        free(out);
        out = NULL;
    }
    remove_file(f->dir, "generation_config.json");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synth_and_sources),
        cmocka_unit_test(test_requests_stop_at_eos),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
