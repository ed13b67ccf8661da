#include "base/fs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
