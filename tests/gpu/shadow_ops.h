/* A diagnostic ops table for the GPU tests: every op runs on a primary
 * table (the CUDA one) AND on a reference table (the CPU one) over copies
 * of the same inputs, the outputs are compared bit for bit, and the
 * primary's outputs are what the caller sees. The first mismatches of each
 * op are printed with their shapes and the first differing element, so a
 * whole-model difference (gpu_test_model) is traced to the op and the input
 * that caused it. Switched on in gpu_test_model by TIDE_GPU_SHADOW=1.
 *
 * Thread-safe: the forward pass calls index_scores / topk_sorted from
 * several pool threads; counters and printing are under a mutex. */
#ifndef TIDE_TESTS_GPU_SHADOW_OPS_H
#define TIDE_TESTS_GPU_SHADOW_OPS_H

#include <stdint.h>

#include "backend/ops.h"

typedef struct shadow_ops shadow_ops;

/* A table whose ops run on primary and compare with ref. NULL on OOM. */
shadow_ops *shadow_ops_create(const tide_ops *primary, const tide_ops *ref, const char *label);
const tide_ops *shadow_ops_table(shadow_ops *s);
/* Calls that differed, over all ops (and printed a summary per op). */
int64_t shadow_ops_report(const shadow_ops *s);
void shadow_ops_destroy(shadow_ops *s);

#endif
