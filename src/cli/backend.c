/* backend.h: --backend cpu|cuda and --kernels exact|fast. */
#include "cli/backend.h"

#include <string.h>

#ifdef TIDE_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif

int tide_cli_backend_parse(tide_cli_backend *b, const char *name, const char *kernels, tide_status *st) {
    memset(b, 0, sizeof *b);
    if (!name || !strcmp(name, "cpu")) b->cuda = 0;
    else if (!strcmp(name, "cuda")) b->cuda = 1;
    else return tide_fail(st, TIDE_ERR_INVALID, "--backend %s: expected cpu or cuda", name);
    if (!kernels || !strcmp(kernels, "exact")) b->fast = 0;
    else if (!strcmp(kernels, "fast")) b->fast = 1;
    else return tide_fail(st, TIDE_ERR_INVALID, "--kernels %s: expected exact or fast", kernels);
    if (kernels && !b->cuda) return tide_fail(st, TIDE_ERR_INVALID, "--kernels applies to --backend cuda only");
    return 0;
}

int tide_cli_backend_open(tide_cli_backend *b, tide_engine_config *c, tide_status *st) {
    c->ops = NULL;
    if (!b->cuda) return 0;
#ifdef TIDE_HAVE_CUDA
    tide_cuda_ops_ctx *cx;
    tide_status why = {0};
    if (tide_cuda_ops_create(&cx, &why) != 0)
        return tide_fail(st, why.code, "--backend cuda: %s (--backend cpu runs anywhere)", why.msg);
    tide_cuda_ops_set_kernels(cx, b->fast ? TIDE_CUDA_KERNELS_FAST : TIDE_CUDA_KERNELS_EXACT);
    b->cx = cx;
    c->ops = tide_cuda_ops_table(cx);
    return 0;
#else
    return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                     "--backend cuda: this tide was built without the CUDA backend (nvcc was not found when it was "
                     "configured; docs/building.md); --backend cpu runs anywhere");
#endif
}

int tide_cli_backend_check(const tide_cli_backend *b, tide_status *st) {
#ifdef TIDE_HAVE_CUDA
    if (b->cx && tide_cuda_ops_error(b->cx, st) != 0) return tide_fail_ctx(st, "--backend cuda");
#else
    (void)b;
    (void)st;
#endif
    return 0;
}

void tide_cli_backend_close(tide_cli_backend *b) {
#ifdef TIDE_HAVE_CUDA
    tide_cuda_ops_destroy(b->cx);
#endif
    b->cx = NULL;
}

const char *tide_cli_backend_help(void) {
    return "  --backend cpu|cuda  where the forward pass runs (default cpu). cuda: every op on the GPU's\n"
           "                      kernels, activations staged through the host at each op (the\n"
           "                      correctness path; the device-resident forward is later work)\n"
           "  --kernels exact|fast  with --backend cuda: exact (default) is bit-identical to the CPU;\n"
           "                      fast uses the tensor-core GEMMs (one bf16 step off on a few outputs\n"
           "                      in a million)\n";
}
