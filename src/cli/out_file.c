/* Result files that lose nothing (out_file.h): temporary file + rename, one
 * write(2) per line, every write and close checked. */
#include "cli/out_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *tide_out_name(const tide_out_file *o) { return o->path ? o->path : "stdout"; }

/* Both name the same file (stat of either failing means they cannot). */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* "DIR/.BASE.XXXXXX" for path "DIR/BASE" (or ".BASE.XXXXXX"): the same
 * directory, so that the final rename stays within one file system. */
static char *tmp_template(const char *path) {
    const char *slash = strrchr(path, '/');
    size_t dir = slash ? (size_t)(slash - path) + 1 : 0;
    size_t n = strlen(path) + 16;
    char *t = malloc(n);
    if (t) snprintf(t, n, "%.*s.%s.XXXXXX", (int)dir, path, path + dir);
    return t;
}

int tide_out_open(tide_out_file *o, const char *path, const char *input, tide_status *st) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    if (!path || !strcmp(path, "-")) {
        o->fd = STDOUT_FILENO;
        return 0;
    }
    if (!*path || path[strlen(path) - 1] == '/')
        return tide_fail(st, TIDE_ERR_INVALID, "output '%s' is not a file name", path);
    if (input && strcmp(input, "-") && same_file(path, input))
        return tide_fail(st, TIDE_ERR_INVALID, "output %s is the input file %s: it would be lost; give another name",
                         path, input);
    o->path = strdup(path);
    o->tmp = tmp_template(path);
    if (!o->path || !o->tmp) {
        tide_out_abort(o);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    }
    o->fd = mkstemp(o->tmp);
    if (o->fd < 0) {
        int e = errno;
        tide_out_abort(o);
        return tide_fail(st, TIDE_ERR_IO, "cannot create a temporary file next to %s: %s", path, strerror(e));
    }
    /* mkstemp makes it 0600; give it what a new file gets (0666 less the umask) */
    mode_t um = umask(0);
    umask(um);
    if (fchmod(o->fd, 0666 & ~um) != 0) {
        int e = errno;
        tide_out_abort(o);
        return tide_fail(st, TIDE_ERR_IO, "cannot set the mode of %s: %s", path, strerror(e));
    }
    return 0;
}

int tide_out_write(tide_out_file *o, const char *s, size_t n, tide_status *st) {
    if (o->fd < 0) return tide_fail(st, TIDE_ERR_INTERNAL, "writing %s: the file is closed", tide_out_name(o));
    while (n > 0) {
        ssize_t k = write(o->fd, s, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return tide_fail(st, TIDE_ERR_IO, "writing %s failed: %s", tide_out_name(o),
                             k < 0 ? strerror(errno) : "nothing written");
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

int tide_out_line(tide_out_file *o, const char *s, size_t n, tide_status *st) {
    if (n + 1 > o->cap) {
        size_t c = n + 1 > 2 * o->cap ? n + 1 : 2 * o->cap;
        char *b = realloc(o->buf, c);
        if (!b) return tide_fail(st, TIDE_ERR_NOMEM, "writing %s: out of memory", tide_out_name(o));
        o->buf = b;
        o->cap = c;
    }
    memcpy(o->buf, s, n);
    o->buf[n] = '\n';
    if (tide_out_write(o, o->buf, n + 1, st) != 0) return -1;
    o->lines++;
    return 0;
}

/* Closes a named output's descriptor, checking that its data reached the disk. */
static int close_checked(tide_out_file *o, tide_status *st) {
    int fd = o->fd;
    o->fd = -1;
    int bad = fsync(fd) != 0 && errno != EINVAL; /* EINVAL: a file that cannot be synced (no error) */
    int e = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) return tide_fail(st, TIDE_ERR_IO, "writing %s failed: %s", o->path, strerror(e));
    return 0;
}

int tide_out_commit(tide_out_file *o, tide_status *st) {
    int rc = 0;
    if (!o->path) {
        /* stdout: write(2) already reported its errors; fsync catches a late
         * one on a file (EINVAL/ENOTTY-like results for pipes are no error) */
        if (o->fd >= 0 && fsync(o->fd) != 0 && errno != EINVAL && errno != EROFS)
            rc = tide_fail(st, TIDE_ERR_IO, "writing stdout failed: %s", strerror(errno));
        o->fd = -1;
    } else if (close_checked(o, st) != 0) {
        rc = -1;
    } else if (rename(o->tmp, o->path) != 0) {
        rc = tide_fail(st, TIDE_ERR_IO, "cannot rename %s to %s: %s", o->tmp, o->path, strerror(errno));
    } else {
        free(o->tmp); /* renamed: nothing left to remove */
        o->tmp = NULL;
    }
    tide_out_abort(o);
    return rc;
}

void tide_out_abort(tide_out_file *o) {
    if (o->path && o->fd >= 0) close(o->fd);
    if (o->tmp) unlink(o->tmp);
    free(o->tmp);
    free(o->path);
    free(o->buf);
    memset(o, 0, sizeof *o);
    o->fd = -1;
}
