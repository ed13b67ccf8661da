/* EPLB: where each MoE layer's experts live over the ranks, with redundant
 * copies of hot experts, from per-expert load counts.
 *
 * The placement is DeepSeek's hierarchical balancing policy as published in
 * github.com/deepseek-ai/EPLB (eplb.py, rebalance_experts_hierarchical),
 * written here from its description, for one layer at a time:
 *   1. expert groups are packed onto nodes, groups_per_node each, heaviest
 *      group first onto the lightest node that has room (balanced packing);
 *   2. within each node, the node's physical slots beyond one per expert go
 *      one by one to the expert with the largest load per copy;
 *   3. each node's physical experts (load = expert load / copies) are packed
 *      onto its ranks the same way, slots_per_rank each.
 * When the groups do not divide over the nodes, the global policy: one
 * group, one node. Ties go to the lower index everywhere (deterministic:
 * every rank computes the same placement from the same counts).
 *
 * Physical slot p lives on rank p / (n_phy / n_ranks). */
#ifndef TIDE_DIST_EPLB_H
#define TIDE_DIST_EPLB_H

#include <stdint.h>

#include "base/status.h"

/* load[n_log] >= 0. Fills phy2log[n_phy] (the expert of each slot),
 * replica[n_phy] (which copy of it), logcnt[n_log] (copies of each).
 * Needs n_phy >= n_log, n_phy % n_ranks == 0, n_ranks % n_nodes == 0,
 * n_log % n_groups == 0 and, for the hierarchical policy, room for every
 * expert of a node on its ranks. */
int tide_eplb_place(const double *load, int n_log, int n_phy, int n_groups, int n_nodes, int n_ranks,
                    int *phy2log, int *replica, int *logcnt, tide_status *st);

/* Balancedness of a placement: mean over max of the ranks' loads, where a
 * rank's load is the sum over its slots of load[expert] / copies (the
 * traffic split evenly over copies). 1 = perfectly balanced. */
double tide_eplb_balancedness(const double *load, int n_log, const int *phy2log, const int *logcnt, int n_phy,
                              int n_ranks);

/* Greedy balanced packing (step 1 and 3): n items of weight w into n_packs
 * packs of n / n_packs items each. pack[i], slot[i] = the item's pack and
 * its position in it. Exposed for tests. */
void tide_eplb_pack(const double *w, int n, int n_packs, int *pack, int *slot);

#endif
