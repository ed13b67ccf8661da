/* The checkpoint reader: maps one .safetensors file or every shard of a
 * checkpoint directory read-only, validates each header (st_header.c) and
 * the index against the shards, and serves tensors by name. Opening is
 * cheap: mmap reads nothing, so even a 48-shard release opens in the time it
 * takes to parse its headers; pages come in when a tensor is first touched. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "io/safetensors.h"
#include "io/st_index.h"

typedef struct shard {
    char *path;
    void *map;     /* NULL for an empty file (mmap of 0 bytes is not allowed) */
    uint64_t size;
    tide_st_header *h;
} shard;

struct tide_st {
    size_t nfiles;
    shard *files;
    size_t n;
    tide_tensor *tensors; /* sorted by name; strings owned by the shard headers */
    uint64_t total;
};

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static char *join_path(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p) {
        memcpy(p, dir, a);
        p[a] = '/';
        memcpy(p + a + 1, name, b + 1);
    }
    return p;
}

/* Any file type: a FIFO or directory under the index's name is then refused
 * by tide_open_regular with a message, instead of silently skipped. */
static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Maps `path` (already stored in sh->path) and parses its header. */
static int map_shard(shard *sh, tide_status *st) {
    const char *label = base_name(sh->path);
    int fd = tide_open_regular(sh->path, st);
    if (fd < 0) return -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return tide_fail(st, TIDE_ERR_IO, "%s: %s", sh->path, strerror(errno));
    }
    sh->size = (uint64_t)sb.st_size;
    if (sh->size > 0) {
        void *m = mmap(NULL, (size_t)sh->size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return tide_fail(st, TIDE_ERR_IO, "cannot map %s: %s", sh->path, strerror(e));
        }
        sh->map = m;
    }
    close(fd); /* the mapping keeps the file alive */
    static const uint8_t none[1] = {0};
    return tide_st_parse_header(sh->map ? sh->map : none, (size_t)sh->size, sh->size, label, &sh->h,
                                st);
}

static void free_shard(shard *sh) {
    if (sh->map) munmap(sh->map, (size_t)sh->size);
    tide_st_header_free(sh->h);
    free(sh->path);
}

void tide_st_close(tide_st *ck) {
    if (!ck) return;
    for (size_t i = 0; i < ck->nfiles; i++) free_shard(&ck->files[i]);
    free(ck->files);
    free(ck->tensors);
    free(ck);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const tide_tensor *)a)->name, ((const tide_tensor *)b)->name);
}

/* Builds the merged, name-sorted tensor table with data pointers. */
static int collect(tide_st *ck, tide_status *st) {
    size_t n = 0;
    for (size_t i = 0; i < ck->nfiles; i++) n += ck->files[i].h->ntensors;
    ck->tensors = calloc(n ? n : 1, sizeof *ck->tensors);
    if (!ck->tensors) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory for %zu tensors", n);
    for (size_t i = 0; i < ck->nfiles; i++) {
        const shard *sh = &ck->files[i];
        for (size_t j = 0; j < sh->h->ntensors; j++) {
            tide_tensor *t = &ck->tensors[ck->n++];
            *t = sh->h->tensors[j];
            t->data = (const uint8_t *)sh->map + t->offset;
            ck->total += t->nbytes;
        }
    }
    qsort(ck->tensors, ck->n, sizeof *ck->tensors, cmp_name);
    for (size_t i = 1; i < ck->n; i++) { /* the index checks make this unreachable; kept as a guard */
        if (strcmp(ck->tensors[i - 1].name, ck->tensors[i].name) == 0)
            return tide_fail(st, TIDE_ERR_FORMAT, "tensor '%.200s' appears in both %s and %s",
                             ck->tensors[i].name, ck->tensors[i - 1].file, ck->tensors[i].file);
    }
    return 0;
}

static int open_single(tide_st *ck, const char *path, tide_status *st) {
    ck->files = calloc(1, sizeof *ck->files);
    if (!ck->files || !(ck->files[0].path = strdup(path)))
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    ck->nfiles = 1;
    if (map_shard(&ck->files[0], st) != 0) return -1;
    return collect(ck, st);
}

static int read_whole(const char *path, char **buf, size_t *len, tide_status *st) {
    *buf = NULL;
    int fd = tide_open_regular(path, st);
    if (fd < 0) return -1;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory reading %s", path);
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || (uint64_t)sb.st_size > TIDE_ST_MAX_INDEX) {
        fclose(f);
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: not a regular file of at most %zu bytes", path,
                         TIDE_ST_MAX_INDEX);
    }
    *len = (size_t)sb.st_size;
    *buf = malloc(*len + 1);
    if (!*buf) {
        fclose(f);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory reading %s", path);
    }
    size_t got = fread(*buf, 1, *len, f);
    fclose(f);
    if (got != *len) {
        free(*buf);
        *buf = NULL;
        return tide_fail(st, TIDE_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, *len);
    }
    return 0;
}

/* Every tensor of every shard must be in the index under that shard, and
 * every index entry must be found in its shard. */
static int cross_check(const tide_st *ck, const tide_st_index *ix, tide_status *st) {
    size_t found = 0;
    for (size_t i = 0; i < ck->nfiles; i++) {
        const tide_st_header *h = ck->files[i].h;
        for (size_t j = 0; j < h->ntensors; j++) {
            const tide_tensor *t = &h->tensors[j];
            const tide_st_index_entry *e = tide_st_index_find(ix, t->name);
            if (!e)
                return tide_fail(st, TIDE_ERR_FORMAT,
                                 "%s: tensor '%.200s' is not in " TIDE_ST_INDEX_NAME, h->file,
                                 t->name);
            if (e->shard != i)
                return tide_fail(st, TIDE_ERR_FORMAT,
                                 "%s: tensor '%.200s' is here but " TIDE_ST_INDEX_NAME
                                 " places it in %s",
                                 h->file, t->name, ix->files[e->shard]);
            found++;
        }
    }
    if (found == ix->n) return 0;
    for (size_t k = 0; k < ix->n; k++) { /* name the first one that is missing */
        const tide_st_index_entry *e = &ix->entries[k];
        const tide_st_header *h = ck->files[e->shard].h;
        tide_tensor key = {.name = e->name};
        if (!bsearch(&key, h->tensors, h->ntensors, sizeof key, cmp_name))
            return tide_fail(st, TIDE_ERR_MISSING,
                             TIDE_ST_INDEX_NAME " names tensor '%.200s' in %s, which does not contain it",
                             e->name, h->file);
    }
    return tide_fail(st, TIDE_ERR_INTERNAL, "index cross-check miscounted");
}

static int open_index(tide_st *ck, const char *dir, const char *index_path, tide_status *st) {
    char *json = NULL;
    size_t len = 0;
    if (read_whole(index_path, &json, &len, st) != 0) return -1;
    tide_st_index *ix = NULL;
    int rc = tide_st_parse_index(json, len, TIDE_ST_INDEX_NAME, &ix, st);
    free(json);
    if (rc != 0) return -1;
    ck->files = calloc(ix->nfiles, sizeof *ck->files);
    if (!ck->files) rc = tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < ix->nfiles; i++) {
        shard *sh = &ck->files[ck->nfiles++];
        if (!(sh->path = join_path(dir, ix->files[i])))
            rc = tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        else if (map_shard(sh, st) != 0)
            rc = tide_fail_ctx(st, "shard %s named in " TIDE_ST_INDEX_NAME, ix->files[i]);
    }
    if (rc == 0) rc = cross_check(ck, ix, st);
    tide_st_index_free(ix);
    if (rc == 0) rc = collect(ck, st);
    return rc;
}

static const char *index_suffix = ".index.json";

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int open_any(tide_st *ck, const char *path, tide_status *st) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return tide_fail(st, errno == ENOENT ? TIDE_ERR_MISSING : TIDE_ERR_IO, "cannot open %s: %s",
                         path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        if (!ends_with(path, index_suffix)) return open_single(ck, path, st);
        /* An index file given directly: its shards live beside it. */
        char *dir = strdup(path);
        if (!dir) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        int rc = open_index(ck, slash ? dir : ".", path, st);
        free(dir);
        return rc;
    }
    char *index = join_path(path, TIDE_ST_INDEX_NAME);
    char *single = join_path(path, "model.safetensors");
    int rc;
    if (!index || !single)
        rc = tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    else if (exists(index))
        rc = open_index(ck, path, index, st);
    else if (exists(single))
        rc = open_single(ck, single, st);
    else
        rc = tide_fail(st, TIDE_ERR_MISSING,
                       "%s: no " TIDE_ST_INDEX_NAME " and no model.safetensors in this directory",
                       path);
    free(index);
    free(single);
    return rc;
}

int tide_st_open(const char *path, tide_st **out, tide_status *st) {
    *out = NULL;
    if (!path || !*path) return tide_fail(st, TIDE_ERR_INVALID, "tide_st_open: empty path");
    tide_st *ck = calloc(1, sizeof *ck);
    if (!ck) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    if (open_any(ck, path, st) != 0) {
        tide_st_close(ck);
        return -1;
    }
    *out = ck;
    return 0;
}

size_t tide_st_count(const tide_st *ck) { return ck->n; }

const tide_tensor *tide_st_at(const tide_st *ck, size_t i) {
    return i < ck->n ? &ck->tensors[i] : NULL;
}

const tide_tensor *tide_st_find(const tide_st *ck, const char *name) {
    tide_tensor key = {.name = name};
    return bsearch(&key, ck->tensors, ck->n, sizeof key, cmp_name);
}

int tide_st_expect(const tide_st *ck, const char *name, tide_dtype dt, int ndim,
                   const int64_t *shape, const tide_tensor **out, tide_status *st) {
    if (out) *out = NULL;
    const tide_tensor *t = tide_st_find(ck, name);
    if (!t) return tide_fail(st, TIDE_ERR_MISSING, "checkpoint has no tensor '%.200s'", name);
    if (dt != TIDE_DT_ANY && t->dtype != dt)
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: tensor '%.200s' is %s, expected %s", t->file, name,
                         tide_dtype_name(t->dtype), tide_dtype_name(dt));
    if (shape) {
        bool same = t->ndim == ndim;
        for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
        if (!same) {
            char want[200], got[200];
            return tide_fail(st, TIDE_ERR_FORMAT, "%s: tensor '%.200s' has shape %s, expected %s",
                             t->file, name, tide_shape_str(t->ndim, t->shape, got, sizeof got),
                             tide_shape_str(ndim, shape, want, sizeof want));
        }
    }
    if (out) *out = t;
    return 0;
}

size_t tide_st_nfiles(const tide_st *ck) { return ck->nfiles; }

const char *tide_st_file_name(const tide_st *ck, size_t i) {
    return i < ck->nfiles ? ck->files[i].h->file : NULL;
}

uint64_t tide_st_total_bytes(const tide_st *ck) { return ck->total; }

const char *tide_st_meta(const tide_st *ck, const char *key) {
    for (size_t i = 0; i < ck->nfiles; i++) {
        const tide_st_header *h = ck->files[i].h;
        for (size_t j = 0; j < h->nmeta; j++)
            if (strcmp(h->meta_keys[j], key) == 0) return h->meta_vals[j];
    }
    return NULL;
}
