/* Expert parallelism: the routed experts of every MoE layer spread over the
 * ranks of a communicator, attention data-parallel (each rank runs its own
 * sequences through its own engine).
 *
 * A rank's MoE sub-layer (model/moe.c) routes its rows as usual, then hands
 * the routed part to tide_ep_moe: one exchange round, in which
 *   1. every rank publishes a header (its layer, rows for each rank),
 *   2. rows travel to the rank holding their expert (all-to-all),
 *   3. each rank runs its experts over the rows it received, grouped by
 *      (layer, expert) in rank order,
 *   4. outputs travel back (all-to-all) and each row sums its experts'
 *      outputs in ascending expert id, in f32: the order of the single-rank
 *      loop, so the result is bit-identical to EP 1 (the experts' ops are
 *      row-independent).
 * Every rank must take part in every round, also one with no rows in the
 * step: between engine steps each rank calls tide_ep_sync, which joins the
 * rounds of ranks still in a forward pass (serving their rows) until every
 * rank is in tide_ep_sync, and carries a small control block of each rank
 * to all (the driver's request bookkeeping).
 *
 * Placement: physical expert slots over ranks (EPLB, eplb.h); per-expert
 * load counters over a window of steps; every `window` syncs the ranks sum
 * their counters and all switch to the new placement at the same point.
 * The weights are the checkpoint's mmap: a rank reads an expert's pages
 * when it first runs it, so a placement change moves no data explicitly
 * (on GPUs it would copy weights in the background: docs/ep.md).
 *
 * Failure: a round or sync that fails (a rank died or hung: dist/comm.h)
 * marks the EP state failed; the forward pass in progress finishes with
 * garbage that the driver drops; tide_ep_recover shrinks the communicator
 * to the survivors and rebuilds the placement for them, reading the newly
 * held experts from the checkpoint. */
#ifndef TIDE_DIST_EP_H
#define TIDE_DIST_EP_H

#include <stdint.h>

#include "dist/comm.h"
#include "model/model.h"

typedef struct tide_ep tide_ep;

typedef struct tide_ep_opts {
    int redundant;      /* extra physical slots per layer (rounded up to fill every rank) */
    int64_t window;     /* syncs between rebalances; 0 = the placement stays */
    int n_threads;      /* threads of the pool that serves rows between steps */
    int64_t ctl_bytes;  /* size of the control block of tide_ep_sync */
    int64_t kill_round; /* tests: this rank SIGKILLs itself at that exchange round (0 = never) */
    int kill_stop;      /* tests: SIGSTOP instead (a hung rank) */
} tide_ep_opts;

int tide_ep_create(tide_comm *c, const tide_model *m, const tide_ep_opts *o, tide_ep **out, tide_status *st);
void tide_ep_free(tide_ep *ep);

struct tide_step;
struct tide_ffn_weights;
/* The routed part of a MoE sub-layer (called by model/moe.c): idx / wt the
 * rows' top-k experts and weights; adds the experts' outputs into acc
 * [rows][dim]. On a communication failure it leaves acc as is and marks
 * the state failed. */
void tide_ep_moe(struct tide_step *s, const struct tide_ffn_weights *f, const float *x, const int32_t *idx,
                 const float *wt, float *acc);

/* Between steps: serves other ranks' rounds until every rank is here, and
 * gathers each rank's control block (ctl_bytes) into all[world][ctl_bytes]
 * (current rank order). A rebalance may follow. Fails on a lost rank. */
int tide_ep_sync(tide_ep *ep, const void *mine, void *all, tide_status *st);
int tide_ep_failed(const tide_ep *ep);
/* Collective: the ranks' load counters of the window summed, the window's
 * balancedness measured (stats), the counters reset. */
int tide_ep_measure(tide_ep *ep, tide_status *st);
/* After a failure: survivors agree, renumber, re-place the experts. */
int tide_ep_recover(tide_ep *ep, tide_status *st);
tide_comm *tide_ep_comm(tide_ep *ep);

typedef struct tide_ep_stats {
    int64_t rounds;          /* exchange rounds taken part in */
    int64_t rows_sent;       /* (row, expert) pairs sent to another rank */
    int64_t rows_served;     /* pairs this rank's experts computed */
    int64_t rebalances;
    int64_t recoveries;
    int64_t bytes_reloaded;  /* expert weight bytes read after recoveries */
    /* mean / max of the ranks' routed pairs per layer, averaged over layers,
     * over the last window (the current placement's balance) */
    double balancedness;
} tide_ep_stats;
void tide_ep_get_stats(const tide_ep *ep, tide_ep_stats *s);

#endif
