/* Helpers for the forward-pass tests: calling the numpy reference's
 * component entry points (tools/ref/components.py OP IN.npz OUT.npz) from C.
 * Inputs are written as .npy files, packed into an .npz by a short
 * /usr/bin/python3 snippet; the outputs come back unpacked as float64 .npy
 * files (every output is converted to f8, -inf and integers included) and
 * are read with tn_out(). Included by test_ops*.c / test_forward*.c only. */
#ifndef TIDE_TESTS_TEST_OPS_UTIL_H
#define TIDE_TESTS_TEST_OPS_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "testutil.h"

typedef struct {
    const char *name;
    char kind;      /* 'f' f32, 'i' i32, 'l' i64, 'u' u8 */
    int ndim;       /* 0 = scalar */
    int64_t shape[4];
    const void *data;
} tn_arr;

static inline tn_arr tn_f32(const char *name, const float *d, int ndim, int64_t a, int64_t b, int64_t c) {
    tn_arr t = {name, 'f', ndim, {a, b, c, 0}, d};
    return t;
}

static inline int tn_write_npy(const char *path, const tn_arr *a) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const char *descr = a->kind == 'f' ? "<f4" : a->kind == 'i' ? "<i4" : a->kind == 'l' ? "<i8" : "|u1";
    size_t el = a->kind == 'f' || a->kind == 'i' ? 4 : a->kind == 'l' ? 8 : 1;
    char shape[128] = "";
    size_t n = 1;
    for (int i = 0; i < a->ndim; i++) {
        char b[32];
        snprintf(b, sizeof b, "%lld,%s", (long long)a->shape[i], a->ndim > 1 && i + 1 < a->ndim ? " " : "");
        strcat(shape, b);
        n *= (size_t)a->shape[i];
    }
    char hdr[256];
    int hl = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape);
    int total = 10 + hl + 1;
    int pad = (64 - total % 64) % 64;
    unsigned short len = (unsigned short)(hl + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(len & 0xff, f);
    fputc(len >> 8, f);
    fwrite(hdr, 1, (size_t)hl, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    fwrite(a->data, el, n, f);
    fclose(f);
    return 0;
}

/* Runs the op (inputs as DIR/in/NAME.npy, outputs into DIR/out/); returns
 * the exit status of components.py (0 ok). */
static inline int tn_call(const char *dir, const char *op, const tn_arr *in, int n_in) {
    char path[4096], cmd[8192];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/in' '%s/out' && mkdir -p '%s/in'", dir, dir, dir);
    if (tu_system(cmd, NULL) != 0) return -1;
    for (int i = 0; i < n_in; i++) {
        snprintf(path, sizeof path, "%s/in/%s.npy", dir, in[i].name);
        if (tn_write_npy(path, &in[i]) != 0) return -1;
    }
    snprintf(cmd, sizeof cmd, "%s %s/tools/ref/components.py %s '%s/in' '%s/out' 2>&1", TIDE_PYTHON,
             TIDE_SOURCE_DIR, op, dir, dir);
    char *out = NULL;
    int rc = tu_system(cmd, &out);
    if (rc != 0) fprintf(stderr, "components.py %s failed (%d):\n%s\n", op, rc, out ? out : "");
    free(out);
    return rc;
}

/* Reads DIR/out/NAME.npy (or DIR/NAME.npy when name starts with '/') of any
 * numeric dtype (f4, f8, i4, i8, u1, b1; little-endian, C order) into a
 * malloc'd double array; *n elements. NULL on failure. */
static inline double *tn_out(const char *dir, const char *name, int64_t *n) {
    char path[4096];
    if (name[0] == '/') snprintf(path, sizeof path, "%s%s.npy", dir, name);
    else snprintf(path, sizeof path, "%s/out/%s.npy", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char h[10];
    if (fread(h, 1, 10, f) != 10) {
        fclose(f);
        return NULL;
    }
    int hl = h[8] | (h[9] << 8);
    char hdr[1024] = "";
    if (hl >= (int)sizeof hdr || fread(hdr, 1, (size_t)hl, f) != (size_t)hl) {
        fclose(f);
        return NULL;
    }
    const char *d = strstr(hdr, "'descr': '");
    if (!d) {
        fclose(f);
        return NULL;
    }
    d += 10;
    char kind = d[1];
    int size = atoi(d + 2);
    fseek(f, 0, SEEK_END);
    long total = ftell(f) - 10 - hl;
    fseek(f, 10 + hl, SEEK_SET);
    *n = size > 0 ? total / size : 0;
    unsigned char *raw = malloc((size_t)total + 1);
    double *v = malloc((size_t)(*n ? *n : 1) * sizeof(double));
    if (fread(raw, 1, (size_t)total, f) != (size_t)total) *n = -1;
    fclose(f);
    for (int64_t i = 0; i < *n; i++) {
        const unsigned char *p = raw + i * size;
        if (kind == 'f' && size == 4) { float x; memcpy(&x, p, 4); v[i] = x; }
        else if (kind == 'f' && size == 8) { memcpy(&v[i], p, 8); }
        else if (kind == 'i' && size == 4) { int32_t x; memcpy(&x, p, 4); v[i] = x; }
        else if (kind == 'i' && size == 8) { int64_t x; memcpy(&x, p, 8); v[i] = (double)x; }
        else if ((kind == 'u' || kind == 'b') && size == 1) { v[i] = p[0]; }
        else { *n = -1; break; }
    }
    free(raw);
    if (*n < 0) {
        free(v);
        return NULL;
    }
    return v;
}

/* The stand-in tokenizer the synthetic checkpoints need for engram (built by
 * scripts/oracle-deps.sh); NULL when absent. */
static inline const char *tn_tokenizer(char *path, size_t cap) {
    const char *env = getenv("TIDE_TOKENIZER");
    if (env && *env) return env;
    tu_dep_path(path, cap, ".deps/tokenizer/deepseek-v41-standin.json");
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fclose(f);
    return path;
}

/* Writes a synthetic checkpoint of `shape` with `seed` into dir (with the
 * stand-in tokenizer when available). 0 on success. */
static inline int tn_synth(const char *dir, const char *shape, uint64_t seed) {
    char tok[1024], cmd[4096];
    const char *t = tn_tokenizer(tok, sizeof tok);
    /* without one, none at all (synth would take its built-in default) */
    snprintf(cmd, sizeof cmd, "'%s' synth --shape %s --seed %llu -o '%s' %s%s%s >/dev/null 2>&1", TIDE_EXE,
             shape, (unsigned long long)seed, dir, t ? "--tokenizer '" : "--no-tokenizer", t ? t : "", t ? "'" : "");
    return tu_system(cmd, NULL);
}

/* Whether DIR/tokenizer.json exists (the oracle needs it for the engram
 * layers; without the stand-in tokenizer the oracle tests are skipped). */
static inline int tn_has_tokenizer(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fclose(f);
    return 1;
}

/* n random token ids of m's vocabulary, never the image token. */
static inline void tn_random_tokens(const tide_model *m, tu_rng *r, int32_t *out, int64_t n) {
    int64_t V = m->cfg.text.vocab_size;
    for (int64_t j = 0; j < n; j++) {
        int32_t t;
        do t = (int32_t)(tu_next(r) % (uint64_t)V);
        while (t == m->cfg.image_token_id);
        out[j] = t;
    }
}

/* The fixture of the model-level tests: a synthetic checkpoint (tiny, or
 * $TIDE_TEST_SHAPE, e.g. small: slow) written to a fresh temporary directory
 * from a fresh seed (varied by salt, for several checkpoints in one run),
 * and loaded. When the oracle is needed (need_tokenizer)
 * and no stand-in tokenizer exists, skip is set and nothing is loaded; under
 * CI (CI set) that is a failure instead, so a missing setup step cannot hide
 * a test. */
typedef struct {
    char *dir;
    tide_model *m;
    uint64_t seed;
    int skip;
} tn_model_fixture;

static inline int tn_model_setup(void **state, const char *tag, int need_tokenizer, uint64_t salt) {
    tn_model_fixture *f = calloc(1, sizeof *f);
    if (!f) return -1;
    *state = f;
    f->seed = (tu_seed() + salt * 7919) % 100000 + 1;
    f->dir = tu_mkdtemp(tag);
    const char *shape = getenv("TIDE_TEST_SHAPE");
    if (!f->dir || tn_synth(f->dir, shape && *shape ? shape : "tiny", f->seed) != 0) return -1;
    if (need_tokenizer && !tn_has_tokenizer(f->dir)) {
        f->skip = 1;
        return tu_missing_dep("the stand-in tokenizer", "scripts/oracle-deps.sh or $TIDE_TOKENIZER") ? -1 : 0;
    }
    tide_status st = {0};
    if (tide_model_load(f->dir, &f->m, &st) != 0) {
        fprintf(stderr, "load: %s\n", st.msg);
        return -1;
    }
    return 0;
}

static inline int tn_model_teardown(void **state) {
    tn_model_fixture *f = *state;
    if (!f) return 0;
    if (f->m) tide_model_free(f->m);
    if (f->dir) tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

#endif
