/* Every way a checkpoint can be broken gives -1 and a message naming the
 * file (and the tensor, where there is one), never a crash or a leak (this
 * suite also runs under ASan+UBSan). One hand-written file per corruption
 * class, truncation at every header byte and at sampled data bytes of a
 * real shard, and the index/shard disagreements. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "testutil.h"

typedef struct {
    char *dir;
    char path[4200];
} fixture;

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    fx->dir = tu_mkdtemp("stc");
    *state = fx;
    return fx->dir ? 0 : -1;
}

static int teardown(void **state) {
    fixture *fx = *state;
    tu_rmtree(fx->dir);
    free(fx->dir);
    free(fx);
    return 0;
}

/* Writes `name` in the fixture dir: u64 n, then `len` header/body bytes. */
static const char *write_raw(fixture *fx, const char *name, uint64_t n, const void *bytes, size_t len) {
    snprintf(fx->path, sizeof fx->path, "%s/%s", fx->dir, name);
    FILE *f = fopen(fx->path, "wb");
    assert_non_null(f);
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(n >> (8 * i));
    assert_int_equal(fwrite(le, 1, 8, f), 8);
    if (len) assert_int_equal(fwrite(bytes, 1, len, f), len);
    fclose(f);
    return fx->path;
}

/* A file with JSON header `json` followed by `data_len` bytes of data. */
static const char *write_st(fixture *fx, const char *name, const char *json, size_t data_len) {
    size_t jl = strlen(json);
    uint8_t *buf = calloc(1, jl + data_len + 1);
    memcpy(buf, json, jl);
    for (size_t i = 0; i < data_len; i++) buf[jl + i] = (uint8_t)i;
    const char *p = write_raw(fx, name, jl, buf, jl + data_len);
    free(buf);
    return p;
}

static void write_text(fixture *fx, const char *name, const char *text) {
    snprintf(fx->path, sizeof fx->path, "%s/%s", fx->dir, name);
    FILE *f = fopen(fx->path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Opening must fail and the message contain each of the (up to 3) needles. */
static void expect_fail(const char *path, const char *a, const char *b, const char *c) {
    tide_status st = {0};
    tide_st *ck = (tide_st *)1;
    int rc = tide_st_open(path, &ck, &st);
    if (rc != -1) fail_msg("opening %s succeeded; expected an error with '%s'", path, a);
    assert_null(ck);
    assert_int_not_equal(st.code, TIDE_OK);
    const char *needles[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (needles[i] && !strstr(st.msg, needles[i]))
            fail_msg("message lacks '%s': %s", needles[i], st.msg);
}

#define ENTRY(name, dt, shape, b, e) \
    "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_header_classes(void **state) {
    fixture *fx = *state;
    const char *f = "bad.safetensors";
    expect_fail(write_st(fx, f, "not json at all!", 0), f, "not valid JSON", NULL);
    expect_fail(write_st(fx, f, "[1,2,3]", 0), f, "an array, not a JSON object", NULL);
    expect_fail(write_st(fx, f, "123", 0), f, "not valid JSON", NULL);
    expect_fail(write_st(fx, f, "\"str\"", 0), f, "not valid JSON", NULL);
    expect_fail(write_st(fx, f, "{" ENTRY("a.w", "F33", "[1]", 0, 4) "}", 4), f, "'a.w'",
                "unknown dtype 'F33'");
    expect_fail(write_st(fx, f, "{\"a.w\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                "'a.w'", "\"dtype\" is an integer", NULL);
    expect_fail(write_st(fx, f, "{\"a.w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4), "'a.w'",
                "\"dtype\" is missing", NULL);
    expect_fail(write_st(fx, f, "{\"a.w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4), "'a.w'",
                "\"shape\" is missing", NULL);
    expect_fail(write_st(fx, f, "{\"a.w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4), "'a.w'",
                "data_offsets", NULL);
    expect_fail(write_st(fx, f, "{\"a.w\":5}", 0), "'a.w'", "not an object", NULL);
    /* shape / size mismatch */
    expect_fail(write_st(fx, f, "{" ENTRY("a.w", "F32", "[2]", 0, 4) "}", 4), f, "'a.w'",
                "hold 4 bytes but F32 [2] needs 8");
    expect_fail(write_st(fx, f, "{" ENTRY("x", "F4", "[3]", 0, 2) "}", 2), "'x'", "odd", NULL);
    expect_fail(write_st(fx, f, "{" ENTRY("x", "F4", "[4]", 0, 4) "}", 4), "'x'", "needs 2", NULL);
    /* offsets: overlap, gap, leftovers, past the end, reversed */
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[2]", 0, 8) "," ENTRY("b", "F32", "[2]", 4, 12) "}", 12),
                f, "'b'", "overlap tensor 'a' [0, 8]");
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[1]", 0, 4) "," ENTRY("b", "F32", "[1]", 8, 12) "}", 12),
                f, "'b'", "gap of 4 bytes after tensor 'a'");
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[1]", 4, 8) "}", 8), "'a'",
                "gap of 4 bytes after the start", NULL);
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[3]", 0, 12) "}", 16), f,
                "4 bytes after the last tensor 'a'", NULL);
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[2]", 0, 8) "}", 4), f, "'a'",
                "data_offsets [0, 8] run past the end of the file (4 bytes of data)");
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[0]", 8, 4) "}", 8), "'a'", "end before", NULL);
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[1]", -4, 0) "}", 4), "'a'", "non-negative integers", NULL);
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[1]", 0.0, 4) "}", 4), "'a'", "non-negative integers", NULL);
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[1]", 0, 4e0) "}", 4), "'a'", "non-negative integers", NULL);
    expect_fail(write_st(fx, f, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4),
                "'a'", "two non-negative integers", NULL);
    expect_fail(write_st(fx, f, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":\"0,4\"}}", 4),
                "'a'", "two non-negative integers", NULL);
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[1]", 0, 99999999999999999999) "}", 4), f,
                "not valid JSON", NULL);
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[1]", 0, 9223372036854775807) "}", 4), "'a'",
                "needs 4", NULL);
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[-1]", 0, 4) "}", 4), "'a'", "shape[0]", NULL);
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[1.5]", 0, 4) "}", 4), "'a'", "shape[0]", NULL);
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 4), "'a'",
                "9 dimensions", NULL);
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "{}", 0, 4) "}", 4), "'a'", "\"shape\" is an object", NULL);
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[4611686018427387904,4]", 0, 4) "}", 4), "'a'",
                "too large", NULL);
    /* duplicates, metadata */
    expect_fail(write_st(fx, f, "{" ENTRY("a", "F32", "[1]", 0, 4) "," ENTRY("a", "F32", "[1]", 0, 4) "}", 4),
                f, "duplicate", "a");
    expect_fail(write_st(fx, f, "{\"__metadata__\":{\"k\":1}," ENTRY("a", "F32", "[1]", 0, 4) "}", 4), f,
                "\"__metadata__\" value of 'k' is an integer", NULL);
    expect_fail(write_st(fx, f, "{\"__metadata__\":[]}", 0), f, "\"__metadata__\" is an array", NULL);
    expect_fail(write_st(fx, f, "{}", 4), f, "4 bytes of data but the header lists no tensor", NULL);
    /* bytes that are not JSON text */
    expect_fail(write_st(fx, f, "{\"a\xff\":1}", 0), f, "not valid JSON", NULL);
    expect_fail(write_raw(fx, f, 4, "{}\0 ", 4), f, "not valid JSON", NULL);
    char *deep = malloc(200002);
    memset(deep, '[', 100000);
    memset(deep + 100000, ']', 100000);
    deep[200000] = 0;
    expect_fail(write_st(fx, f, deep, 0), f, "not valid JSON", NULL); /* no stack overflow */
    free(deep);
    /* the length prefix */
    expect_fail(write_raw(fx, f, (uint64_t)1 << 63, "{}", 2), f, "exceeds the limit", NULL);
    expect_fail(write_raw(fx, f, 100000001, "{}", 2), f, "exceeds the limit", NULL);
    expect_fail(write_raw(fx, f, 1000, "{}", 2), f, "header length 1000 runs past the end", NULL);
    expect_fail(write_raw(fx, f, 0, "", 0), f, "too small", NULL);
    expect_fail(write_raw(fx, f, 1, "{", 1), f, "too small", NULL);
    snprintf(fx->path, sizeof fx->path, "%s/%s", fx->dir, f);
    FILE *fp = fopen(fx->path, "wb");
    fwrite("\x02\0\0", 1, 3, fp);
    fclose(fp);
    expect_fail(fx->path, f, "3 bytes, too short", NULL);
    fp = fopen(fx->path, "wb");
    fclose(fp);
    expect_fail(fx->path, f, "0 bytes, too short", NULL);
}

/* The smallest valid files still open (guards against over-strict checks). */
static void test_valid_edge_files(void **state) {
    fixture *fx = *state;
    tide_status st = {0};
    tide_st *ck = NULL;
    const char *ok[] = {
        "{}",
        "{\"__metadata__\":{}}      ",
        "{" ENTRY("a", "F32", "[0]", 0, 0) "," ENTRY("b", "U8", "[]", 0, 1) "," ENTRY("c", "BF16", "[0,7]", 1, 1) "}",
        "{" ENTRY("z", "F4", "[2,3]", 0, 3) "," ENTRY("a", "F8_E8M0", "[1]", 3, 4) "}",
    };
    const size_t data[] = {0, 0, 1, 4};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        const char *p = write_st(fx, "ok.safetensors", ok[i], data[i]);
        if (tide_st_open(p, &ck, &st) != 0) fail_msg("%s: %s", ok[i], st.msg);
        tide_st_close(ck);
    }
    /* The F4 tensor: 6 values, 3 bytes; a U8 at an odd offset is fine. */
    assert_int_equal(tide_st_open(fx->path, &ck, &st), 0);
    const tide_tensor *t = tide_st_find(ck, "z");
    assert_int_equal(t->nelem, 6);
    assert_int_equal(t->nbytes, 3);
    assert_int_equal(t->offset, 8 + strlen(ok[3]));
    tide_st_close(ck);
}

/* Cut a real shard at every header byte and at sampled data bytes. */
static void test_truncation(void **state) {
    fixture *fx = *state;
    tu_rng r = {tu_seed() ^ 0x7c};
    char ck_dir[4300];
    snprintf(ck_dir, sizeof ck_dir, "%s/ck", fx->dir);
    tide_status st = {0};
    tide_stw *w = NULL;
    assert_int_equal(tide_stw_open(ck_dir, 2, &w, &st), 0);
    const char *names[] = {"layers.0.attn.wkv.weight", "layers.0.attn.wkv.scale", "embed.weight", "norm.weight"};
    const tide_dtype dts[] = {TIDE_DT_F8_E4M3, TIDE_DT_F8_E8M0, TIDE_DT_BF16, TIDE_DT_F32};
    int64_t shapes[4][2] = {{64, 64}, {2, 2}, {32, 16}, {16, 0}};
    uint8_t buf[8192];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)tu_next(&r);
    for (int i = 0; i < 4; i++) assert_int_equal(tide_stw_add(w, i % 2, names[i], dts[i], i == 3 ? 1 : 2, shapes[i], &st), 0);
    for (int i = 0; i < 4; i++) {
        uint64_t nb;
        tide_dtype_nbytes(dts[i], i == 3 ? 1 : 2, shapes[i], NULL, &nb, &st);
        assert_int_equal(tide_stw_write(w, names[i], buf, nb, &st), 0);
    }
    assert_int_equal(tide_stw_finish(w, &st), 0);
    char shard[4400];
    snprintf(shard, sizeof shard, "%s/model-00001-of-00002.safetensors", ck_dir);
    FILE *f = fopen(shard, "rb");
    uint8_t *orig = malloc(16384);
    size_t size = fread(orig, 1, 16384, f);
    fclose(f);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | orig[i];
    assert_true(size > 8 + hlen + 1000);
    for (size_t cut = 0; cut < size; cut += cut < 8 + hlen + 16 ? 1 : 1 + tu_next(&r) % 97) {
        f = fopen(shard, "wb");
        assert_int_equal(fwrite(orig, 1, cut, f), cut);
        fclose(f);
        if (cut >= 8 + hlen)
            expect_fail(ck_dir, "model-00001-of-00002.safetensors: tensor '",
                        "run past the end of the file", NULL);
        else
            expect_fail(ck_dir, "model-00001-of-00002.safetensors", NULL, NULL);
    }
    f = fopen(shard, "wb"); /* an extra byte at the end is an error too */
    fwrite(orig, 1, size, f);
    fputc(0, f);
    fclose(f);
    expect_fail(ck_dir, "model-00001-of-00002.safetensors", "1 bytes after the last tensor", NULL);
    f = fopen(shard, "wb");
    fwrite(orig, 1, size, f);
    fclose(f);
    tide_st *ck = NULL;
    if (tide_st_open(ck_dir, &ck, &st) != 0) fail_msg("%s", st.msg);
    tide_st_close(ck);
    free(orig);
}

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

/* Two shards {a, b} and {c} with an index; then each mismatch in turn. */
static void write_pair(fixture *fx) {
    write_st(fx, SHARD1, "{" ENTRY("a", "F32", "[1]", 0, 4) "," ENTRY("b", "U8", "[4]", 4, 8) "}", 8);
    write_st(fx, SHARD2, "{" ENTRY("c", "I64", "[1]", 0, 8) "}", 8);
}

static void index_case(fixture *fx, const char *index_json, const char *a, const char *b, const char *c) {
    write_text(fx, "model.safetensors.index.json", index_json);
    expect_fail(fx->dir, a, b, c);
}

#define WMAP(x) "{\"metadata\":{\"total_size\":16},\"weight_map\":{" x "}}"

static void test_index_classes(void **state) {
    fixture *fx = *state;
    write_pair(fx);
    tide_status st = {0};
    tide_st *ck = NULL;
    write_text(fx, "model.safetensors.index.json",
               WMAP("\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\""));
    if (tide_st_open(fx->dir, &ck, &st) != 0) fail_msg("%s", st.msg);
    assert_int_equal(tide_st_count(ck), 3);
    assert_int_equal(tide_st_nfiles(ck), 2);
    assert_string_equal(tide_st_file_name(ck, 1), SHARD2);
    assert_string_equal(tide_st_find(ck, "c")->file, SHARD2);
    tide_st_close(ck);

    index_case(fx, WMAP("\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"c\":\"model-00003-of-00002.safetensors\""),
               "model-00003-of-00002.safetensors", "cannot open", NULL);
    assert_int_equal(tide_st_open(fx->dir, &ck, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_MISSING);
    index_case(fx, WMAP("\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\",\"ghost\":\"" SHARD1 "\""),
               "names tensor 'ghost' in " SHARD1 ", which does not contain it", NULL, NULL);
    index_case(fx, WMAP("\"a\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\""), SHARD1,
               "tensor 'b' is not in model.safetensors.index.json", NULL);
    index_case(fx, WMAP("\"a\":\"" SHARD1 "\",\"b\":\"" SHARD2 "\",\"c\":\"" SHARD2 "\""), SHARD1,
               "tensor 'b' is here but", "places it in " SHARD2);
    index_case(fx, WMAP("\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\",\"a\":\"" SHARD2 "\""),
               "model.safetensors.index.json", "duplicate", NULL);
    index_case(fx, WMAP(""), "weight_map\" is empty", NULL, NULL);
    index_case(fx, WMAP("\"a\":\"../" SHARD1 "\""), "tensor 'a'", "not a shard file name", NULL);
    index_case(fx, WMAP("\"a\":\"..\""), "tensor 'a'", "not a shard file name", NULL);
    index_case(fx, WMAP("\"a\":7"), "tensor 'a'", "not a shard file name", NULL);
    index_case(fx, "{\"metadata\":{}}", "weight_map\" is missing", NULL, NULL);
    index_case(fx, "{\"weight_map\":[]}", "weight_map\" is not an object", NULL, NULL);
    index_case(fx, "{\"metadata\":3,\"weight_map\":{\"a\":\"x\"}}", "\"metadata\" is not an object", NULL, NULL);
    index_case(fx, "[]", "model.safetensors.index.json", "not a JSON object", NULL);
    index_case(fx, "{\"weight_map\":", "model.safetensors.index.json", "not valid JSON", NULL);
    index_case(fx, "", "model.safetensors.index.json", "not valid JSON", NULL);

    /* the same tensor in two shards */
    write_st(fx, SHARD2, "{" ENTRY("c", "I64", "[1]", 0, 8) "," ENTRY("a", "F32", "[1]", 8, 12) "}", 12);
    index_case(fx, WMAP("\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\""), SHARD2,
               "tensor 'a' is here but", "places it in " SHARD1);
    /* a corrupt shard behind a good index names the shard and the index */
    write_st(fx, SHARD2, "{" ENTRY("c", "I64", "[2]", 0, 8) "}", 8);
    index_case(fx, WMAP("\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\""),
               "shard " SHARD2 " named in model.safetensors.index.json", "tensor 'c'", "needs 16");
}

static void test_paths(void **state) {
    fixture *fx = *state;
    char p[4300];
    snprintf(p, sizeof p, "%s/empty", fx->dir);
    tide_status st = {0};
    tide_st *ck = NULL;
    assert_int_equal(tide_st_open("", &ck, &st), -1);
    snprintf(p, sizeof p, "%s/nothing-here", fx->dir);
    expect_fail(p, "nothing-here", "cannot open", NULL);
    expect_fail(fx->dir, "no model.safetensors.index.json and no model.safetensors", NULL, NULL);
    snprintf(p, sizeof p, "%s/model.safetensors", fx->dir);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "mkdir '%s'", p);
    assert_int_equal(tu_system(cmd, NULL), 0);
    expect_fail(p, "no model.safetensors.index.json", NULL, NULL); /* a directory named like a file */
    snprintf(p, sizeof p, "%s/x.index.json", fx->dir);
    write_text(fx, "x.index.json", WMAP("\"a\":\"absent.safetensors\""));
    expect_fail(p, "absent.safetensors", "cannot open", NULL);
    /* a JSON text given as a safetensors file (--model DIR/config.json):
     * said so, not reported as a header length of 7.6e18 */
    write_text(fx, "config.json", "{\"model_type\": \"deepseek_v41\", \"text_config\": {}}");
    snprintf(p, sizeof p, "%s/config.json", fx->dir);
    expect_fail(p, "config.json: not a safetensors file: it starts with '{'", NULL, NULL);
    /* a FIFO (as a file, or as the index of a directory) is refused at once:
     * opening it for reading would block until a writer came */
    snprintf(p, sizeof p, "%s/fifo.safetensors", fx->dir);
    snprintf(cmd, sizeof cmd, "mkfifo '%s' && mkdir '%s/d' && mkfifo '%s/d/model.safetensors.index.json'", p,
             fx->dir, fx->dir);
    assert_int_equal(tu_system(cmd, NULL), 0);
    expect_fail(p, "fifo.safetensors is a FIFO, not a regular file", NULL, NULL);
    snprintf(p, sizeof p, "%s/d", fx->dir);
    expect_fail(p, "model.safetensors.index.json is a FIFO, not a regular file", NULL, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_header_classes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_valid_edge_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_classes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paths, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
