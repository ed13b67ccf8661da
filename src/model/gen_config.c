/* Generation defaults (gen_config.h): the EOS ids of a checkpoint. */
#include "model/gen_config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "base/json.h"

/* Loads dir/name when it is a regular file (a FIFO would block the open):
 * 0 with *out = NULL when absent, -1 on a file that cannot be read as JSON. */
static int load(const char *dir, const char *name, json_t **out, tide_status *st) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        return tide_fail(st, TIDE_ERR_IO, "%s: %s", path, strerror(errno));
    }
    if (!S_ISREG(sb.st_mode)) return tide_fail(st, TIDE_ERR_IO, "%s is not a regular file", path);
    json_error_t je;
    *out = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!*out) return tide_fail(st, TIDE_ERR_FORMAT, "%s: not JSON (%s at line %d)", path, je.text, je.line);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: expected an object", path);
    }
    return 0;
}

static int take_id(json_t *v, int64_t vocab, int32_t *out, const char *where, tide_status *st) {
    if (!json_is_integer(v))
        return tide_fail(st, TIDE_ERR_INVALID, "%s: expected a token id, got %s", where, tide_json_kind(v));
    json_int_t x = json_integer_value(v);
    if (x < 0 || x >= vocab)
        return tide_fail(st, TIDE_ERR_INVALID, "%s: %lld is outside the vocabulary (0..%lld)", where, (long long)x,
                         (long long)(vocab - 1));
    *out = (int32_t)x;
    return 0;
}

/* eos_token_id of obj (an integer or a list of them) into g; absent: 0
 * with g->n_eos untouched. */
static int take_eos(json_t *obj, int64_t vocab, const char *where, tide_gen_config *g, tide_status *st) {
    json_t *v = obj ? json_object_get(obj, "eos_token_id") : NULL;
    if (!v || json_is_null(v)) return 0;
    if (json_is_array(v)) {
        size_t n = json_array_size(v);
        if (n == 0 || n > TIDE_GEN_MAX_EOS)
            return tide_fail(st, TIDE_ERR_INVALID, "%s: %zu ids (expected 1..%d)", where, n, TIDE_GEN_MAX_EOS);
        for (size_t i = 0; i < n; i++)
            if (take_id(json_array_get(v, i), vocab, &g->eos[i], where, st) != 0) return -1;
        g->n_eos = (int)n;
    } else {
        if (take_id(v, vocab, &g->eos[0], where, st) != 0) return -1;
        g->n_eos = 1;
    }
    g->source = where;
    return 0;
}

int tide_gen_config_read(const char *dir, int64_t vocab, tide_gen_config *g, tide_status *st) {
    memset(g, 0, sizeof *g);
    json_t *gen, *cfg = NULL;
    if (load(dir, "generation_config.json", &gen, st) != 0) return -1;
    int rc = take_eos(gen, vocab, "generation_config.json: eos_token_id", g, st);
    json_decref(gen);
    if (rc == 0 && g->n_eos == 0 && (rc = load(dir, "config.json", &cfg, st)) == 0) {
        rc = take_eos(cfg, vocab, "config.json: eos_token_id", g, st);
        if (rc == 0 && g->n_eos == 0)
            rc = take_eos(json_object_get(cfg, "text_config"), vocab, "config.json: text_config.eos_token_id", g, st);
    }
    json_decref(cfg);
    return rc;
}

int tide_gen_config_write(const char *dir, int64_t bos, const int32_t *eos, int n_eos, tide_status *st) {
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    json_t *o = json_object(), *e = n_eos == 1 ? json_integer(eos[0]) : json_array();
    for (int i = 0; n_eos != 1 && i < n_eos; i++) json_array_append_new(e, json_integer(eos[i]));
    json_object_set_new(o, "bos_token_id", json_integer(bos));
    json_object_set_new(o, "eos_token_id", e);
    int rc = json_dump_file(o, path, JSON_INDENT(2)) == 0 ? 0 : tide_fail(st, TIDE_ERR_IO, "cannot write %s", path);
    json_decref(o);
    return rc;
}
