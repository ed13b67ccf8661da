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

/* Runs the op; returns the exit status of the python side (0 ok). */
static inline int tn_call(const char *dir, const char *op, const tn_arr *in, int n_in) {
    char path[1024], cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/in' '%s/out' && mkdir -p '%s/in' '%s/out'", dir, dir, dir, dir);
    if (tu_system(cmd, NULL) != 0) return -1;
    for (int i = 0; i < n_in; i++) {
        snprintf(path, sizeof path, "%s/in/%s.npy", dir, in[i].name);
        if (tn_write_npy(path, &in[i]) != 0) return -1;
    }
    snprintf(cmd, sizeof cmd,
             "cd '%s' && %s -c \"import numpy as np,os;"
             "np.savez('in.npz', **{f[:-4]: np.load('in/'+f) for f in os.listdir('in')})\" && "
             "%s %s/tools/ref/components.py %s in.npz out.npz && "
             "%s -c \"import numpy as np;o=np.load('out.npz');"
             "[np.save('out/'+k+'.npy', np.ascontiguousarray(o[k]).astype('<f8')) for k in o.files]\"",
             dir, TIDE_PYTHON, TIDE_PYTHON, TIDE_SOURCE_DIR, op, TIDE_PYTHON);
    char *out = NULL;
    int rc = tu_system(cmd, &out);
    if (rc != 0) fprintf(stderr, "components.py %s failed (%d):\n%s\n", op, rc, out ? out : "");
    free(out);
    return rc;
}

/* Reads dir/out/NAME.npy (f8) into a malloc'd double array; *n elements. */
static inline double *tn_out(const char *dir, const char *name, int64_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/out/%s.npy", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char h[10];
    if (fread(h, 1, 10, f) != 10) {
        fclose(f);
        return NULL;
    }
    int hl = h[8] | (h[9] << 8);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long data = 10 + hl;
    fseek(f, data, SEEK_SET);
    *n = (size - data) / 8;
    double *d = malloc((size_t)(*n ? *n : 1) * sizeof(double));
    if (fread(d, 8, (size_t)*n, f) != (size_t)*n) {
        free(d);
        d = NULL;
    }
    fclose(f);
    return d;
}

/* The stand-in tokenizer the synthetic checkpoints need for engram (built by
 * scripts/oracle-deps.sh); NULL when absent. */
static inline const char *tn_tokenizer(char *path, size_t cap) {
    const char *env = getenv("TIDE_TOKENIZER");
    if (env && *env) return env;
    snprintf(path, cap, "%s/.deps/tokenizer/deepseek-v41-standin.json", TIDE_SOURCE_DIR);
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
    snprintf(cmd, sizeof cmd, "'%s' synth --shape %s --seed %llu -o '%s' %s%s%s >/dev/null 2>&1", TIDE_EXE,
             shape, (unsigned long long)seed, dir, t ? "--tokenizer '" : "", t ? t : "", t ? "'" : "");
    return tu_system(cmd, NULL);
}

#endif
