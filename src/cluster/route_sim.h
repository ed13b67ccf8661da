/* Trace replay through the placer in simulation (`tide bench route`,
 * docs/route.md section 6): a disaggregated pool of P prefill and D decode
 * replicas, each with a cost model, fed a trace's requests at their times.
 *
 * Prefill replica: one FIFO queue; a request costs prefill_overhead_s +
 * prefill_s_per_token x (its prompt tokens not in the replica's prefix
 * cache); the cache is an exact LRU of `cache_blocks` hash units, and a
 * hit is the longest run of the request's units from the first that the
 * cache holds. Decode replica: a request joining at time t runs
 * out_len steps of decode_step_s + decode_s_per_seq x (requests running
 * at t, itself included) + decode_s_per_ctx_token x (their context
 * tokens); that step time is its TPOT and what it adds to the replica
 * (later arrivals do not slow it down in the model).
 *
 * Balancedness (per pool): the trace is cut into windows of window_s; in
 * each, every replica's work (the cost of the requests it took that
 * started in the window) gives mean / max; the ideal offline assignment
 * is the longest-processing-time-first schedule of the same requests'
 * work over the same replicas (within 4/3 of the optimum). Reported: the
 * work-weighted mean over windows of both, and their ratio. */
#ifndef TIDE_CLUSTER_ROUTE_SIM_H
#define TIDE_CLUSTER_ROUTE_SIM_H

#include <stdint.h>

#include "base/status.h"
#include "cluster/route.h"
#include "cluster/route_trace.h"

typedef struct tide_sim_config {
    int n_prefill, n_decode;
    tide_route_policy policy;
    double prefill_s_per_token, prefill_overhead_s;
    double decode_step_s, decode_s_per_seq, decode_s_per_ctx_token;
    int64_t cache_blocks; /* per prefill replica */
    double window_s;
} tide_sim_config;

tide_sim_config tide_sim_config_default(void);

typedef struct tide_sim_result {
    int64_t requests;
    int64_t prompt_tokens, hit_tokens; /* hit rate = hit / prompt */
    double bal_prefill, ideal_prefill; /* mean / max, work-weighted over windows */
    double bal_decode, ideal_decode;
    double bound_prefill, bound_decode; /* no assignment beats mean / max(mean, largest job) */
    double ttft[3], tpot[3];           /* p50, p90, p99 (seconds) */
    double makespan_s;
} tide_sim_result;

int tide_sim_run(const tide_trace *t, const tide_sim_config *c, tide_sim_result *out, tide_status *st);

#endif
