/* Parser for model.safetensors.index.json: the weight_map that tells which
 * shard holds each tensor. Only the structure is checked here; whether the
 * shards agree is the reader's job (safetensors.c). */
#include "io/st_index.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static bool plain_file_name(const char *s) {
    return s[0] && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const tide_st_index_entry *)a)->name, ((const tide_st_index_entry *)b)->name);
}

/* Index of shard `file` in ix->files, appending it when new. Linear: a
 * checkpoint has tens of shards, and the last one found is tried first. */
static int shard_slot(tide_st_index *ix, const char *file, size_t *slot, tide_status *st) {
    if (ix->nfiles && strcmp(ix->files[ix->nfiles - 1], file) == 0) {
        *slot = ix->nfiles - 1;
        return 0;
    }
    for (size_t i = 0; i < ix->nfiles; i++) {
        if (strcmp(ix->files[i], file) == 0) {
            *slot = i;
            return 0;
        }
    }
    char **grown = realloc(ix->files, (ix->nfiles + 1) * sizeof *grown);
    if (!grown) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    ix->files = grown;
    if (!(ix->files[ix->nfiles] = strdup(file))) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    *slot = ix->nfiles++;
    return 0;
}

static int parse_map(const json_t *map, const char *label, tide_st_index *ix, tide_status *st) {
    size_t n = json_object_size(map);
    if (n == 0) return tide_fail(st, TIDE_ERR_FORMAT, "%s: \"weight_map\" is empty", label);
    ix->entries = calloc(n, sizeof *ix->entries);
    if (!ix->entries) return tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", label);
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)map, key, val) {
        if (!json_is_string(val) || !plain_file_name(json_string_value(val)))
            return tide_fail(st, TIDE_ERR_FORMAT,
                             "%s: weight_map entry for tensor '%.200s' is not a shard file name",
                             label, key);
        tide_st_index_entry *e = &ix->entries[ix->n];
        if (!(e->name = strdup(key))) return tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", label);
        ix->n++;
        if (shard_slot(ix, json_string_value(val), &e->shard, st) != 0)
            return tide_fail_ctx(st, "%s", label);
    }
    qsort(ix->entries, ix->n, sizeof *ix->entries, cmp_entry);
    return 0;
}

int tide_st_parse_index(const char *json, size_t len, const char *label, tide_st_index **out,
                        tide_status *st) {
    *out = NULL;
    if (len > TIDE_ST_MAX_INDEX)
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: %zu bytes, larger than the %zu-byte limit", label,
                         len, TIDE_ST_MAX_INDEX);
    json_error_t err;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: not valid JSON: %s (line %d, column %d)", label,
                         err.text, err.line, err.column);
    tide_st_index *ix = calloc(1, sizeof *ix);
    int rc = 0;
    const json_t *map = json_object_get(root, "weight_map");
    const json_t *meta = json_object_get(root, "metadata");
    if (!ix)
        rc = tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", label);
    else if (!json_is_object(root))
        rc = tide_fail(st, TIDE_ERR_FORMAT, "%s: not a JSON object", label);
    else if (!json_is_object(map))
        rc = tide_fail(st, TIDE_ERR_FORMAT, "%s: \"weight_map\" is %s", label,
                       map ? "not an object" : "missing");
    else if (meta && !json_is_object(meta))
        rc = tide_fail(st, TIDE_ERR_FORMAT, "%s: \"metadata\" is not an object", label);
    else
        rc = parse_map(map, label, ix, st);
    json_decref(root);
    if (rc != 0) {
        tide_st_index_free(ix);
        return -1;
    }
    *out = ix;
    return 0;
}

void tide_st_index_free(tide_st_index *ix) {
    if (!ix) return;
    for (size_t i = 0; i < ix->n; i++) free(ix->entries[i].name);
    free(ix->entries);
    for (size_t i = 0; i < ix->nfiles; i++) free(ix->files[i]);
    free(ix->files);
    free(ix);
}

const tide_st_index_entry *tide_st_index_find(const tide_st_index *ix, const char *name) {
    tide_st_index_entry key = {.name = (char *)name};
    return bsearch(&key, ix->entries, ix->n, sizeof key, cmp_entry);
}
