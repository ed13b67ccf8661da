/* Placement: which replica prefills a prompt, which one decodes it.
 *
 * Prefill: the replicas of the wanted role are cut into contiguous groups,
 * one per prompt-length bucket, in proportion to the buckets' shares (each
 * bucket gets at least one replica; with fewer replicas than buckets,
 * neighbouring buckets share one). Within the bucket's group, the replica
 * of least expected cost = its load + w_prompt x the prompt tokens it does
 * not hold: a conversation's next turn goes where its pages are (the prefix
 * table: the last replica each chain hash was sent to) unless that
 * replica's queue is longer than the compute its cache saves (it is
 * "overloaded"), and otherwise to the least loaded. A prefill replica's
 * load counts, besides what is pending, the prompt tokens sent to it
 * halved every prefill_memory_s seconds: a replica that just took a long
 * prompt is not handed the next one because its queue looks empty. A bucket whose group is all down, or whose
 * least load is over overload_factor x the whole role's least load +
 * overload_slack, borrows every replica of the role that is up: spare
 * capacity absorbs a failure or a burst of one length.
 *
 * Round-robin (the baseline of `tide bench route`) ignores buckets, loads
 * and prefixes: every replica of the role that is up, in turn.
 *
 * Decode: the replica of least load = w_prompt x pending prompt tokens +
 * w_running x running requests + w_context x cached context tokens; ties
 * go round the pool so that an idle pool is filled evenly.
 *
 * The prefix table is direct-mapped (one entry per slot, the newest
 * wins): bounded memory, and a forgotten prefix only costs a cache miss. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "cluster/route.h"

uint64_t tide_route_chain(uint64_t prev, const void *bytes, size_t len) {
    uint64_t h = XXH3_64bits_withSeed(bytes, len, prev ^ 0x9e3779b97f4a7c15ull);
    return h ? h : 1; /* 0 marks an empty slot */
}

int tide_route_placer_init(tide_route_placer *p, const tide_route_policy *pol, tide_status *st) {
    memset(p, 0, sizeof *p);
    p->pol = *pol;
    int n = pol->prefix_slots;
    if (n < 1 || (n & (n - 1)))
        return tide_fail(st, TIDE_ERR_INVALID, "prefix_slots = %d: must be a power of two", n);
    p->keys = calloc((size_t)n, sizeof *p->keys);
    p->owner = calloc((size_t)n, sizeof *p->owner);
    if (!p->keys || !p->owner) {
        tide_route_placer_free(p);
        return tide_fail(st, TIDE_ERR_NOMEM, "prefix table of %d entries: out of memory", n);
    }
    return 0;
}

void tide_route_placer_free(tide_route_placer *p) {
    free(p->keys);
    free(p->owner);
    p->keys = NULL;
    p->owner = NULL;
}

int tide_route_bucket(const tide_route_policy *pol, int64_t prompt_tokens) {
    int b = 0;
    while (b < pol->n_buckets - 1 && prompt_tokens >= pol->edges[b]) b++;
    return b;
}

double tide_route_load(const tide_route_policy *pol, const tide_route_view *v) {
    return pol->w_prompt * v->prompt_tokens + pol->w_running * v->running + pol->w_context * v->context_tokens;
}

static int lookup(const tide_route_placer *p, uint64_t key) {
    size_t s = (size_t)(key & (uint64_t)(p->pol.prefix_slots - 1));
    return p->keys[s] == key ? p->owner[s] - 1 : -1;
}

void tide_route_note(tide_route_placer *p, int replica, const uint64_t *chain, int n_chain) {
    for (int i = 0; i < n_chain; i++) {
        size_t s = (size_t)(chain[i] & (uint64_t)(p->pol.prefix_slots - 1));
        p->keys[s] = chain[i];
        p->owner[s] = replica + 1;
    }
}

void tide_route_forget(tide_route_placer *p, int replica) {
    for (int s = 0; s < p->pol.prefix_slots; s++)
        if (p->owner[s] == replica + 1) p->owner[s] = 0, p->keys[s] = 0;
    if (replica >= 0 && replica < TIDE_ROUTE_MAX_REPLICAS) p->recent[replica] = 0;
}

/* The least loaded of cand[0..k), scanning from a rotating start so that
 * equal loads take turns. */
static int least_loaded(tide_route_placer *p, const tide_route_view *v, const int *cand, int k, uint64_t *cursor,
                        double *min_load) {
    int best = -1;
    double bl = 0;
    uint64_t start = (*cursor)++;
    for (int i = 0; i < k; i++) {
        int r = cand[(size_t)((start + (uint64_t)i) % (uint64_t)k)];
        double l = tide_route_load(&p->pol, &v[r]);
        if (best < 0 || l < bl) best = r, bl = l;
    }
    if (min_load) *min_load = bl;
    return best;
}

/* The prompt tokens a replica holding `held` units of the chain lacks. */
static double missing(int64_t prompt_tokens, const int64_t *upto, int n_chain, int held) {
    double have = !held ? 0 : upto ? (double)upto[held - 1] : (double)prompt_tokens * held / n_chain;
    return have < (double)prompt_tokens ? (double)prompt_tokens - have : 0;
}

/* The decayed prompt tokens sent to replica r, as of now. */
static double recent(tide_route_placer *p, int r, double now) {
    if (p->pol.prefill_memory_s <= 0) return 0;
    if (now > p->recent_t[r]) {
        p->recent[r] *= exp2(-(now - p->recent_t[r]) / p->pol.prefill_memory_s);
        p->recent_t[r] = now;
    }
    return p->recent[r];
}

/* A prefill replica's load as placement weighs it: what is pending, and
 * the prompt tokens recently sent. */
static double prefill_load(tide_route_placer *p, const tide_route_view *v, int r, double now) {
    return tide_route_load(&p->pol, &v[r]) + p->pol.w_prompt * recent(p, r, now);
}

int tide_route_place_prefill(tide_route_placer *p, const tide_route_view *v, int n, tide_route_role want, double now,
                             int64_t prompt_tokens, const uint64_t *chain, const int64_t *upto, int n_chain,
                             int *hit_units) {
    if (hit_units) *hit_units = 0;
    int role[TIDE_ROUTE_MAX_REPLICAS], m = 0;
    for (int r = 0; r < n && m < TIDE_ROUTE_MAX_REPLICAS; r++)
        if (v[r].role == want) role[m++] = r;
    if (!m) return -1;
    /* the bucket's group: positions [lo, hi) of the role's replicas */
    int b = tide_route_bucket(&p->pol, prompt_tokens);
    double cum = 0;
    for (int i = 0; i < b; i++) cum += p->pol.shares[i];
    int lo = (int)(cum * m + 1e-9), hi = (int)((cum + p->pol.shares[b]) * m + 1e-9);
    if (b == p->pol.n_buckets - 1) hi = m;
    if (lo >= m) lo = m - 1;
    if (hi <= lo) hi = lo + 1;
    int cand[TIDE_ROUTE_MAX_REPLICAS], k = 0;
    for (int i = lo; i < hi; i++)
        if (v[role[i]].up) cand[k++] = role[i];
    if (p->pol.mode == TIDE_PLACE_ROUND_ROBIN) { /* the baseline: every replica of the role in turn */
        k = 0;
        for (int i = 0; i < m; i++)
            if (v[role[i]].up) cand[k++] = role[i];
        return k ? cand[(size_t)(p->rr[0]++ % (uint64_t)k)] : -1;
    }
    /* the group is down, or overloaded next to the rest of the pool: spare
     * capacity elsewhere takes the request */
    double min_load = 0, all_min = 0;
    int all[TIDE_ROUTE_MAX_REPLICAS], n_all = 0;
    for (int i = 0; i < m; i++)
        if (v[role[i]].up) all[n_all++] = role[i];
    if (!n_all) return -1;
    for (int i = 0; i < n_all; i++) {
        double l = prefill_load(p, v, all[i], now);
        if (!i || l < all_min) all_min = l;
    }
    for (int i = 0; i < k; i++) {
        double l = prefill_load(p, v, cand[i], now);
        if (!i || l < min_load) min_load = l;
    }
    if (!k || min_load > p->pol.overload_factor * all_min + p->pol.overload_slack) {
        memcpy(cand, all, (size_t)n_all * sizeof *all);
        k = n_all;
    }
    /* expected cost on each candidate: its load plus the prompt's tokens
     * that it does not hold (a replica holding unit i of the chain holds
     * every unit before it: it computed that prefix) */
    int held[TIDE_ROUTE_MAX_REPLICAS] = {0};
    if (n_chain > 0) p->lookups++;
    for (int i = 0; i < n_chain; i++) {
        int o = lookup(p, chain[i]);
        if (o >= 0 && o < n) held[o] = i + 1;
    }
    int best = -1;
    double best_cost = 0;
    uint64_t start = p->rr[b]++;
    for (int j = 0; j < k; j++) {
        int r = cand[(size_t)((start + (uint64_t)j) % (uint64_t)k)];
        double miss = missing(prompt_tokens, upto, n_chain, held[r]);
        double cost = prefill_load(p, v, r, now) + p->pol.w_prompt * miss;
        if (best < 0 || cost < best_cost) best = r, best_cost = cost;
    }
    p->recent[best] += missing(prompt_tokens, upto, n_chain, held[best]);
    if (held[best]) p->hits++;
    if (hit_units) *hit_units = held[best];
    return best;
}

int tide_route_place_decode(tide_route_placer *p, const tide_route_view *v, int n, tide_route_role want) {
    int cand[TIDE_ROUTE_MAX_REPLICAS], k = 0;
    for (int r = 0; r < n && k < TIDE_ROUTE_MAX_REPLICAS; r++)
        if (v[r].role == want && v[r].up) cand[k++] = r;
    if (!k) return -1;
    uint64_t *cur = &p->rr[TIDE_ROUTE_MAX_BUCKETS];
    if (p->pol.mode == TIDE_PLACE_ROUND_ROBIN) return cand[(size_t)((*cur)++ % (uint64_t)k)];
    return least_loaded(p, v, cand, k, cur, NULL);
}
