/* io_uring shard I/O: see kvstore_io.h. */
#include "cache/kvstore_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/kvstore_fmt.h"

int tide_kvs_io_init(tide_kvs_io *io, tide_status *st) {
    memset(io, 0, sizeof *io);
    int rc = io_uring_queue_init(2 * TIDE_KVS_MAX_SHARDS, &io->ring, 0);
    if (rc < 0) return tide_fail(st, TIDE_ERR_IO, "kv store: io_uring_queue_init: %s", strerror(-rc));
    io->on = 1;
    return 0;
}

void tide_kvs_io_free(tide_kvs_io *io) {
    if (io->on) io_uring_queue_exit(&io->ring);
    io->on = 0;
}

uint8_t *tide_kvs_alloc(uint64_t len) {
    void *p = NULL;
    if (len == 0 || posix_memalign(&p, TIDE_KVS_ALIGN, (size_t)len) != 0) return NULL;
    memset(p, 0, (size_t)len);
    return p;
}

/* O_DIRECT where the file system takes it (EINVAL: tmpfs and the like). */
static int open_direct(const tide_kvs_io *io, const char *path, int flags) {
    int fd = open(path, flags | (io->no_sync ? 0 : O_DIRECT) | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EINVAL) fd = open(path, flags | O_CLOEXEC, 0644);
    return fd < 0 ? -errno : fd;
}

/* Submits what is queued and collects `want` completions; each carries the
 * index of its file in user_data (writes: 2i, fsyncs: 2i + 1). */
static void reap(tide_kvs_io *io, tide_kvs_file *f, int want, int writes) {
    io_uring_submit(&io->ring);
    for (int got = 0; got < want; got++) {
        struct io_uring_cqe *c;
        if (io_uring_wait_cqe(&io->ring, &c) != 0) break;
        uint64_t u = io_uring_cqe_get_data64(c);
        int i = writes ? (int)(u / 2) : (int)u;
        if (f[i].res >= 0) {
            if (c->res < 0) f[i].res = c->res;
            else if (!writes || u % 2 == 0) {
                if ((uint64_t)c->res != f[i].len && writes) f[i].res = -ENOSPC; /* short write */
                else f[i].res = c->res;
            }
        }
        io_uring_cqe_seen(&io->ring, c);
    }
}

void tide_kvs_io_write(tide_kvs_io *io, tide_kvs_file *f, int n) {
    int fd[TIDE_KVS_MAX_SHARDS], want = 0;
    for (int i = 0; i < n; i++) {
        fd[i] = open_direct(io, f[i].tmp, O_WRONLY | O_CREAT | O_TRUNC);
        f[i].res = fd[i] < 0 ? fd[i] : 0;
        if (fd[i] < 0) continue;
        struct io_uring_sqe *w = io_uring_get_sqe(&io->ring);
        io_uring_prep_write(w, fd[i], f[i].buf, (unsigned)f[i].len, 0);
        io_uring_sqe_set_data64(w, 2 * (uint64_t)i);
        want++;
        if (io->no_sync) continue;
        w->flags |= IOSQE_IO_LINK; /* the fsync runs only after a full write */
        struct io_uring_sqe *s = io_uring_get_sqe(&io->ring);
        io_uring_prep_fsync(s, fd[i], 0);
        io_uring_sqe_set_data64(s, 2 * (uint64_t)i + 1);
        want++;
    }
    reap(io, f, want, 1);
    int dfd[TIDE_KVS_MAX_SHARDS], n_dir = 0;
    for (int i = 0; i < n; i++) {
        dfd[i] = -1;
        if (fd[i] < 0) continue;
        if (close(fd[i]) != 0 && f[i].res >= 0) f[i].res = -errno;
        if (f[i].res >= 0 && rename(f[i].tmp, f[i].path) != 0) f[i].res = -errno;
        if (f[i].res < 0) {
            unlink(f[i].tmp);
            continue;
        }
        /* the rename itself must survive a crash: fsync the directories,
         * all in one more submission */
        dfd[i] = io->no_sync ? -1 : open(f[i].dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd[i] < 0) continue;
        struct io_uring_sqe *s = io_uring_get_sqe(&io->ring);
        io_uring_prep_fsync(s, dfd[i], 0);
        io_uring_sqe_set_data64(s, (uint64_t)i);
        n_dir++;
    }
    if (n_dir > 0) {
        io_uring_submit(&io->ring);
        for (int got = 0; got < n_dir; got++) {
            struct io_uring_cqe *c;
            if (io_uring_wait_cqe(&io->ring, &c) != 0) break;
            int i = (int)io_uring_cqe_get_data64(c);
            if (c->res < 0) f[i].res = c->res;
            io_uring_cqe_seen(&io->ring, c);
        }
    }
    for (int i = 0; i < n; i++)
        if (dfd[i] >= 0) close(dfd[i]);
}

void tide_kvs_io_read(tide_kvs_io *io, tide_kvs_file *f, int n) {
    int fd[TIDE_KVS_MAX_SHARDS], want = 0;
    for (int i = 0; i < n; i++) {
        fd[i] = open_direct(io, f[i].path, O_RDONLY);
        f[i].res = fd[i] < 0 ? fd[i] : 0;
        if (fd[i] < 0) continue;
        struct io_uring_sqe *r = io_uring_get_sqe(&io->ring);
        io_uring_prep_read(r, fd[i], f[i].buf, (unsigned)f[i].len, 0);
        io_uring_sqe_set_data64(r, (uint64_t)i);
        want++;
    }
    reap(io, f, want, 0);
    for (int i = 0; i < n; i++)
        if (fd[i] >= 0) close(fd[i]);
}
