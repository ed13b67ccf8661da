/* The communication layer of expert parallelism: one interface, one process
 * per rank, two implementations.
 *
 *   - comm_sock.c: the CPU communicator, a full mesh of AF_UNIX stream
 *     sockets between the rank processes (made by the launcher before it
 *     forks them). It runs the tests in CI and `tide run --ep N` on a machine
 *     without GPUs, and it is the one that survives a lost rank (shrink).
 *   - comm_nccl.c: NCCL (built only with TIDE_CUDA=ON and NCCL found):
 *     the row exchanges on device buffers; control data and the failure
 *     signal go through a CPU communicator it was bootstrapped from.
 *
 *     tide_comm *c;  tide_comm_sock_create(rank, world, fds, timeout_ms, hb_ms, &c, &st);
 *     tide_comm_alltoallv(c, send, sbytes, recv, rbytes, &st); // sizes agreed first
 *     tide_comm_allgather(c, &mine, sizeof mine, all, &st);
 *     if (c->failed) { tide_comm_shrink(c, &st); ... rank/world are new ... }
 *
 * Failure: a peer that closes its end (the process died), whose heartbeat
 * stops (CPU communicator: hung or stopped), or that makes no progress for
 * timeout_ms during a collective fails the call (-1) and sets
 * c->failed (sticky: every later call fails at once) and c->dead_mask.
 * tide_comm_shrink then agrees with the survivors on who is left and
 * renumbers them (in the order of their original ranks); the data of the
 * failed collective is dropped on every side (messages carry an epoch). */
#ifndef TIDE_DIST_COMM_H
#define TIDE_DIST_COMM_H

#include <stdint.h>

#include "base/status.h"

#define TIDE_COMM_MAX 64 /* ranks; masks are one uint64_t */

typedef struct tide_comm tide_comm;

typedef struct tide_comm_ops {
    const char *name;
    /* Rank p's block for q is send + sum(sbytes[0..q)) of sbytes[q] bytes;
     * it lands in q's recv at sum(rbytes[0..p)) (q's rbytes[p] must equal
     * p's sbytes[q]: agree on sizes first, e.g. with allgather). */
    int (*alltoallv)(tide_comm *c, const void *send, const int64_t *sbytes, void *recv, const int64_t *rbytes,
                     tide_status *st);
    /* all[p * bytes ..] = rank p's mine (bytes the same on every rank). */
    int (*allgather)(tide_comm *c, const void *mine, int64_t bytes, void *all, tide_status *st);
    /* Agree on the survivors after a failure; NULL where unsupported. */
    int (*shrink)(tide_comm *c, tide_status *st);
    void (*free)(tide_comm *c);
} tide_comm_ops;

struct tide_comm {
    const tide_comm_ops *ops;
    int rank, world;               /* current numbering (changes on shrink) */
    int orig[TIDE_COMM_MAX];       /* the original rank of each current rank */
    int failed;                    /* sticky failure signal */
    int excluded;                  /* shrink left this rank out: it must stop */
    uint64_t dead_mask;            /* original ranks found dead */
    char why[160];                 /* what failed, for messages */
    void *impl;
};

static inline int tide_comm_alltoallv(tide_comm *c, const void *send, const int64_t *sbytes, void *recv,
                                      const int64_t *rbytes, tide_status *st) {
    return c->ops->alltoallv(c, send, sbytes, recv, rbytes, st);
}
static inline int tide_comm_allgather(tide_comm *c, const void *mine, int64_t bytes, void *all, tide_status *st) {
    return c->ops->allgather(c, mine, bytes, all, st);
}
/* Sums (op 0) or maxima (op 1) of n int64 values over the ranks, in place. */
int tide_comm_allreduce_i64(tide_comm *c, int64_t *v, int n, int op, tide_status *st);
/* Every rank reaches it before any leaves. */
int tide_comm_barrier(tide_comm *c, tide_status *st);
int tide_comm_shrink(tide_comm *c, tide_status *st);
void tide_comm_free(tide_comm *c);

/* ---- the CPU communicator (comm_sock.c) ---- */

/* The launcher's side: two meshes, data then heartbeat; fds[m * world *
 * world + p * world + q] for p != q is p's end of the socket pair between p
 * and q in mesh m (2 * world * world ints; the diagonals are -1). */
int tide_comm_sock_mesh(int world, int *fds, tide_status *st);
/* Rank r's side, after fork: keeps its own ends (closing every other fd of
 * the meshes) and makes them non-blocking. fds is the launcher's array.
 * hb_timeout_ms > 0 starts the heartbeat thread: a peer silent that long is
 * lost (0: no heartbeat; only end-of-file and timeout_ms find a loss). */
int tide_comm_sock_create(int rank, int world, int *fds, int timeout_ms, int hb_timeout_ms, tide_comm **out,
                          tide_status *st);

/* ---- NCCL (comm_nccl.c, TIDE_HAVE_NCCL builds only) ---- */

/* Creates the NCCL communicator of the same ranks as boot (the unique id
 * travels through boot's allgather) on CUDA device `device`. alltoallv's
 * buffers are then device pointers; allgather and the failure signal go
 * through boot, which must outlive it. */
int tide_comm_nccl_create(tide_comm *boot, int device, tide_comm **out, tide_status *st);

#endif
