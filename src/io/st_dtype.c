/* Safetensors dtypes: names, element widths and the byte size a shape
 * implies. One table, so reader and writer can never disagree. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "io/safetensors.h"

static const struct {
    const char *name;
    unsigned bits;
} dtypes[TIDE_DT_COUNT] = {
    [TIDE_DT_F32] = {"F32", 32},         [TIDE_DT_BF16] = {"BF16", 16},
    [TIDE_DT_F16] = {"F16", 16},         [TIDE_DT_F8_E4M3] = {"F8_E4M3", 8},
    [TIDE_DT_F8_E8M0] = {"F8_E8M0", 8},  [TIDE_DT_F4] = {"F4", 4},
    [TIDE_DT_I32] = {"I32", 32},         [TIDE_DT_I64] = {"I64", 64},
    [TIDE_DT_U8] = {"U8", 8},            [TIDE_DT_F64] = {"F64", 64},
    [TIDE_DT_F8_E5M2] = {"F8_E5M2", 8},  [TIDE_DT_I8] = {"I8", 8},
    [TIDE_DT_I16] = {"I16", 16},         [TIDE_DT_U16] = {"U16", 16},
    [TIDE_DT_U32] = {"U32", 32},         [TIDE_DT_U64] = {"U64", 64},
    [TIDE_DT_BOOL] = {"BOOL", 8},
};

static bool dt_valid(tide_dtype dt) { return (int)dt >= 0 && dt < TIDE_DT_COUNT; }

const char *tide_dtype_name(tide_dtype dt) { return dt_valid(dt) ? dtypes[dt].name : "?"; }

unsigned tide_dtype_bits(tide_dtype dt) { return dt_valid(dt) ? dtypes[dt].bits : 0; }

int tide_dtype_from_name(const char *name, tide_dtype *out) {
    for (int i = 0; name && i < TIDE_DT_COUNT; i++) {
        if (strcmp(name, dtypes[i].name) == 0) {
            *out = (tide_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* 2^62 bytes: far above any real file, low enough that offsets and sums of
 * a few sizes never overflow uint64_t or int64_t. */
#define SIZE_LIMIT ((uint64_t)1 << 62)

int tide_dtype_nbytes(tide_dtype dt, int ndim, const int64_t *shape, uint64_t *nelem,
                      uint64_t *nbytes, tide_status *st) {
    if (!dt_valid(dt)) return tide_fail(st, TIDE_ERR_INVALID, "dtype %d is out of range", (int)dt);
    if (ndim < 0 || ndim > TIDE_ST_MAX_DIMS)
        return tide_fail(st, TIDE_ERR_FORMAT, "%d dimensions (at most %d are supported)", ndim,
                         TIDE_ST_MAX_DIMS);
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return tide_fail(st, TIDE_ERR_FORMAT, "dimension %d is negative (%" PRId64 ")", i,
                             shape[i]);
        if (shape[i] == 0) empty = true; /* [huge, huge, 0] is a legal empty tensor */
    }
    uint64_t n = empty ? 0 : 1;
    for (int i = 0; i < ndim && !empty; i++) {
        uint64_t d = (uint64_t)shape[i];
        if (n > SIZE_LIMIT / d)
            return tide_fail(st, TIDE_ERR_FORMAT, "shape is too large (more than 2^62 values)");
        n *= d;
    }
    unsigned bits = dtypes[dt].bits;
    if (bits == 4 && n % 2 != 0)
        return tide_fail(st, TIDE_ERR_FORMAT,
                         "F4 packs two values per byte but the shape holds %" PRIu64
                         " values (odd)", n);
    if (bits > 8 && n > SIZE_LIMIT / (bits / 8))
        return tide_fail(st, TIDE_ERR_FORMAT, "shape is too large (more than 2^62 bytes)");
    if (nelem) *nelem = n;
    *nbytes = bits == 4 ? n / 2 : n * (bits / 8);
    return 0;
}

bool tide_tensor_aligned(const tide_tensor *t) {
    unsigned bytes = tide_dtype_bits(t->dtype) / 8;
    return bytes <= 1 || (uintptr_t)t->data % bytes == 0;
}

char *tide_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    if (!cap) return buf;
    size_t used = 0;
    buf[0] = 0;
    int n = snprintf(buf, cap, "[");
    used = n > 0 ? (size_t)n : 0;
    for (int i = 0; i < ndim && used < cap; i++) {
        n = snprintf(buf + used, cap - used, "%s%" PRId64, i ? ", " : "", shape[i]);
        if (n < 0) break;
        used += (size_t)n;
    }
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}

void tide_st_shard_name(int shard, int nshards, char *buf, size_t cap) {
    snprintf(buf, cap, "model-%05d-of-%05d.safetensors", shard + 1, nshards);
}
