/* The --backend option of the commands that run the model (tide run, and
 * the engine modes of tide bench / tide serve): a name turned into the ops
 * table the engine runs on (tide_engine_config.ops).
 *
 *   cpu   the CPU ops (the reference numerics; the default)
 *   cuda  the CUDA ops table (src/backend/cuda/cuda_ops.h): every op of the
 *         forward pass on the GPU's kernels, in the exact kernel mode by
 *         default (bit-identical to the CPU) or the fast one; the forward's
 *         activations stay on the device except the attention sub-layer,
 *         which still runs on host arrays (docs/gpu.md).
 *
 * A tide built without the CUDA backend, or a machine without a GPU, gets
 * an error that says which. */
#ifndef TIDE_CLI_BACKEND_H
#define TIDE_CLI_BACKEND_H

#include "base/status.h"
#include "tide.h"

typedef struct tide_cli_backend {
    int cuda;
    int fast;  /* cuda: the fast kernel mode */
    void *cx;  /* cuda: the tide_cuda_ops_ctx */
} tide_cli_backend;

/* "cpu" or "cuda" (NULL: cpu), and the kernel mode "exact" or "fast" (NULL:
 * exact). Checks the names only. */
int tide_cli_backend_parse(tide_cli_backend *b, const char *name, const char *kernels, tide_status *st);
/* Opens the backend and points c->ops at its table (the CPU leaves it NULL). */
int tide_cli_backend_open(tide_cli_backend *b, tide_engine_config *c, tide_status *st);
/* 0 while the backend has seen no device error; else -1 with the first one. */
int tide_cli_backend_check(const tide_cli_backend *b, tide_status *st);
/* After the engine is destroyed. Safe on a backend never opened. */
void tide_cli_backend_close(tide_cli_backend *b);
/* One --help paragraph for the two options. */
const char *tide_cli_backend_help(void);

#endif
