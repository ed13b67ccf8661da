/* The golden file of tools/golden (format: tools/golden/README.md), read by
 * tests/test_golden_official.c and fuzzed by fuzz/fuzz_golden.c. Static
 * functions: include it in one translation unit. */
#ifndef TIDE_TESTS_GOLDEN_FILE_H
#define TIDE_TESTS_GOLDEN_FILE_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* Rows of one kind in a case (prompt tokens, greedy steps, continuation). */
#define GOLDEN_MAX_ROWS (1 << 20)

typedef struct {
    char name[32];
    int32_t *prompt, *prefill, *greedy, *cont, *cont_argmax;
    float *prefill_m, *greedy_m, *cont_m;
    int n_prompt, n_greedy, n_cont;
} gcase;

typedef struct {
    char model[1024];    /* "# model:" */
    char model_sha[4096]; /* "# model sha256:" FILE=HEX ... */
    gcase *c;
    int n;
} golden;

/* Parses "KEY v v v ..." into n ints (want exactly n). */
static inline int parse_ids(const char *line, const char *key, int n, int32_t **out) {
    size_t kl = strlen(key);
    if (strncmp(line, key, kl) != 0 || (line[kl] != ' ' && line[kl] != 0)) return -1;
    int32_t *v = malloc(((size_t)n + 1) * sizeof *v);
    if (!v) return -1;
    const char *p = line + kl;
    int i = 0;
    for (;;) {
        char *e;
        long x = strtol(p, &e, 10);
        if (e == p) break;
        if (i == n || x < 0 || x > INT32_MAX) {
            free(v);
            return -1;
        }
        v[i++] = (int32_t)x;
        p = e;
    }
    if (i != n) {
        free(v);
        return -1;
    }
    *out = v;
    return 0;
}

static inline int parse_floats(const char *line, const char *key, int n, float **out) {
    size_t kl = strlen(key);
    if (strncmp(line, key, kl) != 0 || (line[kl] != ' ' && line[kl] != 0)) return -1;
    float *v = malloc(((size_t)n + 1) * sizeof *v);
    if (!v) return -1;
    const char *p = line + kl;
    int i = 0;
    for (;;) {
        char *e;
        float x = strtof(p, &e);
        if (e == p) break;
        if (i == n) {
            free(v);
            return -1;
        }
        v[i++] = x;
        p = e;
    }
    if (i != n) {
        free(v);
        return -1;
    }
    *out = v;
    return 0;
}

static inline void golden_free(golden *g) {
    for (int i = 0; i < g->n; i++) {
        gcase *c = &g->c[i];
        free(c->prompt), free(c->prefill), free(c->greedy), free(c->cont), free(c->cont_argmax);
        free(c->prefill_m), free(c->greedy_m), free(c->cont_m);
    }
    free(g->c);
    memset(g, 0, sizeof *g);
}

/* Reads a whole line of any length into *buf (grown). 0 at EOF. */
static inline int read_line(FILE *f, char **buf, size_t *cap) {
    ssize_t n = getline(buf, cap, f);
    if (n <= 0) return 0;
    if ((*buf)[n - 1] == '\n') (*buf)[n - 1] = 0;
    return 1;
}

static inline void meta(const char *line, const char *key, char *dst, size_t cap) {
    size_t kl = strlen(key);
    if (strncmp(line, key, kl) == 0) snprintf(dst, cap, "%s", line + kl);
}

/* Reads a golden from f; on error says what and where on err (path names the
 * file there; err NULL: silent), frees what it read and returns -1. Does not
 * close f. */
static inline int golden_read(FILE *f, const char *path, FILE *err, golden *g) {
    memset(g, 0, sizeof *g);
    char *line = NULL;
    size_t cap = 0;
    int ln = 0, rc = -1, ended = 0;
    if (!read_line(f, &line, &cap) || strcmp(line, "tide-golden 1") != 0) {
        if (err) fprintf(err, "%s:1: not a tide-golden 1 file\n", path);
        goto out;
    }
    ln = 1;
    while (read_line(f, &line, &cap)) {
        ln++;
        if (line[0] == '#') {
            meta(line, "# model: ", g->model, sizeof g->model);
            meta(line, "# model sha256: ", g->model_sha, sizeof g->model_sha);
            continue;
        }
        if (strcmp(line, "end") == 0) {
            ended = 1;
            break;
        }
        gcase c = {0};
        if (sscanf(line, "case %31s %d %d %d", c.name, &c.n_prompt, &c.n_greedy, &c.n_cont) != 4 ||
            c.n_prompt < 1 || c.n_greedy < 1 || c.n_cont < 0 || c.n_prompt > GOLDEN_MAX_ROWS ||
            c.n_greedy > GOLDEN_MAX_ROWS || c.n_cont > GOLDEN_MAX_ROWS) {
            if (err)
                fprintf(err, "%s:%d: expected 'case NAME N_PROMPT N_GREEDY N_CONT' (counts 1..%d)\n", path,
                        ln, GOLDEN_MAX_ROWS);
            goto out;
        }
        gcase *grown = realloc(g->c, (size_t)(g->n + 1) * sizeof *g->c);
        if (!grown) goto out;
        g->c = grown;
        g->c[g->n++] = c;
        gcase *k = &g->c[g->n - 1];
        struct {
            const char *key;
            int n, is_f;
            void *dst;
        } rows[] = {
            {"prompt", k->n_prompt, 0, &k->prompt},        {"prefill", k->n_prompt, 0, &k->prefill},
            {"prefill_margin", k->n_prompt, 1, &k->prefill_m}, {"greedy", k->n_greedy, 0, &k->greedy},
            {"greedy_margin", k->n_greedy, 1, &k->greedy_m}, {"cont", k->n_cont, 0, &k->cont},
            {"cont_argmax", k->n_cont, 0, &k->cont_argmax}, {"cont_margin", k->n_cont, 1, &k->cont_m},
        };
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            ln++;
            int bad = !read_line(f, &line, &cap);
            if (!bad)
                bad = rows[r].is_f ? parse_floats(line, rows[r].key, rows[r].n, (float **)rows[r].dst)
                                   : parse_ids(line, rows[r].key, rows[r].n, (int32_t **)rows[r].dst);
            if (bad) {
                if (err)
                    fprintf(err, "%s:%d: expected '%s' with %d values (case %s)\n", path, ln, rows[r].key,
                            rows[r].n, k->name);
                goto out;
            }
        }
    }
    if (!ended || g->n == 0 || !g->model[0]) {
        if (err) fprintf(err, "%s: truncated (no 'end'), no cases, or no '# model:' line\n", path);
        goto out;
    }
    rc = 0;
out:
    free(line);
    if (rc) golden_free(g);
    return rc;
}

static inline int golden_load(const char *path, golden *g) {
    FILE *f = fopen(path, "r");
    if (!f) {
        memset(g, 0, sizeof *g);
        return -1;
    }
    int rc = golden_read(f, path, stderr, g);
    fclose(f);
    return rc;
}

#endif
