/* Summary statistics (stats.h). */
#include "bench/stats.h"

#include <math.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void tide_stats_sort(double *v, int64_t n) {
    if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_double);
}

double tide_stats_percentile(const double *sorted, int64_t n, double p) {
    if (n <= 0) return NAN;
    if (p <= 0) return sorted[0];
    if (p >= 100) return sorted[n - 1];
    double rank = p / 100.0 * (double)(n - 1);
    int64_t lo = (int64_t)floor(rank);
    if (lo >= n - 1) return sorted[n - 1];
    double f = rank - (double)lo;
    return sorted[lo] + f * (sorted[lo + 1] - sorted[lo]);
}

double tide_stats_mean(const double *v, int64_t n) {
    if (n <= 0) return NAN;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += v[i];
    return s / (double)n;
}
