/* The trace simulation (route_sim.h says what it models). The placer is the
 * live router's (route_place.c): the simulation only supplies the views a
 * router would have (a prefill replica's backlog as prompt tokens, a decode
 * replica's running requests and their context). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/stats.h"
#include "cluster/route_sim.h"

tide_sim_config tide_sim_config_default(void) {
    /* Figures of one H200-class replica, round numbers: 20K prompt tokens/s
     * of prefill, 20 ms decode steps growing with the batch and its context. */
    tide_sim_config c = {
        .n_prefill = 4,
        .n_decode = 4,
        .policy = tide_route_policy_default(),
        .prefill_s_per_token = 1.0 / 20000,
        .prefill_overhead_s = 0.005,
        .decode_step_s = 0.020,
        .decode_s_per_seq = 0.0002,
        .decode_s_per_ctx_token = 2e-8,
        .cache_blocks = 4096,
        .window_s = 60,
    };
    return c;
}

/* ---- an exact LRU set of hash units ---- */
typedef struct lru {
    uint64_t *keys;
    int64_t *stamp; /* -1: not held */
    uint64_t mask;
    int64_t count, limit, clock;
    uint64_t *rk; /* uses in order: (key, stamp); stale entries are skipped */
    int64_t *rs;
    int64_t rh, rn, rcap;
} lru;

static int lru_init(lru *l, int64_t distinct, int64_t limit) {
    memset(l, 0, sizeof *l);
    uint64_t n = 16;
    while (n < (uint64_t)distinct * 2) n <<= 1;
    l->keys = calloc(n, sizeof *l->keys);
    l->stamp = malloc(n * sizeof *l->stamp);
    if (!l->keys || !l->stamp) return -1;
    for (uint64_t i = 0; i < n; i++) l->stamp[i] = -1;
    l->mask = n - 1;
    l->limit = limit;
    return 0;
}

static void lru_free(lru *l) {
    free(l->keys);
    free(l->stamp);
    free(l->rk);
    free(l->rs);
}

static uint64_t lru_slot(const lru *l, uint64_t key) {
    uint64_t s = (key * 0x9e3779b97f4a7c15ull) & l->mask;
    while (l->keys[s] && l->keys[s] != key) s = (s + 1) & l->mask;
    return s;
}

static int lru_has(const lru *l, uint64_t key) {
    uint64_t s = lru_slot(l, key);
    return l->keys[s] == key && l->stamp[s] >= 0;
}

static int lru_use(lru *l, uint64_t key) {
    uint64_t s = lru_slot(l, key);
    l->keys[s] = key;
    if (l->stamp[s] < 0) l->count++;
    l->stamp[s] = ++l->clock;
    if (l->rh + l->rn == l->rcap) {
        if (l->rh > l->rcap / 2) {
            memmove(l->rk, l->rk + l->rh, (size_t)l->rn * sizeof *l->rk);
            memmove(l->rs, l->rs + l->rh, (size_t)l->rn * sizeof *l->rs);
            l->rh = 0;
        } else {
            int64_t nc = l->rcap ? 2 * l->rcap : 1024;
            uint64_t *nk = realloc(l->rk, (size_t)nc * sizeof *nk);
            if (!nk) return -1;
            l->rk = nk;
            int64_t *ns = realloc(l->rs, (size_t)nc * sizeof *ns);
            if (!ns) return -1;
            l->rs = ns;
            l->rcap = nc;
        }
    }
    l->rk[l->rh + l->rn] = key;
    l->rs[l->rh + l->rn] = l->clock;
    l->rn++;
    while (l->count > l->limit && l->rn) {
        uint64_t k = l->rk[l->rh];
        int64_t st = l->rs[l->rh];
        l->rh++, l->rn--;
        uint64_t q = lru_slot(l, k);
        if (l->stamp[q] == st) l->stamp[q] = -1, l->count--;
    }
    return 0;
}

/* ---- balancedness ---- */
typedef struct job {
    int64_t window;
    int replica;
    double work;
} job;

static int by_window_then_work(const void *a, const void *b) {
    const job *x = a, *y = b;
    if (x->window != y->window) return x->window < y->window ? -1 : 1;
    return x->work > y->work ? -1 : x->work < y->work; /* longest first, for LPT */
}

static double mean_over_max(const double *load, int m) {
    double s = 0, mx = 0;
    for (int i = 0; i < m; i++) s += load[i], mx = load[i] > mx ? load[i] : mx;
    return mx > 0 ? s / m / mx : 1;
}

/* Work-weighted mean over windows of (mean / max load): placed, and LPT;
 * *bound: what no assignment can beat, mean / max(mean, the window's
 * largest job). */
static void balancedness(job *jobs, int64_t n, int m, double *placed, double *ideal, double *bound) {
    qsort(jobs, (size_t)n, sizeof *jobs, by_window_then_work);
    double wsum = 0, ps = 0, is = 0, bs = 0;
    double a[TIDE_ROUTE_MAX_REPLICAS], b[TIDE_ROUTE_MAX_REPLICAS];
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        double w = 0;
        memset(a, 0, sizeof a);
        memset(b, 0, sizeof b);
        for (; j < n && jobs[j].window == jobs[i].window; j++) {
            a[jobs[j].replica] += jobs[j].work;
            int lo = 0;
            for (int r = 1; r < m; r++)
                if (b[r] < b[lo]) lo = r;
            b[lo] += jobs[j].work;
            w += jobs[j].work;
        }
        ps += w * mean_over_max(a, m);
        is += w * mean_over_max(b, m);
        double mean = w / m, big = jobs[i].work; /* longest first */
        bs += w * (mean > 0 ? mean / (big > mean ? big : mean) : 1);
        wsum += w;
        i = j;
    }
    *placed = wsum > 0 ? ps / wsum : 1;
    *ideal = wsum > 0 ? is / wsum : 1;
    *bound = wsum > 0 ? bs / wsum : 1;
}

typedef struct active {
    double end;
    int64_t prompt, ctx; /* ctx: prompt + output, what the cost model charges */
} active;

typedef struct decoding {
    active *a;
    int64_t n, cap, ctx;
} decoding;

static int by_finish(const void *a, const void *b) {
    const double *x = a, *y = b; /* (finish, index) pairs */
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

int tide_sim_run(const tide_trace *t, const tide_sim_config *c, tide_sim_result *out, tide_status *st) {
    memset(out, 0, sizeof *out);
    int P = c->n_prefill, D = c->n_decode, N = P + D;
    if (P < 1 || D < 1 || N > TIDE_ROUTE_MAX_REPLICAS)
        return tide_fail(st, TIDE_ERR_INVALID, "simulation: %d prefill + %d decode replicas: need 1 or more of each, "
                                               "%d in all at most", P, D, TIDE_ROUTE_MAX_REPLICAS);
    if (!(c->window_s > 0)) return tide_fail(st, TIDE_ERR_INVALID, "simulation: the window must be > 0 s");
    int rc = -1;
    tide_route_placer pl;
    if (tide_route_placer_init(&pl, &c->policy, st)) return -1;
    lru caches[TIDE_ROUTE_MAX_REPLICAS];
    decoding dec[TIDE_ROUTE_MAX_REPLICAS];
    memset(caches, 0, sizeof caches);
    memset(dec, 0, sizeof dec);
    double free_at[TIDE_ROUTE_MAX_REPLICAS] = {0};
    int64_t n = t->n;
    double *fin = malloc((size_t)n * 2 * sizeof *fin);
    double *ttft = malloc((size_t)n * sizeof *ttft), *tpot = malloc((size_t)n * sizeof *tpot);
    job *pj = malloc((size_t)n * sizeof *pj), *dj = malloc((size_t)n * sizeof *dj);
    int64_t n_tpot = 0;
    if (!fin || !ttft || !tpot || !pj || !dj) {
        tide_fail(st, TIDE_ERR_NOMEM, "simulation: out of memory");
        goto out;
    }
    for (int r = 0; r < P; r++)
        if (lru_init(&caches[r], t->n_hashes, c->cache_blocks)) {
            tide_fail(st, TIDE_ERR_NOMEM, "simulation: out of memory");
            goto out;
        }
    tide_route_view v[TIDE_ROUTE_MAX_REPLICAS];
    /* prefill, in arrival order */
    for (int64_t i = 0; i < n; i++) {
        const tide_trace_req *q = &t->reqs[i];
        const uint64_t *chain = t->hashes ? t->hashes + q->hash_off : NULL;
        for (int r = 0; r < N; r++) {
            double backlog = r < P && free_at[r] > q->t ? free_at[r] - q->t : 0;
            v[r] = (tide_route_view){.role = r < P ? TIDE_ROLE_PREFILL : TIDE_ROLE_DECODE,
                                     .up = 1,
                                     .prompt_tokens = backlog / c->prefill_s_per_token};
        }
        int k = tide_route_place_prefill(&pl, v, N, TIDE_ROLE_PREFILL, q->t, q->in_len, chain, NULL, q->n_hash, NULL);
        int hit = 0;
        while (hit < q->n_hash && lru_has(&caches[k], chain[hit])) hit++;
        int64_t hit_tokens = (int64_t)hit * t->block_tokens;
        if (hit_tokens > q->in_len - 1) hit_tokens = q->in_len > 0 ? q->in_len - 1 : 0; /* one token is computed */
        double work = c->prefill_overhead_s + c->prefill_s_per_token * (double)(q->in_len - hit_tokens);
        double start = free_at[k] > q->t ? free_at[k] : q->t;
        free_at[k] = start + work;
        for (int h = 0; h < q->n_hash; h++)
            if (lru_use(&caches[k], chain[h])) {
                tide_fail(st, TIDE_ERR_NOMEM, "simulation: out of memory");
                goto out;
            }
        tide_route_note(&pl, k, chain, q->n_hash);
        out->prompt_tokens += q->in_len;
        out->hit_tokens += hit_tokens;
        fin[2 * i] = free_at[k];
        fin[2 * i + 1] = (double)i;
        ttft[i] = free_at[k] - q->t;
        pj[i] = (job){(int64_t)(q->t / c->window_s), k, work};
    }
    /* decode, in the order prefills finish */
    qsort(fin, (size_t)n, 2 * sizeof *fin, by_finish);
    for (int64_t o = 0; o < n; o++) {
        double now = fin[2 * o];
        int64_t i = (int64_t)fin[2 * o + 1];
        const tide_trace_req *q = &t->reqs[i];
        for (int r = 0; r < N; r++) {
            v[r] = (tide_route_view){.role = r < P ? TIDE_ROLE_PREFILL : TIDE_ROLE_DECODE, .up = 1};
            if (r < P) continue;
            decoding *d = &dec[r];
            int64_t keep = 0, seen = 0, ctx = 0;
            for (int64_t a = 0; a < d->n; a++)
                if (d->a[a].end > now) {
                    d->a[keep++] = d->a[a];
                    seen += d->a[a].prompt;
                    ctx += d->a[a].ctx;
                }
            d->n = keep;
            d->ctx = ctx;
            v[r].running = (double)keep;
            /* the context a router counts: the prompts (it does not know the outputs' lengths) */
            v[r].context_tokens = (double)seen;
        }
        int k = tide_route_place_decode(&pl, v, N, TIDE_ROLE_DECODE);
        decoding *d = &dec[k];
        double step = c->decode_step_s + c->decode_s_per_seq * (v[k].running + 1) +
                      c->decode_s_per_ctx_token * (double)(d->ctx + q->in_len);
        if (d->n == d->cap) {
            int64_t nc = d->cap ? 2 * d->cap : 64;
            active *na = realloc(d->a, (size_t)nc * sizeof *na);
            if (!na) {
                tide_fail(st, TIDE_ERR_NOMEM, "simulation: out of memory");
                goto out;
            }
            d->a = na;
            d->cap = nc;
        }
        double end = now + (double)q->out_len * step;
        d->a[d->n++] = (active){end, q->in_len, q->in_len + q->out_len};
        ttft[i] += step;
        if (q->out_len > 1) tpot[n_tpot++] = step;
        if (end > out->makespan_s) out->makespan_s = end;
        double dwork = (double)q->out_len * (c->decode_s_per_seq +
                                             c->decode_s_per_ctx_token * ((double)q->in_len + q->out_len / 2.0));
        dj[o] = (job){(int64_t)(now / c->window_s), k - P, dwork};
    }
    out->requests = n;
    balancedness(pj, n, P, &out->bal_prefill, &out->ideal_prefill, &out->bound_prefill);
    balancedness(dj, n, D, &out->bal_decode, &out->ideal_decode, &out->bound_decode);
    tide_stats_sort(ttft, n);
    tide_stats_sort(tpot, n_tpot);
    static const double ps[3] = {50, 90, 99};
    for (int p = 0; p < 3; p++) {
        out->ttft[p] = tide_stats_percentile(ttft, n, ps[p]);
        out->tpot[p] = tide_stats_percentile(tpot, n_tpot, ps[p]);
    }
    rc = 0;
out:
    for (int r = 0; r < N; r++) {
        if (r < P) lru_free(&caches[r]);
        free(dec[r].a);
    }
    free(fin);
    free(ttft);
    free(tpot);
    free(pj);
    free(dj);
    tide_route_placer_free(&pl);
    return rc;
}
