/* The safetensors header parser: turns the first bytes of one file into a
 * validated list of tensors. It trusts nothing: every length, type, dtype,
 * offset and size is checked, and the tensors must tile the data region
 * exactly, as the official library demands, so that a tensor handed out
 * later is always fully inside its file. Works on a plain buffer so the
 * fuzzer can drive it without files. */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "io/safetensors.h"

/* Names in messages are cut so that one absurd name cannot push the
 * interesting part of the message out of the status buffer. */
#define NAME_FMT "'%.200s'"

static uint64_t read_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* A JSON value that is an integer in [0, INT64_MAX]. Reals ("1.0", "1e3")
 * are refused: offsets and dims are counts. */
static bool get_count(const json_t *v, int64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (int64_t)json_integer_value(v);
    return true;
}

/* Fills t from one header entry {"dtype", "shape", "data_offsets"}; t->offset
 * holds `begin` relative to the data region until the caller rebases it. */
static int parse_entry(const char *label, const char *name, const json_t *v, tide_tensor *t,
                       tide_status *st) {
    if (!json_is_object(v))
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: tensor " NAME_FMT ": entry is %s, not an object",
                         label, name, tide_json_kind(v));
    const json_t *dt = json_object_get(v, "dtype");
    const json_t *shape = json_object_get(v, "shape");
    const json_t *offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: tensor " NAME_FMT ": \"dtype\" is %s, not a string",
                         label, name, dt ? tide_json_kind(dt) : "missing");
    if (tide_dtype_from_name(json_string_value(dt), &t->dtype) != 0)
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: tensor " NAME_FMT ": unknown dtype '%.40s'", label,
                         name, json_string_value(dt));
    if (!json_is_array(shape))
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: tensor " NAME_FMT ": \"shape\" is %s, not an array",
                         label, name, shape ? tide_json_kind(shape) : "missing");
    size_t nd = json_array_size(shape);
    if (nd > TIDE_ST_MAX_DIMS)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                         "%s: tensor " NAME_FMT ": %zu dimensions (at most %d are supported)", label,
                         name, nd, TIDE_ST_MAX_DIMS);
    t->ndim = (int)nd;
    for (size_t i = 0; i < nd; i++) {
        if (!get_count(json_array_get(shape, i), &t->shape[i]))
            return tide_fail(st, TIDE_ERR_FORMAT,
                             "%s: tensor " NAME_FMT ": shape[%zu] is not a non-negative integer",
                             label, name, i);
    }
    int64_t begin, end;
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !get_count(json_array_get(offs, 0), &begin) || !get_count(json_array_get(offs, 1), &end))
        return tide_fail(st, TIDE_ERR_FORMAT,
                         "%s: tensor " NAME_FMT
                         ": \"data_offsets\" must be an array of two non-negative integers",
                         label, name);
    if (begin > end)
        return tide_fail(st, TIDE_ERR_FORMAT,
                         "%s: tensor " NAME_FMT ": data_offsets [%" PRId64 ", %" PRId64
                         "] end before they begin",
                         label, name, begin, end);
    if (tide_dtype_nbytes(t->dtype, t->ndim, t->shape, &t->nelem, &t->nbytes, st) != 0)
        return tide_fail_ctx(st, "%s: tensor " NAME_FMT, label, name);
    if ((uint64_t)(end - begin) != t->nbytes) {
        char sh[160];
        return tide_fail(st, TIDE_ERR_FORMAT,
                         "%s: tensor " NAME_FMT ": data_offsets [%" PRId64 ", %" PRId64
                         "] hold %" PRIu64 " bytes but %s %s needs %" PRIu64,
                         label, name, begin, end, (uint64_t)(end - begin),
                         tide_dtype_name(t->dtype), tide_shape_str(t->ndim, t->shape, sh, sizeof sh),
                         t->nbytes);
    }
    t->offset = (uint64_t)begin;
    return 0;
}

/* "__metadata__": an object of string -> string. */
static int parse_meta(const char *label, const json_t *v, tide_st_header *h, tide_status *st) {
    if (!json_is_object(v))
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: \"__metadata__\" is %s, not an object", label,
                         tide_json_kind(v));
    size_t n = json_object_size(v);
    h->meta_keys = calloc(n ? n : 1, sizeof *h->meta_keys);
    h->meta_vals = calloc(n ? n : 1, sizeof *h->meta_vals);
    if (!h->meta_keys || !h->meta_vals) return tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", label);
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val) {
        if (!json_is_string(val))
            return tide_fail(st, TIDE_ERR_FORMAT,
                             "%s: \"__metadata__\" value of " NAME_FMT " is %s, not a string", label,
                             key, tide_json_kind(val));
        h->meta_keys[h->nmeta] = strdup(key);
        h->meta_vals[h->nmeta] = strdup(json_string_value(val));
        h->nmeta++;
        if (!h->meta_keys[h->nmeta - 1] || !h->meta_vals[h->nmeta - 1])
            return tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", label);
    }
    return 0;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const tide_tensor *)a)->name, ((const tide_tensor *)b)->name);
}

static int cmp_offset(const void *a, const void *b) {
    const tide_tensor *x = *(const tide_tensor *const *)a, *y = *(const tide_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The tensors, taken in offset order, must cover [0, data_size) exactly.
 * Offsets are still relative to the data region here. */
static int check_tiling(const tide_st_header *h, tide_status *st) {
    const char *label = h->file;
    if (h->ntensors == 0) {
        if (h->data_size)
            return tide_fail(st, TIDE_ERR_FORMAT,
                             "%s: %" PRIu64 " bytes of data but the header lists no tensor", label,
                             h->data_size);
        return 0;
    }
    const tide_tensor **by = malloc(h->ntensors * sizeof *by);
    if (!by) return tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", label);
    for (size_t i = 0; i < h->ntensors; i++) by[i] = &h->tensors[i];
    qsort(by, h->ntensors, sizeof *by, cmp_offset);
    int rc = 0;
    uint64_t pos = 0;
    const tide_tensor *prev = NULL;
    for (size_t i = 0; i < h->ntensors && rc == 0; i++) {
        const tide_tensor *t = by[i];
        uint64_t end = t->offset + t->nbytes;
        if (end > h->data_size)
            rc = tide_fail(st, TIDE_ERR_FORMAT,
                           "%s: tensor " NAME_FMT ": data_offsets [%" PRIu64 ", %" PRIu64
                           "] run past the end of the file (%" PRIu64 " bytes of data)",
                           label, t->name, t->offset, end, h->data_size);
        else if (t->offset < pos)
            rc = tide_fail(st, TIDE_ERR_FORMAT,
                           "%s: tensor " NAME_FMT ": data_offsets [%" PRIu64 ", %" PRIu64
                           "] overlap tensor " NAME_FMT " [%" PRIu64 ", %" PRIu64 "]",
                           label, t->name, t->offset, end, prev->name, prev->offset,
                           prev->offset + prev->nbytes);
        else if (t->offset > pos)
            rc = tide_fail(st, TIDE_ERR_FORMAT,
                           "%s: tensor " NAME_FMT ": data_offsets [%" PRIu64 ", %" PRIu64
                           "] leave a gap of %" PRIu64 " bytes after %s%s%s (byte %" PRIu64 ")",
                           label, t->name, t->offset, end, t->offset - pos,
                           prev ? "tensor '" : "the start of the data", prev ? prev->name : "",
                           prev ? "'" : "", pos);
        pos = end;
        prev = t;
    }
    if (rc == 0 && pos != h->data_size)
        rc = tide_fail(st, TIDE_ERR_FORMAT,
                       "%s: %" PRIu64 " bytes after the last tensor " NAME_FMT
                       " belong to no tensor (data region is %" PRIu64 " bytes)",
                       label, h->data_size - pos, prev->name, h->data_size);
    free(by);
    return rc;
}

static int parse_object(const json_t *root, tide_st_header *h, tide_status *st) {
    const char *label = h->file;
    size_t n = json_object_size(root);
    h->tensors = calloc(n ? n : 1, sizeof *h->tensors);
    if (!h->tensors) return tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", label);
    const char *key;
    json_t *val;
    bool seen_meta = false;
    json_object_foreach((json_t *)root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (seen_meta) continue; /* unreachable: duplicates are rejected by the parser */
            seen_meta = true;
            if (parse_meta(label, val, h, st) != 0) return -1;
            continue;
        }
        tide_tensor *t = &h->tensors[h->ntensors];
        t->name = strdup(key);
        if (!t->name) return tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", label);
        h->ntensors++;
        t->file = h->file;
        if (parse_entry(label, key, val, t, st) != 0) return -1;
    }
    if (check_tiling(h, st) != 0) return -1;
    for (size_t i = 0; i < h->ntensors; i++) h->tensors[i].offset += h->data_start;
    qsort(h->tensors, h->ntensors, sizeof *h->tensors, cmp_name);
    return 0;
}

static int parse_json(const uint8_t *json, tide_st_header *h, tide_status *st) {
    const char *label = h->file;
    json_error_t err;
    /* Duplicate keys are refused by the parser itself: a tensor named twice. */
    json_t *root = json_loadb((const char *)json, (size_t)h->header_len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return tide_fail(st, TIDE_ERR_FORMAT,
                         "%s: header is not valid JSON: %s (header byte %d of %" PRIu64 ")", label,
                         err.text, err.position, h->header_len);
    int rc = 0;
    if (!json_is_object(root))
        rc = tide_fail(st, TIDE_ERR_FORMAT, "%s: header is %s, not a JSON object", label,
                       tide_json_kind(root));
    else
        rc = parse_object(root, h, st);
    json_decref(root);
    return rc;
}

int tide_st_parse_header(const uint8_t *buf, size_t len, uint64_t file_size, const char *label,
                         tide_st_header **out, tide_status *st) {
    *out = NULL;
    if (!label) label = "safetensors";
    if (len > file_size)
        return tide_fail(st, TIDE_ERR_INVALID, "%s: buffer of %zu bytes exceeds the file size %" PRIu64,
                         label, len, file_size);
    if (file_size < 8)
        return tide_fail(st, TIDE_ERR_FORMAT,
                         "%s: file is %" PRIu64 " bytes, too short for the 8-byte header length",
                         label, file_size);
    if (len < 8)
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: only %zu bytes of the header length available",
                         label, len);
    uint64_t n = read_le64(buf);
    /* A safetensors file starts with a binary length, so a first byte of '{'
     * is a JSON text given in its place (e.g. --model DIR/config.json): say
     * that instead of reporting its first 8 characters as a huge length. */
    if (n > TIDE_ST_MAX_HEADER && buf[0] == '{')
        return tide_fail(st, TIDE_ERR_FORMAT,
                         "%s: not a safetensors file: it starts with '{' (a JSON text such as config.json or "
                         "an index?); a safetensors file starts with an 8-byte header length",
                         label);
    if (n < 2)
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: header length %" PRIu64 " is too small for a JSON object",
                         label, n);
    if (n > TIDE_ST_MAX_HEADER)
        return tide_fail(st, TIDE_ERR_FORMAT,
                         "%s: header length %" PRIu64 " exceeds the limit of %" PRIu64
                         " bytes (corrupt or not a safetensors file)",
                         label, n, TIDE_ST_MAX_HEADER);
    if (n > file_size - 8)
        return tide_fail(st, TIDE_ERR_FORMAT,
                         "%s: header length %" PRIu64 " runs past the end of the file (%" PRIu64
                         " bytes): truncated?",
                         label, n, file_size);
    if (n > len - 8)
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: only %zu of the %" PRIu64 " header bytes available",
                         label, len - 8, n);
    tide_st_header *h = calloc(1, sizeof *h);
    if (!h || !(h->file = strdup(label))) {
        free(h);
        return tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", label);
    }
    h->header_len = n;
    h->data_start = 8 + n;
    h->data_size = file_size - h->data_start;
    if (parse_json(buf + 8, h, st) != 0) {
        tide_st_header_free(h);
        return -1;
    }
    *out = h;
    return 0;
}

void tide_st_header_free(tide_st_header *h) {
    if (!h) return;
    for (size_t i = 0; i < h->ntensors; i++) free((char *)h->tensors[i].name);
    free(h->tensors);
    for (size_t i = 0; i < h->nmeta; i++) {
        free(h->meta_keys[i]);
        free(h->meta_vals[i]);
    }
    free(h->meta_keys);
    free(h->meta_vals);
    free(h->file);
    free(h);
}
