/* EPLB's hierarchical placement (eplb.h says what and where it comes from). */
#include <stdlib.h>
#include <string.h>

#include "dist/eplb.h"

void tide_eplb_pack(const double *w, int n, int n_packs, int *pack, int *slot) {
    int per = n / n_packs;
    if (per == 1) {
        for (int i = 0; i < n; i++) pack[i] = i, slot[i] = 0;
        return;
    }
    int *order = malloc((size_t)n * sizeof(int));
    double *pw = calloc((size_t)n_packs, sizeof(double));
    int *pn = calloc((size_t)n_packs, sizeof(int));
    if (!order || !pw || !pn) abort();
    /* heaviest first, ties by the lower index (insertion sort: n is small) */
    for (int i = 0; i < n; i++) {
        int j = i;
        while (j > 0 && w[order[j - 1]] < w[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    for (int t = 0; t < n; t++) {
        int it = order[t], best = -1;
        for (int p = 0; p < n_packs; p++)
            if (pn[p] < per && (best < 0 || pw[p] < pw[best])) best = p;
        pack[it] = best;
        slot[it] = pn[best]++;
        pw[best] += w[it];
    }
    free(order);
    free(pw);
    free(pn);
}

/* Step 2: n_log experts onto n_phy slots, extra slots to the largest load
 * per copy. */
static void replicate(const double *w, int n_log, int n_phy, int *phy2log, int *rep, int *cnt) {
    for (int i = 0; i < n_log; i++) phy2log[i] = i, rep[i] = 0, cnt[i] = 1;
    for (int i = n_log; i < n_phy; i++) {
        int best = 0;
        for (int e = 1; e < n_log; e++)
            if (w[e] / cnt[e] > w[best] / cnt[best]) best = e;
        phy2log[i] = best;
        rep[i] = cnt[best]++;
    }
}

int tide_eplb_place(const double *load, int n_log, int n_phy, int n_groups, int n_nodes, int n_ranks,
                    int *phy2log, int *replica, int *logcnt, tide_status *st) {
    if (n_log < 1 || n_ranks < 1 || n_nodes < 1 || n_groups < 1 || n_phy < n_log || n_phy % n_ranks ||
        n_ranks % n_nodes || n_log % n_groups)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "eplb: %d experts in %d groups onto %d slots over %d ranks on %d nodes do not divide",
                         n_log, n_groups, n_phy, n_ranks, n_nodes);
    for (int e = 0; e < n_log; e++)
        if (!(load[e] >= 0)) return tide_fail(st, TIDE_ERR_INVALID, "eplb: expert %d has load %g", e, load[e]);
    if (n_groups % n_nodes) n_groups = 1, n_nodes = 1; /* the global policy */
    int gsize = n_log / n_groups, g_per_node = n_groups / n_nodes;
    int log_per_node = n_log / n_nodes, phy_per_node = n_phy / n_nodes;
    int ranks_per_node = n_ranks / n_nodes, phy_per_rank = n_phy / n_ranks;
    if (n_phy % n_nodes || phy_per_node < log_per_node)
        return tide_fail(st, TIDE_ERR_INVALID, "eplb: %d slots cannot hold %d experts on each of %d nodes", n_phy,
                         log_per_node, n_nodes);
    size_t big = (size_t)(n_log > n_phy ? n_log : n_phy);
    double *gw = calloc((size_t)n_groups, sizeof(double));
    double *w = malloc(big * sizeof(double));
    int *gpack = malloc((size_t)n_groups * sizeof(int)), *gslot = malloc((size_t)n_groups * sizeof(int));
    int *log2m = malloc(big * sizeof(int)), *m2log = malloc(big * sizeof(int));
    int *p2m = malloc(big * sizeof(int)), *prep = malloc(big * sizeof(int)), *mcnt = malloc(big * sizeof(int));
    int *pk = malloc(big * sizeof(int)), *sl = malloc(big * sizeof(int)), *inv = malloc(big * sizeof(int));
    if (!gw || !w || !gpack || !gslot || !log2m || !m2log || !p2m || !prep || !mcnt || !pk || !sl || !inv) abort();

    /* 1. groups onto nodes; experts renumbered node by node ("m" ids) */
    for (int e = 0; e < n_log; e++) gw[e / gsize] += load[e];
    tide_eplb_pack(gw, n_groups, n_nodes, gpack, gslot);
    for (int e = 0; e < n_log; e++) {
        int g = e / gsize;
        log2m[e] = (gpack[g] * g_per_node + gslot[g]) * gsize + e % gsize;
        m2log[log2m[e]] = e;
    }
    for (int nd = 0; nd < n_nodes; nd++) {
        const int *nm2log = m2log + nd * log_per_node;
        for (int j = 0; j < log_per_node; j++) w[j] = load[nm2log[j]];
        /* 2. copies within the node */
        int *np2m = p2m + nd * phy_per_node, *nrep = prep + nd * phy_per_node, *ncnt = mcnt + nd * log_per_node;
        replicate(w, log_per_node, phy_per_node, np2m, nrep, ncnt);
        /* 3. the node's physical experts onto its ranks */
        double *pw = malloc((size_t)phy_per_node * sizeof(double));
        if (!pw) abort();
        for (int k = 0; k < phy_per_node; k++) pw[k] = w[np2m[k]] / ncnt[np2m[k]];
        tide_eplb_pack(pw, phy_per_node, ranks_per_node, pk, sl);
        free(pw);
        for (int k = 0; k < phy_per_node; k++) inv[pk[k] * phy_per_rank + sl[k]] = k;
        for (int q = 0; q < phy_per_node; q++) {
            int k = inv[q];
            phy2log[nd * phy_per_node + q] = nm2log[np2m[k]];
            replica[nd * phy_per_node + q] = nrep[k];
        }
        for (int j = 0; j < log_per_node; j++) logcnt[nm2log[j]] = ncnt[j];
    }
    free(gw);
    free(w);
    free(gpack);
    free(gslot);
    free(log2m);
    free(m2log);
    free(p2m);
    free(prep);
    free(mcnt);
    free(pk);
    free(sl);
    free(inv);
    return 0;
}

double tide_eplb_balancedness(const double *load, int n_log, const int *phy2log, const int *logcnt, int n_phy,
                              int n_ranks) {
    (void)n_log;
    int per = n_phy / n_ranks;
    double sum = 0, mx = 0;
    for (int r = 0; r < n_ranks; r++) {
        double l = 0;
        for (int q = r * per; q < (r + 1) * per; q++) l += load[phy2log[q]] / logcnt[phy2log[q]];
        sum += l;
        if (l > mx) mx = l;
    }
    return mx > 0 ? sum / n_ranks / mx : 1.0;
}
