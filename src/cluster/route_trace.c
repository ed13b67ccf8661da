/* Mooncake and Azure trace parsing (route_trace.h has the formats). Every
 * refusal names the line and what was wrong with it. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "base/fs.h"
#include "base/json.h"
#include "cluster/route.h"
#include "cluster/route_trace.h"

void tide_trace_free(tide_trace *t) {
    free(t->reqs);
    free(t->hashes);
    memset(t, 0, sizeof *t);
}

static int push_req(tide_trace *t, int64_t *cap, const tide_trace_req *r, tide_status *st) {
    if (t->n == TIDE_TRACE_MAX_REQS)
        return tide_fail(st, TIDE_ERR_INVALID, "more than %d requests", TIDE_TRACE_MAX_REQS);
    if (t->n == *cap) {
        int64_t nc = *cap ? 2 * *cap : 1024;
        tide_trace_req *nr = realloc(t->reqs, (size_t)nc * sizeof *nr);
        if (!nr) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        t->reqs = nr;
        *cap = nc;
    }
    t->reqs[t->n++] = *r;
    return 0;
}

static int push_hash(tide_trace *t, int64_t *cap, uint64_t h, tide_status *st) {
    if (t->n_hashes == *cap) {
        int64_t nc = *cap ? 2 * *cap : 4096;
        uint64_t *nh = realloc(t->hashes, (size_t)nc * sizeof *nh);
        if (!nh) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        t->hashes = nh;
        *cap = nc;
    }
    t->hashes[t->n_hashes++] = h;
    return 0;
}

static int get_len(json_t *o, const char *key, int64_t *out, tide_status *st) {
    json_t *v = json_object_get(o, key);
    if (!v) return tide_fail(st, TIDE_ERR_INVALID, "\"%s\" is missing", key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > TIDE_TRACE_MAX_LEN)
        return tide_fail(st, TIDE_ERR_INVALID, "\"%s\" must be an integer 0..%d", key, TIDE_TRACE_MAX_LEN);
    *out = json_integer_value(v);
    return 0;
}

static int mooncake_line(tide_trace *t, const char *s, size_t n, int64_t *rcap, int64_t *hcap, tide_status *st) {
    json_error_t je;
    json_t *o = json_loadb(s, n, 0, &je);
    if (!o) return tide_fail(st, TIDE_ERR_INVALID, "column %d: %s", je.column, je.text);
    int rc = -1;
    tide_trace_req r = {.hash_off = t->n_hashes};
    if (!json_is_object(o)) {
        tide_fail(st, TIDE_ERR_INVALID, "expected an object, got %s", tide_json_kind(o));
        goto out;
    }
    json_t *ts = json_object_get(o, "timestamp");
    if (!json_is_number(ts) || !(json_number_value(ts) >= 0 && json_number_value(ts) < 1e15)) {
        tide_fail(st, TIDE_ERR_INVALID, "\"timestamp\" must be a number of milliseconds >= 0");
        goto out;
    }
    r.t = json_number_value(ts) * 1e-3;
    if (get_len(o, "input_length", &r.in_len, st) || get_len(o, "output_length", &r.out_len, st)) goto out;
    json_t *ids = json_object_get(o, "hash_ids");
    if (ids) {
        if (!json_is_array(ids) || json_array_size(ids) > TIDE_TRACE_MAX_HASHES) {
            tide_fail(st, TIDE_ERR_INVALID, "\"hash_ids\" must be an array of at most %d integers",
                      TIDE_TRACE_MAX_HASHES);
            goto out;
        }
        uint64_t h = 0;
        for (size_t i = 0; i < json_array_size(ids); i++) {
            json_t *x = json_array_get(ids, i);
            if (!json_is_integer(x)) {
                tide_fail(st, TIDE_ERR_INVALID, "\"hash_ids\"[%zu] must be an integer", i);
                goto out;
            }
            int64_t id = json_integer_value(x);
            h = tide_route_chain(h, &id, sizeof id);
            if (push_hash(t, hcap, h, st)) goto out;
        }
        r.n_hash = (int)json_array_size(ids);
    }
    rc = push_req(t, rcap, &r, st);
out:
    json_decref(o);
    return rc;
}

/* "YYYY-MM-DD HH:MM:SS[.fraction]" (UTC) -> seconds since the epoch. */
static int azure_time(const char *s, size_t n, double *out) {
    char buf[64];
    if (n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int used = 0;
    if (sscanf(buf, "%4d-%2d-%2d %2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
               &tm.tm_sec, &used) != 6)
        return -1;
    if (tm.tm_year < 1970 || tm.tm_year > 9999 || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
        tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
        return -1;
    double frac = 0;
    const char *p = buf + used;
    if (*p == '.') {
        double scale = 0.1;
        p++;
        if (!isdigit((unsigned char)*p)) return -1;
        for (; isdigit((unsigned char)*p); p++, scale *= 0.1) frac += (*p - '0') * scale;
    }
    if (*p) return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    *out = (double)timegm(&tm) + frac;
    return 0;
}

static int azure_int(const char *s, size_t n, int64_t *out) {
    if (!n || n > 12) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v > TIDE_TRACE_MAX_LEN) return -1;
    *out = v;
    return 0;
}

static int azure_line(tide_trace *t, const char *s, size_t n, int64_t *rcap, tide_status *st) {
    const char *c1 = memchr(s, ',', n);
    const char *c2 = c1 ? memchr(c1 + 1, ',', n - (size_t)(c1 + 1 - s)) : NULL;
    if (!c2) return tide_fail(st, TIDE_ERR_INVALID, "expected TIMESTAMP,ContextTokens,GeneratedTokens");
    tide_trace_req r = {0};
    if (azure_time(s, (size_t)(c1 - s), &r.t))
        return tide_fail(st, TIDE_ERR_INVALID, "TIMESTAMP: expected YYYY-MM-DD HH:MM:SS[.fraction]");
    if (azure_int(c1 + 1, (size_t)(c2 - c1 - 1), &r.in_len))
        return tide_fail(st, TIDE_ERR_INVALID, "ContextTokens: expected an integer 0..%d", TIDE_TRACE_MAX_LEN);
    if (azure_int(c2 + 1, n - (size_t)(c2 + 1 - s), &r.out_len))
        return tide_fail(st, TIDE_ERR_INVALID, "GeneratedTokens: expected an integer 0..%d", TIDE_TRACE_MAX_LEN);
    return push_req(t, rcap, &r, st);
}

static int by_time(const void *a, const void *b) {
    const tide_trace_req *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->hash_off < y->hash_off ? -1 : x->hash_off > y->hash_off; /* stable: hash_off grows with the line */
}

int tide_trace_parse(const char *text, size_t len, const char *where, tide_trace *t, tide_status *st) {
    memset(t, 0, sizeof *t);
    size_t i = 0;
    while (i < len && isspace((unsigned char)text[i])) i++;
    int mooncake = i < len && text[i] == '{';
    t->format = mooncake ? "mooncake" : "azure";
    t->block_tokens = mooncake ? 512 : 0;
    int64_t rcap = 0, hcap = 0, line = 0;
    int header = !mooncake;
    for (size_t p = 0; p < len;) {
        const char *nl = memchr(text + p, '\n', len - p);
        size_t e = nl ? (size_t)(nl - text) : len;
        size_t n = e - p;
        line++;
        const char *s = text + p;
        p = e + 1;
        if (n && s[n - 1] == '\r') n--;
        size_t k = 0;
        while (k < n && isspace((unsigned char)s[k])) k++;
        if (k == n) continue; /* blank line */
        int rc;
        if (header) {
            header = 0;
            if (n != 39 || strncmp(s, "TIMESTAMP,ContextTokens,GeneratedTokens", 39)) {
                tide_fail(st, TIDE_ERR_INVALID,
                          "%s: line %lld: neither a Mooncake line ({...}) nor the Azure header "
                          "TIMESTAMP,ContextTokens,GeneratedTokens",
                          where, (long long)line);
                goto fail;
            }
            continue;
        }
        rc = mooncake ? mooncake_line(t, s, n, &rcap, &hcap, st) : azure_line(t, s, n, &rcap, st);
        if (rc) {
            tide_fail_ctx(st, "%s: line %lld", where, (long long)line);
            goto fail;
        }
        if (!mooncake) t->reqs[t->n - 1].hash_off = t->n - 1;
    }
    if (!t->n) {
        tide_fail(st, TIDE_ERR_INVALID, "%s: no requests", where);
        goto fail;
    }
    qsort(t->reqs, (size_t)t->n, sizeof *t->reqs, by_time);
    if (!mooncake) /* hash_off held the line order for the sort; no hashes */
        for (int64_t r = 0; r < t->n; r++) t->reqs[r].hash_off = 0;
    double t0 = t->reqs[0].t;
    for (int64_t r = 0; r < t->n; r++) t->reqs[r].t -= t0;
    return 0;
fail:
    tide_trace_free(t);
    return -1;
}

int tide_trace_load(const char *path, tide_trace *t, tide_status *st) {
    memset(t, 0, sizeof *t);
    char *buf;
    size_t len;
    if (tide_read_file(path, (size_t)1 << 32, &buf, &len, st)) return -1;
    int rc = tide_trace_parse(buf, len, path, t, st);
    free(buf);
    return rc;
}
