/* The CPU communicator: a full mesh of AF_UNIX stream socket pairs, one per
 * pair of rank processes, made by the launcher before it forks.
 *
 * Every collective is one transfer: each rank sends one message to every
 * peer and receives one from every peer, all at once through non-blocking
 * sockets and poll() (so no ordering between peers can deadlock). A message
 * is a header {magic, epoch, bytes} and its payload. The epoch is bumped by
 * every shrink: a survivor that reads a message of an older epoch (data of
 * the collective that failed) drops it; one of a newer epoch (a peer already
 * shrinking) is kept for the shrink and fails the collective in progress.
 *
 * A peer is lost when its socket reads end-of-file or fails (the process
 * died: the kernel closes its ends at once), when its heartbeat stops for
 * hb_timeout_ms (a hung or stopped process, even while this rank waits for
 * it in a collective that legitimately takes long), or when a collective
 * makes no progress with it for timeout_ms (the backstop).
 *
 * Heartbeat: a second mesh of socket pairs and a thread per rank that
 * sends one byte to every peer every hb_timeout_ms / 8 and reads theirs;
 * a peer silent for hb_timeout_ms is marked in hb_dead, which the
 * collectives check at least every 50 ms (one whose heartbeat socket
 * closed exited: its data socket tells a death from a normal end). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "dist/comm.h"

#define MAGIC 0x74646531u /* "tde1" */

typedef struct {
    uint32_t magic, epoch;
    int64_t bytes;
} hdr;

typedef struct {
    int fd[TIDE_COMM_MAX];  /* by original rank; -1 = self or closed */
    uint32_t epoch;
    int timeout_ms;
    int hb_fd[TIDE_COMM_MAX];
    int hb_timeout_ms;      /* 0 = no heartbeat */
    pthread_t hb_thread;
    atomic_int hb_stop;
    atomic_ullong hb_dead;  /* original ranks whose heartbeat stopped */
    int has_next[TIDE_COMM_MAX]; /* a header of a later epoch already read */
    hdr next[TIDE_COMM_MAX];
} sock_impl;

/* One side of a transfer with one peer. */
typedef struct {
    int peer; /* original rank */
    const char *out;
    int64_t out_n, out_done; /* payload bytes; header is sent first */
    hdr oh;
    int oh_done;
    char *in;
    int64_t in_cap, in_done;
    hdr ih;
    int ih_done;
    int64_t skip; /* bytes of a stale payload still to drop */
    int finished_in;
} side;

static void lose(tide_comm *c, int peer, const char *what) {
    if (!c->failed) snprintf(c->why, sizeof c->why, "rank %d: %s", peer, what);
    c->failed = 1;
    if (peer >= 0) c->dead_mask |= 1ull << peer;
}

/* Runs the transfer of n sides at epoch ep. Returns 0, or -1 with c->failed
 * set. want_epoch_exact: headers of later epochs count as failures (kept in
 * next[]) unless they are the epoch being run. */
static int transfer(tide_comm *c, side *sd, int n, uint32_t ep, tide_status *st) {
    sock_impl *s = c->impl;
    for (int i = 0; i < n; i++) {
        sd[i].oh = (hdr){MAGIC, ep, sd[i].out_n};
        int p = sd[i].peer;
        if (s->has_next[p] && s->next[p].epoch == ep) { /* read during the failed collective */
            sd[i].ih = s->next[p];
            sd[i].ih_done = (int)sizeof(hdr);
            s->has_next[p] = 0;
            if (sd[i].ih.bytes != sd[i].in_cap) {
                lose(c, p, "message size disagrees");
                return tide_fail(st, TIDE_ERR_IO, "comm: %s", c->why);
            }
            if (sd[i].in_cap == 0) sd[i].finished_in = 1;
        }
    }
    struct pollfd pf[TIDE_COMM_MAX];
    double last = tide_now_seconds();
    for (;;) {
        int busy = 0;
        for (int i = 0; i < n; i++) {
            side *d = &sd[i];
            int want_out = d->oh_done < (int)sizeof(hdr) || d->out_done < d->out_n;
            pf[i] = (struct pollfd){s->fd[d->peer], (short)((want_out ? POLLOUT : 0) | (d->finished_in ? 0 : POLLIN)), 0};
            if (want_out || !d->finished_in) busy = 1;
        }
        if (!busy) return 0;
        int timeout = s->timeout_ms - (int)((tide_now_seconds() - last) * 1000.0);
        if (timeout < 0) timeout = 0;
        int slice = s->hb_timeout_ms && timeout > 50 ? 50 : timeout;
        int r = poll(pf, (nfds_t)n, slice);
        if (r < 0 && errno == EINTR) continue;
        uint64_t hd = atomic_load(&s->hb_dead);
        for (int i = 0; i < n; i++)
            if ((hd >> sd[i].peer & 1) && /* only a peer this rank still waits on */
                (!sd[i].finished_in || sd[i].oh_done < (int)sizeof(hdr) || sd[i].out_done < sd[i].out_n)) {
                lose(c, sd[i].peer, "heartbeat stopped");
                return tide_fail(st, TIDE_ERR_IO, "comm: %s (%d ms)", c->why, s->hb_timeout_ms);
            }
        if (r == 0 && slice < timeout) continue;
        if (r < 0) {
            lose(c, -1, strerror(errno));
            return tide_fail(st, TIDE_ERR_IO, "comm: poll: %s", strerror(errno));
        }
        if (r == 0) {
            for (int i = 0; i < n; i++)
                if (!sd[i].finished_in || sd[i].out_done < sd[i].out_n) {
                    lose(c, sd[i].peer, "no progress within the timeout");
                    break;
                }
            return tide_fail(st, TIDE_ERR_IO, "comm: %s (%d ms)", c->why, s->timeout_ms);
        }
        for (int i = 0; i < n; i++) {
            side *d = &sd[i];
            int fd = s->fd[d->peer];
            if (pf[i].revents & POLLOUT) {
                ssize_t w;
                if (d->oh_done < (int)sizeof(hdr))
                    w = send(fd, (char *)&d->oh + d->oh_done, sizeof(hdr) - (size_t)d->oh_done, MSG_NOSIGNAL);
                else
                    w = send(fd, d->out + d->out_done, (size_t)(d->out_n - d->out_done), MSG_NOSIGNAL);
                if (w < 0 && errno != EAGAIN && errno != EINTR) {
                    lose(c, d->peer, "connection lost (send)");
                    return tide_fail(st, TIDE_ERR_IO, "comm: %s", c->why);
                }
                if (w > 0) {
                    last = tide_now_seconds();
                    if (d->oh_done < (int)sizeof(hdr)) d->oh_done += (int)w;
                    else d->out_done += w;
                }
            }
            if (!d->finished_in && (pf[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                ssize_t got;
                char junk[65536];
                if (d->ih_done < (int)sizeof(hdr))
                    got = recv(fd, (char *)&d->ih + d->ih_done, sizeof(hdr) - (size_t)d->ih_done, 0);
                else if (d->skip > 0)
                    got = recv(fd, junk, d->skip < (int64_t)sizeof junk ? (size_t)d->skip : sizeof junk, 0);
                else
                    got = recv(fd, d->in + d->in_done, (size_t)(d->in_cap - d->in_done), 0);
                if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                    lose(c, d->peer, got == 0 ? "closed its connection (process gone)" : "connection lost (recv)");
                    return tide_fail(st, TIDE_ERR_IO, "comm: %s", c->why);
                }
                if (got < 0) continue;
                last = tide_now_seconds();
                if (d->ih_done < (int)sizeof(hdr)) {
                    d->ih_done += (int)got;
                    if (d->ih_done < (int)sizeof(hdr)) continue;
                    if (d->ih.magic != MAGIC || d->ih.bytes < 0) {
                        lose(c, d->peer, "bad message header");
                        return tide_fail(st, TIDE_ERR_IO, "comm: %s", c->why);
                    }
                    if (d->ih.epoch < ep) { /* data of a failed collective: drop it */
                        d->skip = d->ih.bytes;
                        if (d->skip == 0) d->ih_done = 0;
                        continue;
                    }
                    if (d->ih.epoch > ep) { /* the peer is shrinking already */
                        s->has_next[d->peer] = 1;
                        s->next[d->peer] = d->ih;
                        lose(c, -1, "a peer left the collective");
                        return tide_fail(st, TIDE_ERR_IO, "comm: %s", c->why);
                    }
                    if (d->ih.bytes != d->in_cap) {
                        lose(c, d->peer, "message size disagrees");
                        return tide_fail(st, TIDE_ERR_IO, "comm: %s", c->why);
                    }
                    if (d->in_cap == 0) d->finished_in = 1;
                } else if (d->skip > 0) {
                    d->skip -= got;
                    if (d->skip == 0) d->ih_done = 0;
                } else {
                    d->in_done += got;
                    if (d->in_done == d->in_cap) d->finished_in = 1;
                }
            }
        }
    }
}

static int check(tide_comm *c, tide_status *st) {
    if (c->failed) return tide_fail(st, TIDE_ERR_IO, "comm: failed earlier (%s); shrink first", c->why);
    return 0;
}

static int sock_alltoallv(tide_comm *c, const void *send, const int64_t *sbytes, void *recv, const int64_t *rbytes,
                          tide_status *st) {
    if (check(c, st)) return -1;
    sock_impl *s = c->impl;
    side sd[TIDE_COMM_MAX];
    int n = 0;
    int64_t so = 0, ro = 0;
    for (int q = 0; q < c->world; q++) {
        if (q == c->rank) {
            int64_t ro_self = 0;
            for (int p = 0; p < c->rank; p++) ro_self += rbytes[p];
            if (sbytes[q] != rbytes[q]) return tide_fail(st, TIDE_ERR_INVALID, "comm: self block sizes disagree");
            if (sbytes[q]) memcpy((char *)recv + ro_self, (const char *)send + so, (size_t)sbytes[q]);
        } else {
            sd[n++] = (side){.peer = c->orig[q], .out = (const char *)send + so, .out_n = sbytes[q],
                             .in = (char *)recv + ro, .in_cap = rbytes[q]};
        }
        so += sbytes[q];
        ro += rbytes[q];
    }
    return transfer(c, sd, n, s->epoch, st);
}

static int sock_allgather(tide_comm *c, const void *mine, int64_t bytes, void *all, tide_status *st) {
    if (check(c, st)) return -1;
    sock_impl *s = c->impl;
    side sd[TIDE_COMM_MAX];
    int n = 0;
    for (int q = 0; q < c->world; q++) {
        if (q == c->rank) memcpy((char *)all + q * bytes, mine, (size_t)bytes);
        else
            sd[n++] = (side){.peer = c->orig[q], .out = mine, .out_n = bytes, .in = (char *)all + q * bytes,
                             .in_cap = bytes};
    }
    return transfer(c, sd, n, s->epoch, st);
}

/* Each survivor sends its view of who is alive (a mask of original ranks)
 * to every rank it believes alive, at a new epoch; views are intersected
 * until a round where every view agrees. */
static int sock_shrink(tide_comm *c, tide_status *st) {
    sock_impl *s = c->impl;
    int me = c->orig[c->rank];
    uint64_t alive = 0;
    for (int q = 0; q < c->world; q++) alive |= 1ull << c->orig[q];
    for (int round = 0; round < 8; round++) {
        c->dead_mask |= atomic_load(&s->hb_dead);
        alive &= ~c->dead_mask;
        if (!(alive >> me & 1)) { /* the others found this rank dead (a heartbeat starved too long) */
            c->excluded = 1;
            c->failed = 1;
            return tide_fail(st, TIDE_ERR_IO, "comm: the other ranks left this one out of the group");
        }
        uint64_t views[TIDE_COMM_MAX] = {0};
        side sd[TIDE_COMM_MAX];
        int n = 0, peers[TIDE_COMM_MAX];
        for (int p = 0; p < TIDE_COMM_MAX; p++)
            if ((alive >> p & 1) && p != me) {
                peers[n] = p;
                sd[n] = (side){.peer = p, .out = (const char *)&alive, .out_n = 8, .in = (char *)&views[n],
                               .in_cap = 8};
                n++;
            }
        s->epoch++;
        c->failed = 0;
        if (transfer(c, sd, n, s->epoch, st) != 0) continue; /* someone else died: again */
        uint64_t agreed = alive;
        for (int i = 0; i < n; i++) agreed &= views[i];
        int same = 1;
        for (int i = 0; i < n; i++)
            if (views[i] != agreed) same = 0;
        (void)peers;
        if (!same || agreed != alive) {
            c->dead_mask |= alive & ~agreed;
            alive = agreed;
            continue;
        }
        for (int p = 0; p < TIDE_COMM_MAX; p++)
            if (!(alive >> p & 1) && s->fd[p] >= 0) {
                close(s->fd[p]); /* the heartbeat socket stays: its thread sees it closed or silent */
                s->fd[p] = -1;
            }
        c->world = 0;
        for (int p = 0; p < TIDE_COMM_MAX; p++)
            if (alive >> p & 1) {
                if (p == me) c->rank = c->world;
                c->orig[c->world++] = p;
            }
        c->failed = 0;
        c->why[0] = 0;
        return 0;
    }
    c->failed = 1;
    return tide_fail(st, TIDE_ERR_IO, "comm: the survivors did not agree on who is left");
}

static void sock_free(tide_comm *c) {
    sock_impl *s = c->impl;
    if (s->hb_timeout_ms) {
        atomic_store(&s->hb_stop, 1);
        pthread_join(s->hb_thread, NULL);
    }
    for (int p = 0; p < TIDE_COMM_MAX; p++) {
        if (s->fd[p] >= 0) close(s->fd[p]);
        if (s->hb_fd[p] >= 0) close(s->hb_fd[p]);
    }
    free(s);
    free(c);
}

static void *heartbeat(void *arg) {
    sock_impl *s = arg;
    double seen[TIDE_COMM_MAX], now = tide_now_seconds(), next = now;
    uint8_t closed[TIDE_COMM_MAX] = {0};
    int period = s->hb_timeout_ms / 8 > 0 ? s->hb_timeout_ms / 8 : 1;
    for (int p = 0; p < TIDE_COMM_MAX; p++) seen[p] = now;
    while (!atomic_load(&s->hb_stop)) {
        struct pollfd pf[TIDE_COMM_MAX];
        int who[TIDE_COMM_MAX], n = 0;
        uint64_t dead = atomic_load(&s->hb_dead);
        now = tide_now_seconds();
        for (int p = 0; p < TIDE_COMM_MAX; p++) {
            if (s->hb_fd[p] < 0 || closed[p] || (dead >> p & 1)) continue;
            if (now >= next) {
                char b = 1;
                (void)!send(s->hb_fd[p], &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            }
            pf[n] = (struct pollfd){s->hb_fd[p], POLLIN, 0};
            who[n++] = p;
        }
        if (now >= next) next = now + period / 1000.0;
        /* short polls: the stop flag is seen within 20 ms */
        if (poll(pf, (nfds_t)n, period < 20 ? period : 20) < 0 && errno != EINTR) break;
        now = tide_now_seconds();
        for (int i = 0; i < n; i++) {
            int p = who[i];
            if (pf[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                char junk[64];
                ssize_t got = recv(s->hb_fd[p], junk, sizeof junk, MSG_DONTWAIT);
                if (got > 0) seen[p] = now;
                /* closed: the peer exited; its data socket says whether
                 * that was a death (end-of-file after whatever it sent) */
                else if (got == 0 || (errno != EAGAIN && errno != EINTR)) closed[p] = 1;
            }
            if (!closed[p] && (now - seen[p]) * 1000.0 > s->hb_timeout_ms) atomic_fetch_or(&s->hb_dead, 1ull << p);
        }
    }
    return NULL;
}

static const tide_comm_ops sock_ops = {"sock", sock_alltoallv, sock_allgather, sock_shrink, sock_free};

int tide_comm_sock_mesh(int world, int *fds, tide_status *st) {
    if (world < 1 || world > TIDE_COMM_MAX)
        return tide_fail(st, TIDE_ERR_INVALID, "comm: %d ranks (1..%d)", world, TIDE_COMM_MAX);
    int n = world * world;
    for (int i = 0; i < 2 * n; i++) fds[i] = -1;
    for (int m = 0; m < 2; m++) /* the data mesh, then the heartbeat mesh */
        for (int p = 0; p < world; p++)
            for (int q = p + 1; q < world; q++) {
                int sv[2];
                if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
                    for (int i = 0; i < 2 * n; i++)
                        if (fds[i] >= 0) close(fds[i]);
                    return tide_fail(st, TIDE_ERR_IO, "comm: socketpair: %s", strerror(errno));
                }
                fds[m * n + p * world + q] = sv[0];
                fds[m * n + q * world + p] = sv[1];
            }
    return 0;
}

int tide_comm_sock_create(int rank, int world, int *fds, int timeout_ms, int hb_timeout_ms, tide_comm **out,
                          tide_status *st) {
    *out = NULL;
    if (world < 1 || world > TIDE_COMM_MAX || rank < 0 || rank >= world || timeout_ms < 1 || hb_timeout_ms < 0)
        return tide_fail(st, TIDE_ERR_INVALID, "comm: rank %d of %d (timeout %d ms)", rank, world, timeout_ms);
    tide_comm *c = calloc(1, sizeof *c);
    sock_impl *s = calloc(1, sizeof *s);
    if (!c || !s) {
        free(c);
        free(s);
        return tide_fail(st, TIDE_ERR_NOMEM, "comm: out of memory");
    }
    for (int p = 0; p < TIDE_COMM_MAX; p++) s->fd[p] = s->hb_fd[p] = -1;
    int n = world * world;
    for (int m = 0; m < 2; m++)
        for (int p = 0; p < world; p++)
            for (int q = 0; q < world; q++) {
                int *f = &fds[m * n + p * world + q];
                if (*f < 0) continue;
                if (p == rank && (m == 0 || hb_timeout_ms > 0)) {
                    fcntl(*f, F_SETFL, fcntl(*f, F_GETFL) | O_NONBLOCK);
                    (m ? s->hb_fd : s->fd)[q] = *f;
                } else {
                    close(*f);
                }
                *f = -1;
            }
    s->timeout_ms = timeout_ms;
    s->hb_timeout_ms = hb_timeout_ms;
    c->ops = &sock_ops;
    c->rank = rank;
    c->world = world;
    for (int p = 0; p < world; p++) c->orig[p] = p;
    c->impl = s;
    if (hb_timeout_ms && pthread_create(&s->hb_thread, NULL, heartbeat, s) != 0) {
        s->hb_timeout_ms = 0;
        sock_free(c);
        return tide_fail(st, TIDE_ERR_IO, "comm: cannot start the heartbeat thread");
    }
    *out = c;
    return 0;
}

/* ---- generic helpers over any communicator ---- */

int tide_comm_allreduce_i64(tide_comm *c, int64_t *v, int n, int op, tide_status *st) {
    int64_t *all = malloc((size_t)c->world * (size_t)n * sizeof(int64_t));
    if (!all) return tide_fail(st, TIDE_ERR_NOMEM, "comm: out of memory");
    int rc = tide_comm_allgather(c, v, (int64_t)n * (int64_t)sizeof(int64_t), all, st);
    if (rc == 0)
        for (int i = 0; i < n; i++) {
            int64_t a = all[i];
            for (int p = 1; p < c->world; p++) {
                int64_t b = all[p * n + i];
                a = op == 0 ? a + b : (b > a ? b : a);
            }
            v[i] = a;
        }
    free(all);
    return rc;
}

int tide_comm_barrier(tide_comm *c, tide_status *st) {
    int64_t x = 0;
    return tide_comm_allreduce_i64(c, &x, 1, 0, st);
}

int tide_comm_shrink(tide_comm *c, tide_status *st) {
    if (!c->ops->shrink) return tide_fail(st, TIDE_ERR_UNSUPPORTED, "comm: %s cannot shrink", c->ops->name);
    return c->ops->shrink(c, st);
}

void tide_comm_free(tide_comm *c) {
    if (c) c->ops->free(c);
}
