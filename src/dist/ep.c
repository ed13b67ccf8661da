/* Expert parallelism over a communicator: placement, the exchange round of
 * a MoE sub-layer, the sync between steps, rebalancing and recovery
 * (ep.h describes the protocol). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "dist/eplb.h"
#include "dist/ep.h"
#include "model/forward_internal.h"

typedef struct {
    int n_exp, n_phy, maxcnt;
    int *phy2log, *replica, *cnt;
    int *holders; /* [n_exp][maxcnt]: ranks holding a copy */
} place;

struct tide_ep {
    tide_comm *c;
    const tide_model *m;
    tide_ep_opts o;
    tide_pool *pool;
    const tide_ops *ops;
    int failed;
    int n_layers;
    place *pl;          /* [n_layers]; n_exp 0 = no routed experts */
    int64_t *off;       /* [n_layers + 1] offsets into load */
    int64_t *load;      /* window: (row, expert) pairs routed by this rank's rows */
    int64_t *served;    /* window: pairs this rank computed, per layer */
    int64_t n_sync;
    tide_ep_stats stats;
};

static void place_free(place *p) {
    free(p->phy2log);
    free(p->replica);
    free(p->cnt);
    free(p->holders);
    memset(p, 0, sizeof *p);
}

/* Places n_exp experts with `redundant` extra slots over world ranks from
 * load (NULL or all zero: uniform). */
static int place_build(place *p, int n_exp, int redundant, int world, const int64_t *load, tide_status *st) {
    place q = {0};
    q.n_exp = n_exp;
    q.n_phy = n_exp + redundant;
    if (q.n_phy % world) q.n_phy += world - q.n_phy % world;
    double *w = calloc((size_t)n_exp + 1, sizeof(double));
    q.phy2log = malloc((size_t)q.n_phy * sizeof(int));
    q.replica = malloc((size_t)q.n_phy * sizeof(int));
    q.cnt = malloc((size_t)n_exp * sizeof(int));
    if (!w || !q.phy2log || !q.replica || !q.cnt) abort();
    int64_t tot = 0;
    for (int e = 0; e < n_exp; e++) tot += load ? load[e] : 0;
    for (int e = 0; e < n_exp; e++) w[e] = tot > 0 ? (double)load[e] : 1.0;
    int rc = tide_eplb_place(w, n_exp, q.n_phy, 1, 1, world, q.phy2log, q.replica, q.cnt, st);
    free(w);
    if (rc != 0) {
        place_free(&q);
        return -1;
    }
    for (int e = 0; e < n_exp; e++)
        if (q.cnt[e] > q.maxcnt) q.maxcnt = q.cnt[e];
    q.holders = malloc((size_t)n_exp * (size_t)q.maxcnt * sizeof(int));
    if (!q.holders) abort();
    int per = q.n_phy / world;
    for (int s = 0; s < q.n_phy; s++) q.holders[q.phy2log[s] * q.maxcnt + q.replica[s]] = s / per;
    place_free(p);
    *p = q;
    return 0;
}

/* The rank computing expert e for row r of rank `me`: its own copy if it
 * has one, else the copies in turn. */
static int owner(const place *p, int e, int64_t r, int me) {
    const int *h = p->holders + e * p->maxcnt;
    for (int i = 0; i < p->cnt[e]; i++)
        if (h[i] == me) return me;
    return h[(r + me) % p->cnt[e]];
}

static int layer_of(const tide_model *m, const struct tide_ffn_weights *f) {
    for (int l = 0; l < m->n_layers; l++)
        if (&m->layers[l].ffn == f) return l;
    return -1;
}

int tide_ep_create(tide_comm *c, const tide_model *m, const tide_ep_opts *o, tide_ep **out, tide_status *st) {
    *out = NULL;
    if (o->redundant < 0 || o->window < 0 || o->ctl_bytes < 0 || o->ctl_bytes > (1 << 20))
        return tide_fail(st, TIDE_ERR_INVALID, "ep: bad options");
    tide_ep *ep = calloc(1, sizeof *ep);
    if (!ep) return tide_fail(st, TIDE_ERR_NOMEM, "ep: out of memory");
    ep->c = c;
    ep->m = m;
    ep->o = *o;
    ep->ops = tide_cpu_ops();
    ep->n_layers = m->n_backbone;
    ep->pl = calloc((size_t)ep->n_layers, sizeof(place));
    ep->off = calloc((size_t)ep->n_layers + 1, sizeof(int64_t));
    ep->served = calloc((size_t)ep->n_layers, sizeof(int64_t));
    if (!ep->pl || !ep->off || !ep->served) abort();
    for (int l = 0; l < ep->n_layers; l++) {
        ep->off[l + 1] = ep->off[l] + m->layers[l].ffn.n_experts;
        if (m->layers[l].ffn.top_k > 64) { /* tide_ep_moe sorts a row's experts in a small array */
            tide_ep_free(ep);
            return tide_fail(st, TIDE_ERR_UNSUPPORTED, "ep: top-%d routing (at most 64)", m->layers[l].ffn.top_k);
        }
    }
    ep->load = calloc((size_t)ep->off[ep->n_layers] + 1, sizeof(int64_t));
    if (!ep->load) abort();
    int rc = tide_pool_create(o->n_threads < 1 ? 1 : o->n_threads, &ep->pool, st);
    for (int l = 0; l < ep->n_layers && rc == 0; l++)
        if (m->layers[l].ffn.n_experts > 0)
            rc = place_build(&ep->pl[l], m->layers[l].ffn.n_experts, o->redundant, c->world, NULL, st);
    if (rc != 0) {
        tide_ep_free(ep);
        return -1;
    }
    *out = ep;
    return 0;
}

void tide_ep_free(tide_ep *ep) {
    if (!ep) return;
    for (int l = 0; l < ep->n_layers; l++) place_free(&ep->pl[l]);
    free(ep->pl);
    free(ep->off);
    free(ep->load);
    free(ep->served);
    if (ep->pool) tide_pool_destroy(ep->pool);
    free(ep);
}

int tide_ep_failed(const tide_ep *ep) { return ep->failed; }
tide_comm *tide_ep_comm(tide_ep *ep) { return ep->c; }
void tide_ep_get_stats(const tide_ep *ep, tide_ep_stats *s) { *s = ep->stats; }

/* Round header: layer (-1: in tide_ep_sync), then rows for each rank, then
 * the control block. */
typedef struct {
    int32_t layer, pad;
} round_hdr;


/* Runs the experts of the rows received in one round: grouped by the
 * sender's layer, then by expert (ascending), rows in rank order. */
static void serve(tide_ep *ep, const tide_step *s, const int32_t *src_layer, const int64_t *rc, const char *items,
                  int64_t n_items, float *reply) {
    int64_t D = ep->m->cfg.text.hidden_size, IB = 8 + 4 * D;
    tide_step local = {0};
    if (s) local = *s;
    else {
        local.m = ep->m;
        local.ops = ep->ops;
        local.pool = ep->pool;
    }
    int W = ep->c->world;
    const tide_ops *ops = local.ops;
    int64_t I = 0; /* the widest expert's intermediate size among the layers served */
    for (int l = 0; l < ep->n_layers; l++)
        if (ep->pl[l].n_exp && ep->m->layers[l].ffn.w1[0].out > I) I = ep->m->layers[l].ffn.w1[0].out;
    int32_t *item_layer = malloc((size_t)(n_items + 1) * sizeof(int32_t));
    float *xs = malloc((size_t)(n_items * D + 1) * sizeof(float));
    float *ys = malloc((size_t)(n_items * D + 1) * sizeof(float));
    float *ws = malloc((size_t)(n_items + 1) * sizeof(float));
    int64_t *which = malloc((size_t)(n_items + 1) * sizeof(int64_t));
    /* the experts' operands in the backend's memory (the ops run there) */
    float *bx = ops->alloc(ops, (size_t)(n_items * D + 1) * sizeof(float));
    float *by = ops->alloc(ops, (size_t)(n_items * D + 1) * sizeof(float));
    float *bw = ops->alloc(ops, (size_t)(n_items + 1) * sizeof(float));
    float *bg = ops->alloc(ops, (size_t)(n_items * I + 1) * sizeof(float));
    float *bu = ops->alloc(ops, (size_t)(n_items * I + 1) * sizeof(float));
    if (!item_layer || !xs || !ys || !ws || !which || !bx || !by || !bw || !bg || !bu) abort();
    int64_t t = 0;
    for (int p = 0; p < W; p++)
        for (int64_t j = 0; j < rc[p]; j++) item_layer[t++] = src_layer[p];
    for (int l = 0; l < ep->n_layers; l++) {
        int has = 0;
        for (int64_t i = 0; i < n_items && !has; i++) has = item_layer[i] == l;
        if (!has) continue;
        const tide_ffn_weights *f = &ep->m->layers[l].ffn;
        for (int e = 0; e < f->n_experts; e++) {
            int64_t n = 0;
            for (int64_t i = 0; i < n_items; i++) {
                const char *it = items + i * IB;
                int32_t ie;
                memcpy(&ie, it, 4);
                if (item_layer[i] != l || ie != e) continue;
                memcpy(&ws[n], it + 4, 4);
                memcpy(xs + n * D, it + 8, (size_t)D * 4);
                which[n++] = i;
            }
            if (!n) continue;
            ops->upload(ops, bx, xs, (size_t)(n * D) * sizeof(float));
            ops->upload(ops, bw, ws, (size_t)n * sizeof(float));
            tide_moe_expert(&local, f, e, bx, n, bw, by, bg, bu);
            ops->download(ops, ys, by, (size_t)(n * D) * sizeof(float));
            for (int64_t j = 0; j < n; j++) memcpy(reply + which[j] * D, ys + j * D, (size_t)D * 4);
            ep->served[l] += n;
            ep->stats.rows_served += n;
        }
    }
    free(item_layer);
    free(xs);
    free(ys);
    free(ws);
    free(which);
    ops->release(ops, bx);
    ops->release(ops, by);
    ops->release(ops, bw);
    ops->release(ops, bg);
    ops->release(ops, bu);
}

/* One exchange round (every rank calls it together). layer -1: a sync
 * round (no rows); *busy = whether any rank was in a forward pass, and when
 * none was, all gets the control blocks. y[rows * k][D]: each (row, slot)'s
 * expert output. */
static int ep_round(tide_ep *ep, const tide_step *s, int layer, int64_t rows, int k, const float *x,
                    const int32_t *idx, const float *wt, float *y, const void *ctl, void *all, int *busy,
                    tide_status *st) {
    tide_comm *c = ep->c;
    int W = c->world, me = c->rank;
    int64_t D = ep->m->cfg.text.hidden_size, IB = 8 + 4 * D, CB = ep->o.ctl_bytes;
    if (ep->o.kill_round > 0 && ++ep->stats.rounds == ep->o.kill_round) raise(ep->o.kill_stop ? SIGSTOP : SIGKILL);
    else if (ep->o.kill_round <= 0) ep->stats.rounds++;
    int64_t H = (int64_t)sizeof(round_hdr) + 8 * W + CB;
    int64_t n_pairs = rows * k;
    int32_t *dest = malloc((size_t)(n_pairs + 1) * sizeof(int32_t));
    int64_t *order = malloc((size_t)(n_pairs + 1) * sizeof(int64_t));
    char *hdr = calloc(1, (size_t)H), *hall = malloc((size_t)(H * W));
    int64_t cnt[TIDE_COMM_MAX] = {0}, rc[TIDE_COMM_MAX], sb[TIDE_COMM_MAX], rb[TIDE_COMM_MAX];
    int32_t src_layer[TIDE_COMM_MAX];
    if (!dest || !order || !hdr || !hall) abort();
    const place *p = layer >= 0 ? &ep->pl[layer] : NULL;
    for (int64_t j = 0; j < n_pairs; j++) {
        dest[j] = owner(p, idx[j], j / k, me);
        cnt[dest[j]]++;
        if (dest[j] != me) ep->stats.rows_sent++;
    }
    round_hdr rh = {layer, 0};
    memcpy(hdr, &rh, sizeof rh);
    memcpy(hdr + sizeof rh, cnt, (size_t)W * 8);
    if (CB && ctl) memcpy(hdr + sizeof rh + 8 * W, ctl, (size_t)CB);
    char *send = NULL, *recv = NULL;
    float *reply = NULL, *back = NULL;
    int rcode = tide_comm_allgather(c, hdr, H, hall, st);
    if (rcode != 0) goto done;
    int any = 0;
    int64_t n_in = 0;
    for (int q = 0; q < W; q++) {
        round_hdr qh;
        memcpy(&qh, hall + q * H, sizeof qh);
        src_layer[q] = qh.layer;
        if (qh.layer >= 0) any = 1;
        if (qh.layer >= ep->n_layers || (qh.layer >= 0 && !ep->pl[qh.layer].n_exp)) {
            rcode = tide_fail(st, TIDE_ERR_INTERNAL, "ep: rank %d is in layer %d, which has no experts", q, qh.layer);
            goto done;
        }
        memcpy(&rc[q], hall + q * H + sizeof qh + 8 * me, 8);
        n_in += rc[q];
    }
    if (busy) *busy = any;
    if (!any) {
        if (all && CB)
            for (int q = 0; q < W; q++) memcpy((char *)all + q * CB, hall + q * H + sizeof rh + 8 * W, (size_t)CB);
        goto done;
    }
    /* dispatch: (expert, weight, row) items grouped by destination */
    send = malloc((size_t)(n_pairs * IB + 1));
    recv = malloc((size_t)(n_in * IB + 1));
    if (!send || !recv) abort();
    int64_t t = 0;
    for (int q = 0; q < W; q++)
        for (int64_t j = 0; j < n_pairs; j++) {
            if (dest[j] != q) continue;
            char *it = send + t * IB;
            memcpy(it, &idx[j], 4);
            memcpy(it + 4, &wt[j], 4);
            memcpy(it + 8, x + (j / k) * D, (size_t)D * 4);
            order[t++] = j;
        }
    for (int q = 0; q < W; q++) sb[q] = cnt[q] * IB, rb[q] = rc[q] * IB;
    if ((rcode = tide_comm_alltoallv(c, send, sb, recv, rb, st)) != 0) goto done;
    reply = malloc((size_t)(n_in * D + 1) * sizeof(float));
    back = malloc((size_t)(n_pairs * D + 1) * sizeof(float));
    if (!reply || !back) abort();
    serve(ep, s, src_layer, rc, recv, n_in, reply);
    /* combine: outputs back in the order they were sent */
    for (int q = 0; q < W; q++) sb[q] = rc[q] * 4 * D, rb[q] = cnt[q] * 4 * D;
    if ((rcode = tide_comm_alltoallv(c, reply, sb, back, rb, st)) != 0) goto done;
    for (int64_t j = 0; j < n_pairs; j++) memcpy(y + order[j] * D, back + j * D, (size_t)D * 4);
done:
    if (rcode != 0) ep->failed = 1;
    free(dest);
    free(order);
    free(hdr);
    free(hall);
    free(send);
    free(recv);
    free(reply);
    free(back);
    return rcode;
}

void tide_ep_moe(struct tide_step *s, const struct tide_ffn_weights *f, const float *x, const int32_t *idx,
                 const float *wt, float *acc) {
    tide_ep *ep = s->m->ep;
    if (ep->failed) return;
    int layer = layer_of(s->m, f);
    if (layer < 0 || layer >= ep->n_layers) { /* a DSpark stage's experts: not distributed */
        ep->failed = 1;
        return;
    }
    int64_t rows = s->rows, D = s->m->cfg.text.hidden_size;
    int k = f->top_k;
    for (int64_t j = 0; j < rows * k; j++) ep->load[ep->off[layer] + idx[j]]++;
    /* x and acc live in the backend's memory: the rows travel from the host */
    float *y = malloc((size_t)(rows * k * D + 1) * sizeof(float));
    float *hx = malloc((size_t)(rows * D + 1) * sizeof(float)), *hacc = calloc((size_t)(rows * D + 1), sizeof(float));
    if (!y || !hx || !hacc) abort();
    s->ops->download(s->ops, hx, x, (size_t)(rows * D) * sizeof(float));
    tide_status st = {0};
    if (ep_round(ep, s, layer, rows, k, hx, idx, wt, y, NULL, NULL, NULL, &st) == 0) {
        /* each row: its experts' outputs in ascending expert id, as the
         * single-rank loop adds them */
        for (int64_t r = 0; r < rows; r++) {
            int sl[64];
            for (int i = 0; i < k; i++) {
                int j = i;
                while (j > 0 && idx[r * k + sl[j - 1]] > idx[r * k + i]) {
                    sl[j] = sl[j - 1];
                    j--;
                }
                sl[j] = i;
            }
            for (int i = 0; i < k; i++) {
                const float *ye = y + (r * k + sl[i]) * D;
                for (int64_t d = 0; d < D; d++) hacc[r * D + d] += ye[d];
            }
        }
        /* acc was zeroed: the sums from 0 in that order are scatter_add's */
        s->ops->upload(s->ops, acc, hacc, (size_t)(rows * D) * sizeof(float));
    }
    free(y);
    free(hx);
    free(hacc);
}

/* Collective: sums the window's load counters over the ranks, measures the
 * balance of the window and, with rebalance, installs the new placement. */
static int measure(tide_ep *ep, int rebalance, tide_status *st) {
    int W = ep->c->world, L = ep->n_layers;
    int64_t n = ep->off[L] + L;
    int64_t *mine = malloc((size_t)n * sizeof(int64_t)), *all = malloc((size_t)(n * W) * sizeof(int64_t));
    if (!mine || !all) abort();
    memcpy(mine, ep->load, (size_t)ep->off[L] * sizeof(int64_t));
    memcpy(mine + ep->off[L], ep->served, (size_t)L * sizeof(int64_t));
    int rc = tide_comm_allgather(ep->c, mine, n * 8, all, st);
    if (rc != 0) {
        ep->failed = 1;
        goto done;
    }
    double bal = 0;
    int nb = 0;
    for (int l = 0; l < L; l++) {
        int64_t sum = 0, mx = 0;
        for (int q = 0; q < W; q++) {
            int64_t v = all[q * n + ep->off[L] + l];
            sum += v;
            if (v > mx) mx = v;
        }
        if (mx > 0) bal += (double)sum / W / (double)mx, nb++;
    }
    if (nb) ep->stats.balancedness = bal / nb;
    for (int64_t i = 0; i < ep->off[L]; i++) {
        int64_t v = 0;
        for (int q = 0; q < W; q++) v += all[q * n + i];
        mine[i] = v;
    }
    if (rebalance) {
        for (int l = 0; l < L && rc == 0; l++)
            if (ep->pl[l].n_exp) rc = place_build(&ep->pl[l], ep->pl[l].n_exp, ep->o.redundant, W, mine + ep->off[l], st);
        ep->stats.rebalances++;
    }
    memset(ep->load, 0, (size_t)ep->off[L] * sizeof(int64_t));
    memset(ep->served, 0, (size_t)L * sizeof(int64_t));
done:
    free(mine);
    free(all);
    return rc;
}

int tide_ep_sync(tide_ep *ep, const void *mine, void *all, tide_status *st) {
    if (ep->failed) return tide_fail(st, TIDE_ERR_IO, "ep: a rank was lost (%s)", ep->c->why);
    int busy = 1;
    while (busy)
        if (ep_round(ep, NULL, -1, 0, 0, NULL, NULL, NULL, NULL, mine, all, &busy, st) != 0) return -1;
    ep->n_sync++;
    if (ep->o.window > 0 && ep->n_sync % ep->o.window == 0) return measure(ep, 1, st);
    return 0;
}

int tide_ep_measure(tide_ep *ep, tide_status *st) { return measure(ep, 0, st); }

/* Reads the weights of an expert a rank did not hold: the checkpoint's
 * pages (mmap) are asked for and touched, so the first step after the
 * recovery does not stall on them one by one. */
static int64_t reload(const tide_weight *w) {
    if (!w->data) return 0;
    int64_t bytes = w->type == TIDE_W_FP4 ? w->out * w->in / 2 : w->type == TIDE_W_FP8 ? w->out * w->in
                                                            : w->type == TIDE_W_BF16 ? 2 * w->out * w->in
                                                                                     : 4 * w->out * w->in;
    volatile const uint8_t *b = w->data;
    uint8_t sum = 0;
    for (int64_t i = 0; i < bytes; i += 4096) sum ^= b[i];
    (void)sum;
    return bytes;
}

static int holds(const place *p, int e, int rank) {
    for (int i = 0; i < p->cnt[e]; i++)
        if (p->holders[e * p->maxcnt + i] == rank) return 1;
    return 0;
}

int tide_ep_recover(tide_ep *ep, tide_status *st) {
    tide_comm *c = ep->c;
    int old_me = c->rank;
    if (tide_comm_shrink(c, st) != 0) return -1;
    ep->failed = 0;
    uint8_t *had = calloc((size_t)ep->off[ep->n_layers] + 1, 1);
    if (!had) abort();
    for (int l = 0; l < ep->n_layers; l++)
        for (int e = 0; e < ep->pl[l].n_exp; e++) had[ep->off[l] + e] = (uint8_t)holds(&ep->pl[l], e, old_me);
    /* the survivors' counters, summed: every survivor places alike */
    if (measure(ep, 1, st) != 0) {
        free(had);
        return -1;
    }
    for (int l = 0; l < ep->n_layers; l++) {
        const tide_ffn_weights *f = &ep->m->layers[l].ffn;
        for (int e = 0; e < ep->pl[l].n_exp; e++)
            if (!had[ep->off[l] + e] && holds(&ep->pl[l], e, c->rank))
                ep->stats.bytes_reloaded += reload(&f->w1[e]) + reload(&f->w2[e]) + reload(&f->w3[e]);
    }
    free(had);
    ep->stats.rebalances--; /* counted as the recovery */
    ep->stats.recoveries++;
    return 0;
}
