/* Summary statistics of benchmark samples (latencies, step times). */
#ifndef TIDE_BENCH_STATS_H
#define TIDE_BENCH_STATS_H

#include <stdint.h>

/* Sorts v ascending in place. */
void tide_stats_sort(double *v, int64_t n);
/* The p-th percentile (0 <= p <= 100) of sorted v, interpolating linearly
 * between the closest ranks (numpy's default): rank p/100 * (n-1). NAN for
 * n = 0. */
double tide_stats_percentile(const double *sorted, int64_t n, double p);
/* Arithmetic mean; NAN for n = 0. */
double tide_stats_mean(const double *v, int64_t n);

#endif
