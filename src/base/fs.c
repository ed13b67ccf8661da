#include "base/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int make_one(const char *path, tide_status *st) {
    struct stat sb;
    if (mkdir(path, 0777) == 0) return 0;
    if (errno != EEXIST) return tide_fail(st, TIDE_ERR_IO, "%s: cannot create directory: %s", path, strerror(errno));
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return tide_fail(st, TIDE_ERR_IO, "%s: exists and is not a directory", path);
    return 0;
}

int tide_mkdir_p(const char *dir, tide_status *st) {
    if (!dir || !*dir) return tide_fail(st, TIDE_ERR_INVALID, "empty directory name");
    char *p = strdup(dir);
    if (!p) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    /* Create each prefix that ends before a '/', then the whole path. */
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        int rc = make_one(p, st);
        *s = '/';
        if (rc != 0) {
            free(p);
            return -1;
        }
    }
    int rc = make_one(p, st);
    free(p);
    return rc;
}

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    return "not a regular file";
}

int tide_open_regular(const char *path, tide_status *st) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return tide_fail(st, errno == ENOENT ? TIDE_ERR_MISSING : TIDE_ERR_IO, "cannot open %s: %s", path,
                         strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return tide_fail(st, TIDE_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return tide_fail(st, TIDE_ERR_IO, "%s is %s, not a regular file", path, kind_of(sb.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return tide_fail(st, TIDE_ERR_IO, "%s: %s", path, strerror(e));
    }
    return fd;
}

FILE *tide_fopen_regular(const char *path, tide_status *st) {
    int fd = tide_open_regular(path, st);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        tide_fail(st, TIDE_ERR_NOMEM, "%s: cannot open a stream: out of memory", path);
    }
    return f;
}

int tide_read_file(const char *path, size_t max, char **out, size_t *out_len, tide_status *st) {
    *out = NULL;
    FILE *f = tide_fopen_regular(path, st);
    if (!f) return -1;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 1 >= cap) {
            if (cap > max) {
                free(buf);
                fclose(f);
                return tide_fail(st, TIDE_ERR_INVALID, "%s: larger than %zu bytes", path, max);
            }
            cap = cap ? 2 * cap : 1 << 16;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
        }
        size_t k = fread(buf + len, 1, cap - len - 1, f);
        len += k;
        if (!k) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return tide_fail(st, TIDE_ERR_IO, "%s: read error", path);
    }
    buf[len] = 0;
    *out = buf;
    *out_len = len;
    return 0;
}
