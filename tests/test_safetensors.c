/* Safetensors reader and writer: round trips of random tensors of every
 * dtype through sharded and single-file checkpoints, bit-exact; a
 * cross-check against the independent numpy implementation in
 * tools/ref/safetensors_np.py in both directions; the writer's misuse
 * errors. The corruption classes live in test_safetensors_corrupt.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/safetensors.h"
#include "testutil.h"

typedef struct {
    char name[64];
    tide_dtype dt;
    int ndim;
    int64_t shape[TIDE_ST_MAX_DIMS];
    uint64_t nbytes;
    uint8_t *data;
    int shard;
} spec;

/* Random tensors covering every dtype, including empty and 0-d ones and an
 * F4 tensor declared with its 4-bit count. */
static size_t make_specs(tu_rng *r, spec *s, size_t cap, int nshards) {
    size_t n = 0;
    for (int rep = 0; rep < 3; rep++) {
        for (int d = 0; d < TIDE_DT_COUNT && n < cap; d++, n++) {
            spec *t = &s[n];
            memset(t, 0, sizeof *t);
            t->dt = (tide_dtype)d;
            snprintf(t->name, sizeof t->name, "layers.%d.%s.w%llu", rep, tide_dtype_name(t->dt),
                     (unsigned long long)(tu_next(r) % 1000));
            t->ndim = (int)(tu_next(r) % 5); /* 0..4 dims */
            for (int i = 0; i < t->ndim; i++) t->shape[i] = 1 + (int64_t)(tu_next(r) % 7);
            if (rep == 2 && t->ndim > 0 && d % 3 == 0) t->shape[0] = 0; /* some empty tensors */
            if (t->dt == TIDE_DT_F4) { /* even count: double the last dim */
                if (t->ndim == 0) t->ndim = 1, t->shape[0] = 1;
                t->shape[t->ndim - 1] *= 2;
            }
            tide_status st = {0};
            assert_int_equal(tide_dtype_nbytes(t->dt, t->ndim, t->shape, NULL, &t->nbytes, &st), 0);
            t->data = malloc(t->nbytes ? t->nbytes : 1);
            for (uint64_t b = 0; b < t->nbytes; b++) t->data[b] = (uint8_t)tu_next(r);
            t->shard = (int)(tu_next(r) % (uint64_t)nshards);
        }
    }
    return n;
}

static void free_specs(spec *s, size_t n) {
    for (size_t i = 0; i < n; i++) free(s[i].data);
}

/* Writes the specs in a shuffled order, some of them in chunks. */
static void write_specs(tide_stw *w, tu_rng *r, spec *s, size_t n) {
    tide_status st = {0};
    for (size_t i = 0; i < n; i++)
        assert_int_equal(tide_stw_add(w, s[i].shard, s[i].name, s[i].dt, s[i].ndim, s[i].shape, &st), 0);
    assert_int_equal(tide_stw_meta(w, "producer", "test_safetensors", &st), 0);
    size_t *order = malloc(n * sizeof *order);
    for (size_t i = 0; i < n; i++) order[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(tu_next(r) % i), tmp = order[i - 1];
        order[i - 1] = order[j];
        order[j] = tmp;
    }
    for (size_t k = 0; k < n; k++) {
        const spec *t = &s[order[k]];
        if (k % 2 == 0) {
            assert_int_equal(tide_stw_write(w, t->name, t->data, t->nbytes, &st), 0);
            continue;
        }
        for (uint64_t off = 0; off < t->nbytes;) {
            uint64_t chunk = 1 + tu_next(r) % 9;
            if (chunk > t->nbytes - off) chunk = t->nbytes - off;
            assert_int_equal(tide_stw_write_part(w, t->name, off, t->data + off, chunk, &st), 0);
            off += chunk;
        }
    }
    free(order);
    if (tide_stw_finish(w, &st) != 0) fail_msg("finish: %s", st.msg);
}

static void check_read(const char *path, const spec *s, size_t n, int nshards) {
    tide_status st = {0};
    tide_st *ck = NULL;
    if (tide_st_open(path, &ck, &st) != 0) fail_msg("open %s: %s", path, st.msg);
    assert_int_equal(tide_st_count(ck), n);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const tide_tensor *t = tide_st_find(ck, s[i].name);
        assert_non_null(t);
        assert_string_equal(t->name, s[i].name);
        assert_int_equal(t->dtype, s[i].dt);
        assert_int_equal(t->ndim, s[i].ndim);
        for (int d = 0; d < s[i].ndim; d++) assert_int_equal(t->shape[d], s[i].shape[d]);
        assert_int_equal(t->nbytes, s[i].nbytes);
        assert_true(t->nbytes == 0 || memcmp(t->data, s[i].data, t->nbytes) == 0);
        assert_true(tide_tensor_aligned(t)); /* our writer keeps every tensor aligned */
        if (nshards > 1) {
            char want[64];
            tide_st_shard_name(s[i].shard, nshards, want, sizeof want);
            assert_string_equal(t->file, want);
        }
        total += s[i].nbytes;
    }
    assert_int_equal(tide_st_total_bytes(ck), total);
    for (size_t i = 1; i < tide_st_count(ck); i++) /* iteration is in name order */
        assert_true(strcmp(tide_st_at(ck, i - 1)->name, tide_st_at(ck, i)->name) < 0);
    assert_null(tide_st_at(ck, n));
    assert_null(tide_st_find(ck, "no.such.tensor"));
    assert_string_equal(tide_st_meta(ck, "format"), "pt");
    assert_string_equal(tide_st_meta(ck, "producer"), "test_safetensors");
    assert_null(tide_st_meta(ck, "absent"));
    tide_st_close(ck);
}

static void test_dtypes(void **state) {
    (void)state;
    tide_status st = {0};
    for (int d = 0; d < TIDE_DT_COUNT; d++) {
        tide_dtype back;
        assert_int_equal(tide_dtype_from_name(tide_dtype_name((tide_dtype)d), &back), 0);
        assert_int_equal(back, d);
        assert_true(tide_dtype_bits((tide_dtype)d) > 0);
    }
    tide_dtype x;
    assert_int_equal(tide_dtype_from_name("F33", &x), -1);
    assert_int_equal(tide_dtype_from_name("f32", &x), -1);
    assert_string_equal(tide_dtype_name(TIDE_DT_COUNT), "?");
    uint64_t ne, nb;
    int64_t f4[2] = {3, 4};
    assert_int_equal(tide_dtype_nbytes(TIDE_DT_F4, 2, f4, &ne, &nb, &st), 0);
    assert_int_equal(ne, 12);
    assert_int_equal(nb, 6);
    int64_t odd[2] = {3, 3};
    assert_int_equal(tide_dtype_nbytes(TIDE_DT_F4, 2, odd, &ne, &nb, &st), -1);
    assert_non_null(strstr(st.msg, "odd"));
    int64_t huge[3] = {INT64_MAX, INT64_MAX, 2};
    assert_int_equal(tide_dtype_nbytes(TIDE_DT_F32, 3, huge, &ne, &nb, &st), -1);
    assert_non_null(strstr(st.msg, "too large"));
    int64_t empty[3] = {INT64_MAX, INT64_MAX, 0};
    assert_int_equal(tide_dtype_nbytes(TIDE_DT_F32, 3, empty, &ne, &nb, &st), 0);
    assert_int_equal(nb, 0);
    int64_t big[1] = {(int64_t)1 << 61};
    assert_int_equal(tide_dtype_nbytes(TIDE_DT_F32, 1, big, &ne, &nb, &st), -1);
    assert_int_equal(tide_dtype_nbytes(TIDE_DT_F4, 1, big, &ne, &nb, &st), 0);
    int64_t neg[1] = {-1};
    assert_int_equal(tide_dtype_nbytes(TIDE_DT_U8, 1, neg, &ne, &nb, &st), -1);
    assert_int_equal(tide_dtype_nbytes(TIDE_DT_U8, 0, NULL, &ne, &nb, &st), 0);
    assert_int_equal(nb, 1); /* a 0-d tensor is one value */
    char buf[64];
    int64_t sh[3] = {7168, 4096, 1};
    assert_string_equal(tide_shape_str(3, sh, buf, sizeof buf), "[7168, 4096, 1]");
    assert_string_equal(tide_shape_str(0, sh, buf, sizeof buf), "[]");
    tide_st_shard_name(2, 48, buf, sizeof buf);
    assert_string_equal(buf, "model-00003-of-00048.safetensors");
}

static void test_roundtrip_sharded(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x51};
    spec s[3 * TIDE_DT_COUNT];
    int nshards = 3;
    size_t n = make_specs(&r, s, 3 * TIDE_DT_COUNT, nshards);
    char *dir = tu_mkdtemp("st");
    tide_status st = {0};
    tide_stw *w = NULL;
    assert_int_equal(tide_stw_open(dir, nshards, &w, &st), 0);
    write_specs(w, &r, s, n);
    check_read(dir, s, n, nshards);
    /* The index can also be named directly. */
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    check_read(path, s, n, nshards);
    tide_st *ck = NULL;
    assert_int_equal(tide_st_open(dir, &ck, &st), 0);
    assert_true(tide_st_nfiles(ck) >= 1 && tide_st_nfiles(ck) <= 3);
    const tide_tensor *t = NULL;
    assert_int_equal(tide_st_expect(ck, s[0].name, s[0].dt, s[0].ndim, s[0].shape, &t, &st), 0);
    assert_ptr_equal(t, tide_st_find(ck, s[0].name));
    assert_int_equal(tide_st_expect(ck, s[0].name, TIDE_DT_ANY, 0, NULL, &t, &st), 0);
    assert_int_equal(tide_st_expect(ck, s[0].name, s[1].dt, s[0].ndim, s[0].shape, &t, &st), -1);
    assert_non_null(strstr(st.msg, s[0].name));
    assert_non_null(strstr(st.msg, "expected"));
    int64_t wrong[TIDE_ST_MAX_DIMS] = {99, 98};
    assert_int_equal(tide_st_expect(ck, s[0].name, TIDE_DT_ANY, 2, wrong, &t, &st), -1);
    assert_non_null(strstr(st.msg, "[99, 98]"));
    assert_int_equal(tide_st_expect(ck, "absent.weight", TIDE_DT_ANY, 0, NULL, &t, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_MISSING);
    assert_null(t);
    tide_st_close(ck);
    free_specs(s, n);
    tu_rmtree(dir);
    free(dir);
}

static void test_roundtrip_single(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x52};
    spec s[3 * TIDE_DT_COUNT];
    size_t n = make_specs(&r, s, 3 * TIDE_DT_COUNT, 1);
    char *dir = tu_mkdtemp("st");
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    tide_status st = {0};
    tide_stw *w = NULL;
    assert_int_equal(tide_stw_open_file(path, &w, &st), 0);
    write_specs(w, &r, s, n);
    check_read(path, s, n, 1);
    check_read(dir, s, n, 1); /* a directory with only model.safetensors */
    free_specs(s, n);
    tu_rmtree(dir);
    free(dir);
}

/* Header bytes exactly as the spec wants: length, JSON padded with spaces. */
static void test_header_layout(void **state) {
    (void)state;
    char *dir = tu_mkdtemp("st");
    char path[4200];
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    tide_status st = {0};
    tide_stw *w = NULL;
    assert_int_equal(tide_stw_open_file(path, &w, &st), 0);
    int64_t sh[1] = {3};
    assert_int_equal(tide_stw_add(w, 0, "b", TIDE_DT_U8, 1, sh, &st), 0);
    assert_int_equal(tide_stw_add(w, 0, "a", TIDE_DT_F32, 1, sh, &st), 0);
    float a[3] = {1, 2, 3};
    assert_int_equal(tide_stw_write(w, "b", "xyz", 3, &st), 0);
    assert_int_equal(tide_stw_write(w, "a", a, sizeof a, &st), 0);
    assert_int_equal(tide_stw_finish(w, &st), 0);
    FILE *f = fopen(path, "rb");
    uint8_t buf[512];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | buf[i];
    assert_int_equal(n % 8, 0);
    assert_int_equal(len, 8 + n + 15);
    const char *want = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                       "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[12,15]}}";
    assert_memory_equal(buf + 8, want, strlen(want));
    for (size_t i = 8 + strlen(want); i < 8 + n; i++) assert_int_equal(buf[i], ' ');
    assert_memory_equal(buf + 8 + n, a, sizeof a);
    assert_memory_equal(buf + 8 + n + 12, "xyz", 3);
    tu_rmtree(dir);
    free(dir);
}

static void test_writer_misuse(void **state) {
    (void)state;
    char *dir = tu_mkdtemp("st");
    tide_status st = {0};
    tide_stw *w = NULL;
    assert_int_equal(tide_stw_open(dir, 0, &w, &st), -1);
    assert_int_equal(tide_stw_open(dir, 2, &w, &st), 0);
    int64_t sh[2] = {2, 3};
    assert_int_equal(tide_stw_add(w, 0, "a", TIDE_DT_BF16, 2, sh, &st), 0);
    assert_int_equal(tide_stw_add(w, 1, "a", TIDE_DT_BF16, 2, sh, &st), -1);
    assert_non_null(strstr(st.msg, "declared twice"));
    assert_int_equal(tide_stw_add(w, 2, "b", TIDE_DT_BF16, 2, sh, &st), -1);
    assert_int_equal(tide_stw_add(w, 0, "__metadata__", TIDE_DT_BF16, 2, sh, &st), -1);
    assert_int_equal(tide_stw_add(w, 0, "", TIDE_DT_BF16, 2, sh, &st), -1);
    assert_int_equal(tide_stw_add(w, 0, "bad\xff", TIDE_DT_BF16, 2, sh, &st), -1);
    assert_int_equal(tide_stw_add(w, 0, "f4", TIDE_DT_F4, 2, (int64_t[]){3, 3}, &st), -1);
    assert_non_null(strstr(st.msg, "'f4'"));
    assert_int_equal(tide_stw_add(w, 1, "c", TIDE_DT_I64, 1, (int64_t[]){2}, &st), 0);
    uint8_t buf[64] = {0};
    assert_int_equal(tide_stw_write(w, "zz", buf, 12, &st), -1);
    assert_non_null(strstr(st.msg, "never declared"));
    assert_int_equal(tide_stw_write(w, "a", buf, 11, &st), -1);
    assert_int_equal(tide_stw_write_part(w, "a", 4, buf, 2, &st), -1);
    assert_non_null(strstr(st.msg, "in order"));
    assert_int_equal(tide_stw_write_part(w, "a", 0, buf, 13, &st), -1);
    assert_int_equal(tide_stw_write_part(w, "a", 0, buf, 4, &st), 0);
    assert_int_equal(tide_stw_write(w, "a", buf, 12, &st), -1);
    assert_int_equal(tide_stw_add(w, 0, "late", TIDE_DT_BF16, 2, sh, &st), -1);
    assert_int_equal(tide_stw_meta(w, "k", "v", &st), -1);
    assert_int_equal(tide_stw_write_part(w, "a", 4, buf, 8, &st), 0);
    /* "c" never written: finish fails, names it, and frees the writer. */
    assert_int_equal(tide_stw_finish(w, &st), -1);
    assert_non_null(strstr(st.msg, "'c'"));
    struct stat sb;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    assert_int_equal(stat(path, &sb), -1); /* no index for an incomplete checkpoint */
    /* Abort right after open, and after declarations, leaks nothing. */
    assert_int_equal(tide_stw_open(dir, 2, &w, &st), 0);
    tide_stw_abort(w);
    assert_int_equal(tide_stw_open(dir, 2, &w, &st), 0);
    assert_int_equal(tide_stw_add(w, 0, "a", TIDE_DT_BF16, 2, sh, &st), 0);
    assert_int_equal(tide_stw_meta(w, "k", "v", &st), 0);
    assert_int_equal(tide_stw_meta(w, "k", "v2", &st), 0);
    tide_stw_abort(w);
    tide_stw_abort(NULL);
    /* Unwritable location. */
    assert_int_equal(tide_stw_open("/proc/no/such/dir", 2, &w, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_IO);
    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", dir);
    assert_int_equal(tide_stw_open_file(path, &w, &st), 0);
    assert_int_equal(tide_stw_add(w, 0, "a", TIDE_DT_BF16, 2, sh, &st), 0);
    assert_int_equal(tide_stw_write(w, "a", buf, 12, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_IO);
    assert_non_null(strstr(st.msg, "cannot create"));
    assert_int_equal(tide_stw_write(w, "a", buf, 12, &st), -1);
    assert_non_null(strstr(st.msg, "earlier error"));
    assert_int_equal(tide_stw_finish(w, &st), -1);
    tu_rmtree(dir);
    free(dir);
}

/* Nothing that looks like a complete checkpoint is left by a failed write:
 * a single file appears only at finish, and rewriting a directory removes
 * its old index before touching any shard. */
static void test_writer_atomicity(void **state) {
    (void)state;
    char *dir = tu_mkdtemp("st");
    char path[4200], tmp[4400], index[4300];
    snprintf(path, sizeof path, "%s/one.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    tide_status st = {0};
    tide_stw *w = NULL;
    struct stat sb;
    int64_t sh[1] = {4};
    uint8_t buf[4] = {1, 2, 3, 4};
    /* single file: .tmp while writing, renamed at finish */
    assert_int_equal(tide_stw_open_file(path, &w, &st), 0);
    assert_int_equal(tide_stw_add(w, 0, "a", TIDE_DT_U8, 1, sh, &st), 0);
    assert_int_equal(tide_stw_add(w, 0, "b", TIDE_DT_U8, 1, sh, &st), 0);
    assert_int_equal(tide_stw_write(w, "a", buf, 4, &st), 0);
    assert_int_equal(stat(tmp, &sb), 0);
    assert_int_equal(stat(path, &sb), -1);
    tide_stw_abort(w); /* removes the .tmp */
    assert_int_equal(stat(tmp, &sb), -1);
    assert_int_equal(stat(path, &sb), -1);
    assert_int_equal(tide_stw_open_file(path, &w, &st), 0);
    assert_int_equal(tide_stw_add(w, 0, "a", TIDE_DT_U8, 1, sh, &st), 0);
    assert_int_equal(tide_stw_write(w, "a", buf, 4, &st), 0);
    assert_int_equal(tide_stw_finish(w, &st), 0);
    assert_int_equal(stat(tmp, &sb), -1);
    assert_int_equal(stat(path, &sb), 0);
    /* directory: a complete checkpoint, then a rewrite that fails */
    assert_int_equal(tide_stw_open(dir, 1, &w, &st), 0);
    assert_int_equal(tide_stw_add(w, 0, "a", TIDE_DT_U8, 1, sh, &st), 0);
    assert_int_equal(tide_stw_write(w, "a", buf, 4, &st), 0);
    assert_int_equal(tide_stw_finish(w, &st), 0);
    assert_int_equal(stat(index, &sb), 0);
    snprintf(tmp, sizeof tmp, "%s.tmp", index);
    assert_int_equal(stat(tmp, &sb), -1);
    assert_int_equal(tide_stw_open(dir, 1, &w, &st), 0);
    assert_int_equal(tide_stw_add(w, 0, "a", TIDE_DT_U8, 1, sh, &st), 0);
    assert_int_equal(stat(index, &sb), 0); /* untouched until the first write */
    assert_int_equal(tide_stw_write_part(w, "a", 0, buf, 2, &st), 0);
    assert_int_equal(stat(index, &sb), -1);
    assert_int_equal(tide_stw_finish(w, &st), -1);
    assert_int_equal(stat(index, &sb), -1);
    tide_st *ck = NULL;
    assert_int_equal(tide_st_open(dir, &ck, &st), -1);
    tu_rmtree(dir);
    free(dir);
}

/* Many tensors: the writer's name table grows, the reader's search works. */
static void test_many_tensors(void **state) {
    (void)state;
    char *dir = tu_mkdtemp("st");
    tide_status st = {0};
    tide_stw *w = NULL;
    assert_int_equal(tide_stw_open(dir, 4, &w, &st), 0);
    enum { N = 3000 };
    char name[64];
    int64_t sh[1] = {2};
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "layers.%d.ffn.experts.%d.w1.scale", i / 256, i % 256);
        assert_int_equal(tide_stw_add(w, i % 4, name, TIDE_DT_I32, 1, sh, &st), 0);
    }
    for (int i = N - 1; i >= 0; i--) {
        snprintf(name, sizeof name, "layers.%d.ffn.experts.%d.w1.scale", i / 256, i % 256);
        int32_t v[2] = {i, -i};
        assert_int_equal(tide_stw_write(w, name, v, sizeof v, &st), 0);
    }
    assert_int_equal(tide_stw_finish(w, &st), 0);
    tide_st *ck = NULL;
    if (tide_st_open(dir, &ck, &st) != 0) fail_msg("%s", st.msg);
    assert_int_equal(tide_st_count(ck), N);
    assert_int_equal(tide_st_nfiles(ck), 4);
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "layers.%d.ffn.experts.%d.w1.scale", i / 256, i % 256);
        const tide_tensor *t = tide_st_find(ck, name);
        assert_non_null(t);
        int32_t v[2];
        memcpy(v, t->data, sizeof v);
        assert_int_equal(v[0], i);
        assert_int_equal(v[1], -i);
    }
    tide_st_close(ck);
    tu_rmtree(dir);
    free(dir);
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

/* C writer -> numpy reader, then numpy writer -> C reader. */
static void test_python_crosscheck(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x53};
    spec s[3 * TIDE_DT_COUNT];
    int nshards = 3;
    size_t n = make_specs(&r, s, 3 * TIDE_DT_COUNT, nshards);
    char *dir = tu_mkdtemp("st");
    char ck_dir[4200], dump[4200], cmd[13000], path[4400];
    snprintf(ck_dir, sizeof ck_dir, "%s/ck", dir);
    snprintf(dump, sizeof dump, "%s/dump", dir);
    tide_status st = {0};
    tide_stw *w = NULL;
    assert_int_equal(tide_stw_open(ck_dir, nshards, &w, &st), 0);
    write_specs(w, &r, s, n);
    snprintf(cmd, sizeof cmd, "%s %s/tools/ref/safetensors_np.py dump %s %s 2>&1", TIDE_PYTHON,
             TIDE_SOURCE_DIR, ck_dir, dump);
    char *out = NULL;
    int rc = tu_system(cmd, &out);
    if (rc != 0) fail_msg("%s\n%s", cmd, out ? out : "");
    free(out);
    snprintf(path, sizeof path, "%s/manifest.tsv", dump);
    size_t mlen;
    char *man = slurp(path, &mlen);
    assert_non_null(man);
    size_t lines = 0;
    for (char *line = strtok(man, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        /* name \t dtype \t dims,comma,separated (empty for 0-d) \t file */
        char *f[4] = {line, NULL, NULL, NULL};
        for (int k = 1; k < 4; k++) {
            f[k] = strchr(f[k - 1], '\t');
            assert_non_null(f[k]);
            *f[k]++ = 0;
        }
        const char *name = f[0], *dt = f[1], *shape = f[2], *file = f[3];
        const spec *t = NULL;
        for (size_t i = 0; i < n; i++)
            if (strcmp(s[i].name, name) == 0) t = &s[i];
        assert_non_null(t);
        assert_string_equal(dt, tide_dtype_name(t->dt));
        char want[128] = "";
        for (int d = 0; d < t->ndim; d++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? "," : "",
                     (long long)t->shape[d]);
        assert_string_equal(shape, want);
        snprintf(path, sizeof path, "%s/%s", dump, file);
        size_t blen = 0;
        char *bytes = slurp(path, &blen);
        assert_non_null(bytes);
        assert_int_equal(blen, t->nbytes);
        assert_true(blen == 0 || memcmp(bytes, t->data, blen) == 0);
        free(bytes);
    }
    assert_int_equal(lines, n);
    free(man);
    /* numpy writes one file in name order (unaligned tensors): C reads it. */
    snprintf(path, sizeof path, "%s/np.safetensors", dir);
    snprintf(cmd, sizeof cmd, "%s %s/tools/ref/safetensors_np.py resave %s %s 2>&1", TIDE_PYTHON,
             TIDE_SOURCE_DIR, ck_dir, path);
    rc = tu_system(cmd, &out);
    if (rc != 0) fail_msg("%s\n%s", cmd, out ? out : "");
    free(out);
    tide_st *ck = NULL;
    if (tide_st_open(path, &ck, &st) != 0) fail_msg("%s", st.msg);
    assert_int_equal(tide_st_count(ck), n);
    for (size_t i = 0; i < n; i++) {
        const tide_tensor *t = tide_st_find(ck, s[i].name);
        assert_non_null(t);
        assert_int_equal(t->dtype, s[i].dt);
        assert_int_equal(t->nbytes, s[i].nbytes);
        assert_true(t->nbytes == 0 || memcmp(t->data, s[i].data, t->nbytes) == 0);
    }
    assert_string_equal(tide_st_meta(ck, "writer"), "safetensors_np");
    tide_st_close(ck);
    /* The numpy side's own checks: round trip and refusal of corrupt files. */
    snprintf(cmd, sizeof cmd, "%s %s/tools/ref/safetensors_np.py selftest %s 2>&1", TIDE_PYTHON,
             TIDE_SOURCE_DIR, dir);
    rc = tu_system(cmd, &out);
    if (rc != 0) fail_msg("%s\n%s", cmd, out ? out : "");
    free(out);
    free_specs(s, n);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_roundtrip_sharded),
        cmocka_unit_test(test_roundtrip_single),
        cmocka_unit_test(test_header_layout),
        cmocka_unit_test(test_writer_misuse),
        cmocka_unit_test(test_writer_atomicity),
        cmocka_unit_test(test_many_tensors),
        cmocka_unit_test(test_python_crosscheck),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
