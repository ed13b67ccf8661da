/* The NCCL communicator (built only with the CUDA backend and NCCL found:
 * CMakeLists.txt adds this file to libtide_cuda and defines TIDE_HAVE_NCCL).
 *
 * The row exchanges (alltoallv, on device buffers) are grouped ncclSend /
 * ncclRecv pairs on a stream of its own; everything small (allgather of
 * control data, the barrier, agreeing on sizes) goes through the CPU
 * communicator it was bootstrapped from, which also carries the failure
 * signal: a lost peer closes its sockets there. NCCL's own errors are polled
 * with ncclCommGetAsyncError while waiting, and a wait longer than the
 * boot communicator's timeout aborts the communicator (ncclCommAbort), as a
 * hung collective never returns otherwise. The launcher sets
 * NCCL_NVLS_ENABLE=0 (NVLink multicast off) before the ranks start.
 *
 * Not run yet: no machine with several GPUs was lent (docs/ep.md). */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm.h"

typedef struct {
    ncclComm_t nc;
    cudaStream_t stream;
    tide_comm *boot;
} nccl_impl;

static int nccl_fail(tide_comm *c, tide_status *st, const char *what, ncclResult_t r) {
    c->failed = 1;
    snprintf(c->why, sizeof c->why, "%s: %s", what, ncclGetErrorString(r));
    return tide_fail(st, TIDE_ERR_IO, "nccl: %s", c->why);
}

/* Waits for the stream, polling NCCL's asynchronous error. */
static int nccl_wait(tide_comm *c, tide_status *st) {
    nccl_impl *n = c->impl;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        cudaError_t e = cudaStreamQuery(n->stream);
        if (e == cudaSuccess) return 0;
        if (e != cudaErrorNotReady) {
            c->failed = 1;
            snprintf(c->why, sizeof c->why, "cuda: %s", cudaGetErrorString(e));
            return tide_fail(st, TIDE_ERR_IO, "nccl: %s", c->why);
        }
        ncclResult_t ar;
        if (ncclCommGetAsyncError(n->nc, &ar) == ncclSuccess && ar != ncclSuccess && ar != ncclInProgress) {
            ncclCommAbort(n->nc);
            n->nc = NULL;
            return nccl_fail(c, st, "async error", ar);
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > 60000) {
            ncclCommAbort(n->nc);
            n->nc = NULL;
            c->failed = 1;
            snprintf(c->why, sizeof c->why, "collective timed out");
            return tide_fail(st, TIDE_ERR_IO, "nccl: %s", c->why);
        }
    }
}

static int nccl_alltoallv(tide_comm *c, const void *send, const int64_t *sbytes, void *recv, const int64_t *rbytes,
                          tide_status *st) {
    nccl_impl *n = c->impl;
    if (c->failed || n->boot->failed) return tide_fail(st, TIDE_ERR_IO, "nccl: failed earlier (%s)", c->why);
    int64_t so = 0, ro = 0;
    ncclResult_t r = ncclGroupStart();
    for (int q = 0; q < c->world && r == ncclSuccess; q++) {
        if (sbytes[q]) r = ncclSend((const char *)send + so, (size_t)sbytes[q], ncclChar, q, n->nc, n->stream);
        if (r == ncclSuccess && rbytes[q])
            r = ncclRecv((char *)recv + ro, (size_t)rbytes[q], ncclChar, q, n->nc, n->stream);
        so += sbytes[q];
        ro += rbytes[q];
    }
    ncclResult_t g = ncclGroupEnd();
    if (r != ncclSuccess) return nccl_fail(c, st, "send/recv", r);
    if (g != ncclSuccess) return nccl_fail(c, st, "group", g);
    return nccl_wait(c, st);
}

static int nccl_allgather(tide_comm *c, const void *mine, int64_t bytes, void *all, tide_status *st) {
    nccl_impl *n = c->impl;
    int rc = tide_comm_allgather(n->boot, mine, bytes, all, st);
    if (rc != 0) {
        c->failed = 1;
        snprintf(c->why, sizeof c->why, "%s", n->boot->why);
    }
    return rc;
}

static void nccl_free(tide_comm *c) {
    nccl_impl *n = c->impl;
    if (n->nc) ncclCommDestroy(n->nc);
    cudaStreamDestroy(n->stream);
    free(n);
    free(c);
}

/* No shrink: after a failure the NCCL communicator is aborted and the
 * survivors shrink boot, then create a new one over it. */
static const tide_comm_ops nccl_ops = {"nccl", nccl_alltoallv, nccl_allgather, NULL, nccl_free};

int tide_comm_nccl_create(tide_comm *boot, int device, tide_comm **out, tide_status *st) {
    *out = NULL;
    if (cudaSetDevice(device) != cudaSuccess) return tide_fail(st, TIDE_ERR_IO, "nccl: no CUDA device %d", device);
    ncclUniqueId id, *all = malloc((size_t)boot->world * sizeof id);
    if (!all) return tide_fail(st, TIDE_ERR_NOMEM, "nccl: out of memory");
    if (boot->rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) memset(&id, 0, sizeof id);
    if (tide_comm_allgather(boot, &id, sizeof id, all, st) != 0) {
        free(all);
        return -1;
    }
    id = all[0];
    free(all);
    tide_comm *c = calloc(1, sizeof *c);
    nccl_impl *n = calloc(1, sizeof *n);
    if (!c || !n) {
        free(c);
        free(n);
        return tide_fail(st, TIDE_ERR_NOMEM, "nccl: out of memory");
    }
    n->boot = boot;
    if (cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking) != cudaSuccess) {
        free(c);
        free(n);
        return tide_fail(st, TIDE_ERR_IO, "nccl: cannot create a stream");
    }
    ncclResult_t r = ncclCommInitRank(&n->nc, boot->world, id, boot->rank);
    if (r != ncclSuccess) {
        cudaStreamDestroy(n->stream);
        free(c);
        free(n);
        return tide_fail(st, TIDE_ERR_IO, "nccl: init: %s", ncclGetErrorString(r));
    }
    c->ops = &nccl_ops;
    c->rank = boot->rank;
    c->world = boot->world;
    memcpy(c->orig, boot->orig, sizeof c->orig);
    c->impl = n;
    *out = c;
    return 0;
}
