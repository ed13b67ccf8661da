/* The machine's ceilings, measured at the start of a benchmark so that the
 * roofline (roofline.h) is drawn for the machine it runs on rather than
 * from a data sheet:
 *   - copy bandwidth: a large memcpy split over the pool's threads, counted
 *     as bytes read + bytes written per second (best of a few runs);
 *   - GEMM rate: the backend's linear() on an FP8 weight of the given shape
 *     over `rows` activation rows, 2 * rows * out * in FLOPs per call (best
 *     of a few runs after a warm-up).
 * Both are best-of measurements: ceilings, not typical speeds. */
#ifndef TIDE_BENCH_CEILINGS_H
#define TIDE_BENCH_CEILINGS_H

#include <stdint.h>

#include "backend/ops.h"
#include "base/status.h"
#include "base/threadpool.h"

typedef struct tide_ceilings {
    double copy_bytes_per_s;
    int64_t copy_bytes;       /* the buffer copied */
    double gemm_flops_per_s;
    int64_t gemm_out, gemm_in, gemm_rows;
} tide_ceilings;

/* copy_bytes: buffer size (>= 1 MiB); out, in (multiples of 32), rows: the
 * GEMM. pool may be NULL (one thread). */
int tide_measure_ceilings(const tide_ops *ops, tide_pool *pool, int64_t copy_bytes, int64_t out, int64_t in,
                          int64_t rows, tide_ceilings *c, tide_status *st);

#endif
