/* Speculative decoding: the mode, survivals, the budget (see spec.h). */
#include "engine/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tide_spec_parse(const char *s, int *mode, int *k, tide_status *st) {
    *k = 0;
    if (!s) return tide_fail(st, TIDE_ERR_INVALID, "--spec: no value (use dspark, fixed:K or off)");
    if (!strcmp(s, "off")) {
        *mode = TIDE_SPEC_OFF;
        return 0;
    }
    if (!strcmp(s, "dspark")) {
        *mode = TIDE_SPEC_DSPARK;
        return 0;
    }
    if (!strncmp(s, "fixed:", 6)) {
        char *end;
        long v = strtol(s + 6, &end, 10);
        if (end != s + 6 && *end == 0 && v >= 1 && v <= TIDE_SPEC_MAX_BLOCK) {
            *mode = TIDE_SPEC_FIXED;
            *k = (int)v;
            return 0;
        }
        return tide_fail(st, TIDE_ERR_INVALID, "--spec %s: K must be an integer in 1..%d", s, TIDE_SPEC_MAX_BLOCK);
    }
    return tide_fail(st, TIDE_ERR_INVALID, "--spec %s: use dspark, fixed:K or off", s);
}

const char *tide_spec_name(int mode, int k, char *buf, size_t n) {
    if (mode == TIDE_SPEC_FIXED) snprintf(buf, n, "fixed:%d", k);
    else snprintf(buf, n, "%s", mode == TIDE_SPEC_DSPARK ? "dspark" : "off");
    return buf;
}

void tide_spec_survival(const float *conf, int n, float *surv) {
    float s = 1.0f;
    for (int j = 0; j < n; j++) {
        s *= (float)(1.0 / (1.0 + exp(-(double)conf[j])));
        surv[j] = s;
    }
}

typedef struct {
    float v;
    int seq, j;
} slot;

/* best survival first; on equal values the earlier position, then the
 * earlier sequence (so a sequence's picks stay a prefix) */
static int slot_cmp(const void *a, const void *b) {
    const slot *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    if (x->j != y->j) return x->j - y->j;
    return x->seq - y->seq;
}

int64_t tide_spec_budget(const tide_spec_costs *c, int mode, int k, int n, const float *surv, int stride,
                         const int *avail, int64_t base_tokens, int64_t max_b, int *take) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        take[i] = 0;
        total += avail[i];
    }
    if (mode == TIDE_SPEC_OFF || total == 0 || max_b <= 0) return 0;
    slot *sl = malloc((size_t)total * sizeof *sl);
    if (!sl) return 0; /* no speculation this step rather than a failure */
    int64_t m = 0;
    for (int i = 0; i < n; i++) {
        int lim = mode == TIDE_SPEC_FIXED && k < avail[i] ? k : avail[i];
        for (int j = 0; j < lim; j++) sl[m++] = (slot){surv[(int64_t)i * stride + j], i, j};
    }
    qsort(sl, (size_t)m, sizeof *sl, slot_cmp);
    int64_t B = m < max_b ? m : max_b;
    if (mode == TIDE_SPEC_DSPARK) {
        /* (n + sum of the B best survivals) / (draft + verify(base + B)) */
        double draft = c->draft_per_seq * n, gain = n, best = -1;
        int64_t best_b = 0;
        for (int64_t b = 0; b <= B; b++) {
            if (b > 0) gain += sl[b - 1].v;
            double cost = draft + c->verify_fixed + c->verify_per_token * (double)(base_tokens + b);
            double score = cost > 0 ? gain / cost : gain;
            if (score > best) {
                best = score;
                best_b = b;
            }
        }
        B = best_b;
    }
    for (int64_t b = 0; b < B; b++) take[sl[b].seq]++;
    free(sl);
    return B;
}

int tide_spec_draft_pays(const tide_spec_costs *c, int n, double surv_b, int64_t base, int64_t B) {
    double with = c->draft_per_seq * n + c->verify_fixed + c->verify_per_token * (double)(base + B);
    double without = c->verify_fixed + c->verify_per_token * (double)base;
    if (!(with > 0) || !(without > 0)) return 1;
    return (n + surv_b) / with >= n / without;
}

void tide_spec_simulate(const tide_spec_costs *c, int mode, int k, int n, int block, const float *acc,
                        double *tokens_per_seq, double *verified_per_seq, double *step_seconds) {
    float s[TIDE_SPEC_MAX_BLOCK];
    if (block > TIDE_SPEC_MAX_BLOCK) block = TIDE_SPEC_MAX_BLOCK;
    float p = 1.0f;
    for (int j = 0; j < block; j++) s[j] = p *= acc[j];
    if (n < 1) n = 1;
    float *surv = calloc((size_t)n * (size_t)block + 1, sizeof *surv);
    int *avail = calloc((size_t)n, sizeof *avail), *take = calloc((size_t)n, sizeof *take);
    if (!surv || !avail || !take) abort();
    for (int i = 0; i < n; i++) {
        memcpy(surv + (int64_t)i * block, s, (size_t)block * sizeof *s);
        avail[i] = block;
    }
    int64_t B = tide_spec_budget(c, mode, k, n, surv, block, avail, n, INT64_MAX, take);
    double tok = 0;
    for (int i = 0; i < n; i++) {
        tok += 1;
        for (int j = 0; j < take[i]; j++) tok += s[j];
    }
    *tokens_per_seq = tok / n;
    *verified_per_seq = (double)B / n;
    double draft = mode == TIDE_SPEC_OFF ? 0 : c->draft_per_seq * n;
    *step_seconds = draft + c->verify_fixed + c->verify_per_token * (double)(n + B);
    free(surv);
    free(avail);
    free(take);
}
