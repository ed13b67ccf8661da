/* backend.h: --backend cpu|cuda and --kernels exact|fast. */
#include "cli/backend.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifdef TIDE_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#include "base/log.h"

/* Loading progress on stderr: a line redrawn in place on a terminal, else
 * one line at the end (logs stay short). */
static void load_progress(void *user, uint64_t done, uint64_t total, double secs) {
    (void)user;
    double gb = 1e9, rate = secs > 0 ? (double)done / secs : 0;
    int tty = isatty(2);
    if (done < total) {
        if (!tty) return;
        double eta = rate > 0 ? (double)(total - done) / rate : 0;
        fprintf(stderr, "\rtide: weights to the GPU: %.2f / %.2f GB (%3.0f %%), %.2f GB/s, ETA %.0f s   ",
                (double)done / gb, (double)total / gb, 100.0 * (double)done / (double)(total ? total : 1),
                rate / gb, eta);
        return;
    }
    fprintf(stderr, "%stide: weights on the GPU: %.3f GB in %.2f s (%.2f GB/s)\n", tty ? "\r" : "",
            (double)total / gb, secs, rate / gb);
}
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
    tide_cuda_ops_set_progress(cx, load_progress, NULL);
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
    if (b->cx) {
        tide_cuda_ops_stats s;
        tide_cuda_ops_get_stats(b->cx, &s);
        tide_log(TIDE_LOG_INFO,
                 "cuda ops: %llu weight bytes bound at load, %llu weight uploads after it (%llu model arrays "
                 "uploaded on first use); %llu kernel launches, %llu bytes up, %llu bytes down, %llu bytes of "
                 "device-resident activations",
                 (unsigned long long)s.weights_bound, (unsigned long long)s.weight_uploads,
                 (unsigned long long)s.derived_uploads,
                 (unsigned long long)s.kernel_launches, (unsigned long long)s.bytes_uploaded,
                 (unsigned long long)s.bytes_downloaded, (unsigned long long)s.resident_bytes);
    }
    tide_cuda_ops_destroy(b->cx);
#endif
    b->cx = NULL;
}

const char *tide_cli_backend_help(void) {
    return "  --backend cpu|cuda  where the forward pass runs (default cpu). cuda: the checkpoint's\n"
           "                      weights are loaded onto the GPU at start (with progress; a model\n"
           "                      that does not fit is refused before anything is allocated), every\n"
           "                      op runs on the GPU's kernels; the activations stay on the GPU\n"
           "                      through the embedding, hyper-connections, norms, MoE and head, and\n"
           "                      cross to the host once per layer for attention (its caches are\n"
           "                      still host structures: docs/gpu.md)\n"
           "  --kernels exact|fast  with --backend cuda: exact (default) is bit-identical to the CPU;\n"
           "                      fast uses the tensor-core GEMMs (one bf16 step off on a few outputs\n"
           "                      in a million)\n";
}
