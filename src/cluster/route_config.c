/* The router's configuration file (JSON; docs/route.md has the format).
 * Every field is optional except the replicas' urls; an unknown field is
 * an error (a misspelt option silently ignored is worse than a refusal). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/fs.h"
#include "base/json.h"
#include "cluster/route.h"

const char *tide_route_role_name(tide_route_role r) {
    return r == TIDE_ROLE_PREFILL ? "prefill" : r == TIDE_ROLE_DECODE ? "decode" : "mixed";
}

int tide_route_role_parse(const char *s, tide_route_role *out) {
    if (!strcmp(s, "prefill")) *out = TIDE_ROLE_PREFILL;
    else if (!strcmp(s, "decode")) *out = TIDE_ROLE_DECODE;
    else if (!strcmp(s, "mixed")) *out = TIDE_ROLE_MIXED;
    else return -1;
    return 0;
}

tide_route_policy tide_route_policy_default(void) {
    /* DeepSeek's four prefill buckets; shares weighted toward the short
     * prompts, which are most of the traffic. A running request weighs as
     * much as 8K tokens of cached context or 2K prompt tokens waiting. */
    tide_route_policy p = {
        .mode = TIDE_PLACE_AWARE,
        .n_buckets = 4,
        .edges = {16384, 65536, 262144},
        .shares = {0.4, 0.3, 0.2, 0.1},
        .w_prompt = 1.0 / 2048,
        .w_running = 1.0,
        .w_context = 1.0 / 8192,
        .overload_factor = 1.2,
        .overload_slack = 0,
        .prefill_memory_s = 30,
        .prefix_slots = 1 << 16,
    };
    return p;
}

void tide_route_config_default(tide_route_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    c->port = 8080;
    c->policy = tide_route_policy_default();
    c->disaggregate = 1;
    c->health_interval_ms = 500;
    c->health_timeout_ms = 2000;
    c->fail_threshold = 2;
    c->retries = 2;
    c->request_timeout_s = 600;
    c->max_body = 32 << 20;
}

int tide_route_url_check(char *url, tide_status *st) {
    size_t n = strlen(url);
    if (n && url[n - 1] == '/') url[--n] = 0;
    if (strncmp(url, "http://", 7) != 0)
        return tide_fail(st, TIDE_ERR_INVALID, "replica url '%s': must start with http://", url);
    const char *hp = url + 7;
    const char *colon = strrchr(hp, ':');
    if (!colon || colon == hp)
        return tide_fail(st, TIDE_ERR_INVALID, "replica url '%s': expected http://HOST:PORT", url);
    for (const char *q = hp; q < colon; q++)
        if (*q == '/' || *q == '?' || *q == '#' || *q == '@' || (unsigned char)*q <= ' ')
            return tide_fail(st, TIDE_ERR_INVALID, "replica url '%s': expected http://HOST:PORT", url);
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || port < 1 || port > 65535)
        return tide_fail(st, TIDE_ERR_INVALID, "replica url '%s': the port must be 1..65535 with nothing after it",
                         url);
    return 0;
}

/* Field readers: each names the field in its message. */
static int get_int(json_t *o, const char *key, const char *where, int64_t lo, int64_t hi, int64_t *out,
                   tide_status *st) {
    json_t *v = json_object_get(o, key);
    if (!v) return 0;
    if (!json_is_integer(v))
        return tide_fail(st, TIDE_ERR_INVALID, "%s: \"%s\" must be an integer, got %s", where, key, tide_json_kind(v));
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return tide_fail(st, TIDE_ERR_INVALID, "%s: \"%s\" = %lld is out of range %lld..%lld", where, key,
                         (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

static int get_num(json_t *o, const char *key, const char *where, double lo, double hi, double *out,
                   tide_status *st) {
    json_t *v = json_object_get(o, key);
    if (!v) return 0;
    if (!json_is_number(v))
        return tide_fail(st, TIDE_ERR_INVALID, "%s: \"%s\" must be a number, got %s", where, key, tide_json_kind(v));
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return tide_fail(st, TIDE_ERR_INVALID, "%s: \"%s\" = %g is out of range %g..%g", where, key, x, lo, hi);
    *out = x;
    return 0;
}

static int check_keys(json_t *o, const char *where, const char *const *known, tide_status *st) {
    if (!json_is_object(o))
        return tide_fail(st, TIDE_ERR_INVALID, "%s: expected an object, got %s", where, tide_json_kind(o));
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        int ok = 0;
        for (const char *const *q = known; *q; q++) ok |= !strcmp(*q, k);
        if (!ok) return tide_fail(st, TIDE_ERR_INVALID, "%s: unknown field \"%s\"", where, k);
    }
    return 0;
}

static int parse_placement(tide_route_policy *p, json_t *o, const char *where, tide_status *st) {
    static const char *const keys[] = {"mode", "bucket_edges", "bucket_shares", "weights", "overload_factor",
                                       "overload_slack", "prefill_memory_s", "prefix_slots", NULL};
    char w[160];
    snprintf(w, sizeof w, "%s: placement", where);
    if (check_keys(o, w, keys, st)) return -1;
    json_t *v = json_object_get(o, "mode");
    if (v) {
        const char *m = json_string_value(v);
        if (m && !strcmp(m, "aware")) p->mode = TIDE_PLACE_AWARE;
        else if (m && !strcmp(m, "round-robin")) p->mode = TIDE_PLACE_ROUND_ROBIN;
        else return tide_fail(st, TIDE_ERR_INVALID, "%s: \"mode\" must be \"aware\" or \"round-robin\"", w);
    }
    json_t *e = json_object_get(o, "bucket_edges"), *s = json_object_get(o, "bucket_shares");
    if (e) {
        if (!json_is_array(e) || json_array_size(e) > TIDE_ROUTE_MAX_BUCKETS - 1)
            return tide_fail(st, TIDE_ERR_INVALID, "%s: \"bucket_edges\" must be an array of at most %d integers", w,
                             TIDE_ROUTE_MAX_BUCKETS - 1);
        int n = (int)json_array_size(e);
        for (int i = 0; i < n; i++) {
            json_t *x = json_array_get(e, (size_t)i);
            if (!json_is_integer(x) || json_integer_value(x) < 1 ||
                (i && json_integer_value(x) <= p->edges[i - 1]))
                return tide_fail(st, TIDE_ERR_INVALID,
                                 "%s: \"bucket_edges\"[%d] must be a positive integer above the one before it", w, i);
            p->edges[i] = json_integer_value(x);
        }
        p->n_buckets = n + 1;
        if (!s) /* new edges without shares: equal shares */
            for (int b = 0; b < p->n_buckets; b++) p->shares[b] = 1.0 / p->n_buckets;
    }
    if (s) {
        if (!json_is_array(s) || (int)json_array_size(s) != p->n_buckets)
            return tide_fail(st, TIDE_ERR_INVALID, "%s: \"bucket_shares\" must be an array of %d numbers (one per bucket)",
                             w, p->n_buckets);
        double sum = 0;
        for (int b = 0; b < p->n_buckets; b++) {
            json_t *x = json_array_get(s, (size_t)b);
            double f = json_is_number(x) ? json_number_value(x) : -1;
            if (!(f > 0 && f <= 1e6))
                return tide_fail(st, TIDE_ERR_INVALID, "%s: \"bucket_shares\"[%d] must be a positive number", w, b);
            p->shares[b] = f;
            sum += f;
        }
        for (int b = 0; b < p->n_buckets; b++) p->shares[b] /= sum;
    }
    json_t *wt = json_object_get(o, "weights");
    if (wt) {
        static const char *const wkeys[] = {"prompt_tokens", "running", "context_tokens", NULL};
        char ww[200];
        snprintf(ww, sizeof ww, "%s.weights", w);
        if (check_keys(wt, ww, wkeys, st) || get_num(wt, "prompt_tokens", ww, 0, 1e6, &p->w_prompt, st) ||
            get_num(wt, "running", ww, 0, 1e6, &p->w_running, st) ||
            get_num(wt, "context_tokens", ww, 0, 1e6, &p->w_context, st))
            return -1;
    }
    int64_t slots = p->prefix_slots;
    if (get_num(o, "overload_factor", w, 1, 1e6, &p->overload_factor, st) ||
        get_num(o, "overload_slack", w, 0, 1e9, &p->overload_slack, st) ||
        get_num(o, "prefill_memory_s", w, 0, 1e6, &p->prefill_memory_s, st) ||
        get_int(o, "prefix_slots", w, 16, 1 << 24, &slots, st))
        return -1;
    if (slots & (slots - 1)) return tide_fail(st, TIDE_ERR_INVALID, "%s: \"prefix_slots\" must be a power of two", w);
    p->prefix_slots = (int)slots;
    return 0;
}

static int parse_replica(tide_route_replica_cfg *r, json_t *o, const char *where, int i, tide_status *st) {
    static const char *const keys[] = {"url", "role", NULL};
    char w[160];
    snprintf(w, sizeof w, "%s: replicas[%d]", where, i);
    if (check_keys(o, w, keys, st)) return -1;
    const char *url = json_string_value(json_object_get(o, "url"));
    if (!url) return tide_fail(st, TIDE_ERR_INVALID, "%s: \"url\" (a string) is required", w);
    if (strlen(url) >= sizeof r->url) return tide_fail(st, TIDE_ERR_INVALID, "%s: \"url\" is too long", w);
    snprintf(r->url, sizeof r->url, "%s", url);
    if (tide_route_url_check(r->url, st)) return tide_fail_ctx(st, "%s", w);
    r->role = TIDE_ROLE_MIXED;
    json_t *role = json_object_get(o, "role");
    if (role && (!json_is_string(role) || tide_route_role_parse(json_string_value(role), &r->role)))
        return tide_fail(st, TIDE_ERR_INVALID, "%s: \"role\" must be \"prefill\", \"decode\" or \"mixed\"", w);
    return 0;
}

int tide_route_config_parse(tide_route_config *c, const char *json, size_t len, const char *where, tide_status *st) {
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return tide_fail(st, TIDE_ERR_INVALID, "%s: line %d column %d: %s", where, je.line, je.column, je.text);
    static const char *const keys[] = {"listen", "replicas", "placement", "disaggregate", "health", "retries",
                                       "request_timeout_s", "max_body", NULL};
    int rc = -1;
    int64_t x;
    if (check_keys(root, where, keys, st)) goto out;
    json_t *l = json_object_get(root, "listen");
    if (l) {
        static const char *const lkeys[] = {"host", "port", NULL};
        char w[160];
        snprintf(w, sizeof w, "%s: listen", where);
        if (check_keys(l, w, lkeys, st)) goto out;
        json_t *h = json_object_get(l, "host");
        if (h) {
            if (!json_is_string(h) || json_string_length(h) >= sizeof c->host || !json_string_length(h)) {
                tide_fail(st, TIDE_ERR_INVALID, "%s: \"host\" must be an address", w);
                goto out;
            }
            snprintf(c->host, sizeof c->host, "%s", json_string_value(h));
        }
        x = c->port;
        if (get_int(l, "port", w, 0, 65535, &x, st)) goto out;
        c->port = (int)x;
    }
    json_t *rs = json_object_get(root, "replicas");
    if (rs) {
        if (!json_is_array(rs) || json_array_size(rs) > TIDE_ROUTE_MAX_REPLICAS) {
            tide_fail(st, TIDE_ERR_INVALID, "%s: \"replicas\" must be an array of at most %d objects", where,
                      TIDE_ROUTE_MAX_REPLICAS);
            goto out;
        }
        c->n_replicas = 0;
        for (size_t i = 0; i < json_array_size(rs); i++) {
            if (parse_replica(&c->replicas[i], json_array_get(rs, i), where, (int)i, st)) goto out;
            for (size_t k = 0; k < i; k++)
                if (!strcmp(c->replicas[k].url, c->replicas[i].url)) {
                    tide_fail(st, TIDE_ERR_INVALID, "%s: replicas[%zu]: %s is listed twice", where, i,
                              c->replicas[i].url);
                    goto out;
                }
            c->n_replicas++;
        }
    }
    json_t *p = json_object_get(root, "placement");
    if (p && parse_placement(&c->policy, p, where, st)) goto out;
    json_t *d = json_object_get(root, "disaggregate");
    if (d) {
        if (!json_is_boolean(d)) {
            tide_fail(st, TIDE_ERR_INVALID, "%s: \"disaggregate\" must be true or false", where);
            goto out;
        }
        c->disaggregate = json_is_true(d);
    }
    json_t *h = json_object_get(root, "health");
    if (h) {
        static const char *const hkeys[] = {"interval_ms", "timeout_ms", "fail_threshold", NULL};
        char w[160];
        snprintf(w, sizeof w, "%s: health", where);
        if (check_keys(h, w, hkeys, st)) goto out;
        x = c->health_interval_ms;
        if (get_int(h, "interval_ms", w, 10, 3600000, &x, st)) goto out;
        c->health_interval_ms = (int)x;
        x = c->health_timeout_ms;
        if (get_int(h, "timeout_ms", w, 10, 600000, &x, st)) goto out;
        c->health_timeout_ms = (int)x;
        x = c->fail_threshold;
        if (get_int(h, "fail_threshold", w, 1, 1000, &x, st)) goto out;
        c->fail_threshold = (int)x;
    }
    x = c->retries;
    if (get_int(root, "retries", where, 0, TIDE_ROUTE_MAX_REPLICAS, &x, st)) goto out;
    c->retries = (int)x;
    x = c->request_timeout_s;
    if (get_int(root, "request_timeout_s", where, 1, 86400, &x, st)) goto out;
    c->request_timeout_s = (int)x;
    if (get_int(root, "max_body", where, 1024, (int64_t)1 << 32, &c->max_body, st)) goto out;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int tide_route_config_load(tide_route_config *c, const char *path, tide_status *st) {
    char *buf;
    size_t len;
    if (tide_read_file(path, (size_t)1 << 24, &buf, &len, st)) return -1;
    int rc = tide_route_config_parse(c, buf, len, path, st);
    free(buf);
    return rc;
}
