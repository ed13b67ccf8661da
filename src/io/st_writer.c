/* The streaming checkpoint writer. A safetensors header must precede the
 * data and holds every tensor's offsets, so the producer declares all
 * tensors first (names, dtypes, shapes: a few hundred bytes each); on the
 * first write the writer lays out every shard, writes the headers, and from
 * then on each tensor's bytes go straight to their final place with pwrite.
 * Memory stays bounded by the declarations plus whatever one chunk the
 * producer holds, whatever the checkpoint size. The index is written last,
 * under a temporary name then renamed, so a crashed run never leaves a
 * checkpoint that looks complete. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"

#include "base/fs.h"
#include "io/st_index.h"

typedef struct wtensor {
    char *name;
    tide_dtype dtype;
    int ndim;
    int64_t shape[TIDE_ST_MAX_DIMS];
    uint64_t nbytes;
    int shard;
    uint64_t offset;  /* absolute, in the shard file; set at layout */
    uint64_t written; /* bytes received so far */
} wtensor;

typedef struct wshard {
    char *path;
    int fd; /* -1 until layout */
} wshard;

struct tide_stw {
    char *dir;        /* NULL in single-file mode */
    char *final_path; /* single-file mode: shard 0 is written to final_path.tmp, renamed at finish */
    int nshards;
    wshard *shards;
    wtensor *t;
    size_t n, cap;
    size_t *slots; /* open-addressing name table: index + 1, 0 = empty */
    size_t nslots;
    size_t nmeta;
    char **meta_keys, **meta_vals;
    bool laid_out;
    bool broken; /* layout failed: every later call fails */
};

/* ---- name table ---- */

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static size_t *slot_for(const tide_stw *w, const char *name) {
    size_t mask = w->nslots - 1, i = (size_t)hash_name(name) & mask;
    while (w->slots[i] && strcmp(w->t[w->slots[i] - 1].name, name) != 0) i = (i + 1) & mask;
    return &w->slots[i];
}

static int grow_slots(tide_stw *w, tide_status *st) {
    size_t old_n = w->nslots, *old = w->slots;
    w->nslots = old_n ? old_n * 2 : 64;
    w->slots = calloc(w->nslots, sizeof *w->slots);
    if (!w->slots) {
        w->slots = old;
        w->nslots = old_n;
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < old_n; i++)
        if (old[i]) *slot_for(w, w->t[old[i] - 1].name) = old[i];
    free(old);
    return 0;
}

static wtensor *lookup(tide_stw *w, const char *name) {
    if (!w->nslots) return NULL;
    size_t s = *slot_for(w, name);
    return s ? &w->t[s - 1] : NULL;
}

/* ---- open / declare ---- */

static int writer_new(int nshards, tide_stw **out, tide_status *st) {
    tide_stw *w = calloc(1, sizeof *w);
    if (!w || !(w->shards = calloc((size_t)nshards, sizeof *w->shards))) {
        free(w);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    }
    w->nshards = nshards;
    for (int i = 0; i < nshards; i++) w->shards[i].fd = -1;
    *out = w;
    return 0;
}

int tide_stw_open(const char *dir, int nshards, tide_stw **out, tide_status *st) {
    *out = NULL;
    if (nshards < 1 || nshards > 99999)
        return tide_fail(st, TIDE_ERR_INVALID, "writer: %d shards (1..99999 allowed)", nshards);
    if (tide_mkdir_p(dir, st) != 0) return -1;
    tide_stw *w = NULL;
    if (writer_new(nshards, &w, st) != 0) return -1;
    size_t dl = strlen(dir);
    w->dir = strdup(dir);
    for (int i = 0; w->dir && i < nshards; i++) {
        char name[64];
        tide_st_shard_name(i, nshards, name, sizeof name);
        if (!(w->shards[i].path = malloc(dl + strlen(name) + 2))) break;
        sprintf(w->shards[i].path, "%s/%s", dir, name);
    }
    if (!w->dir || !w->shards[nshards - 1].path) {
        tide_stw_abort(w);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    }
    *out = w;
    return 0;
}

int tide_stw_open_file(const char *path, tide_stw **out, tide_status *st) {
    *out = NULL;
    tide_stw *w = NULL;
    if (writer_new(1, &w, st) != 0) return -1;
    w->final_path = strdup(path);
    w->shards[0].path = malloc(strlen(path) + sizeof ".tmp");
    if (!w->final_path || !w->shards[0].path) {
        tide_stw_abort(w);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    }
    sprintf(w->shards[0].path, "%s.tmp", path);
    *out = w;
    return 0;
}

static bool valid_utf8(const char *s) {
    json_t *j = json_string(s); /* jansson validates UTF-8 */
    json_decref(j);
    return j != NULL;
}

int tide_stw_meta(tide_stw *w, const char *key, const char *value, tide_status *st) {
    if (w->laid_out) return tide_fail(st, TIDE_ERR_INVALID, "writer: metadata '%s' set after the first write", key);
    if (!valid_utf8(key) || !valid_utf8(value))
        return tide_fail(st, TIDE_ERR_INVALID, "writer: metadata key or value is not valid UTF-8");
    for (size_t i = 0; i < w->nmeta; i++) {
        if (strcmp(w->meta_keys[i], key) == 0) {
            char *v = strdup(value);
            if (!v) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
            free(w->meta_vals[i]);
            w->meta_vals[i] = v;
            return 0;
        }
    }
    char **k = realloc(w->meta_keys, (w->nmeta + 1) * sizeof *k);
    if (k) w->meta_keys = k;
    char **v = realloc(w->meta_vals, (w->nmeta + 1) * sizeof *v);
    if (v) w->meta_vals = v;
    if (!k || !v) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    w->meta_keys[w->nmeta] = strdup(key);
    w->meta_vals[w->nmeta] = strdup(value);
    w->nmeta++;
    if (!w->meta_keys[w->nmeta - 1] || !w->meta_vals[w->nmeta - 1])
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    return 0;
}

int tide_stw_add(tide_stw *w, int shard, const char *name, tide_dtype dt, int ndim,
                 const int64_t *shape, tide_status *st) {
    if (w->laid_out)
        return tide_fail(st, TIDE_ERR_INVALID, "writer: tensor '%.200s' declared after the first write", name);
    if (shard < 0 || shard >= w->nshards)
        return tide_fail(st, TIDE_ERR_INVALID, "writer: tensor '%.200s': shard %d of %d", name, shard,
                         w->nshards);
    if (!name[0] || strcmp(name, "__metadata__") == 0 || !valid_utf8(name))
        return tide_fail(st, TIDE_ERR_INVALID, "writer: '%.200s' is not a valid tensor name", name);
    if (lookup(w, name))
        return tide_fail(st, TIDE_ERR_INVALID, "writer: tensor '%.200s' declared twice", name);
    wtensor t = {.dtype = dt, .ndim = ndim, .shard = shard};
    if (tide_dtype_nbytes(dt, ndim, shape, NULL, &t.nbytes, st) != 0)
        return tide_fail_ctx(st, "writer: tensor '%.200s'", name);
    if (ndim > 0) memcpy(t.shape, shape, (size_t)ndim * sizeof *shape);
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 256;
        wtensor *g = realloc(w->t, cap * sizeof *g);
        if (!g) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        w->t = g;
        w->cap = cap;
    }
    if ((w->n + 1) * 2 > w->nslots && grow_slots(w, st) != 0) return -1;
    if (!(t.name = strdup(name))) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    w->t[w->n++] = t;
    *slot_for(w, name) = w->n;
    return 0;
}

/* ---- layout: offsets and headers ---- */

/* Larger elements first, then by name: every tensor starts aligned to its
 * element size (the data region starts 8-aligned), and the order does not
 * depend on the order of declaration. */
static int cmp_layout(const void *a, const void *b) {
    const wtensor *x = *(const wtensor *const *)a, *y = *(const wtensor *const *)b;
    unsigned bx = tide_dtype_bits(x->dtype), by = tide_dtype_bits(y->dtype);
    if (bx != by) return bx > by ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int write_all(int fd, const void *buf, uint64_t n, uint64_t off, const char *path,
                     tide_status *st) {
    const uint8_t *p = buf;
    while (n) {
        size_t chunk = n > ((size_t)1 << 30) ? (size_t)1 << 30 : (size_t)n;
        ssize_t k = pwrite(fd, p, chunk, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return tide_fail(st, TIDE_ERR_IO, "cannot write %s at byte %" PRIu64 ": %s", path, off,
                             k < 0 ? strerror(errno) : "no progress");
        p += k;
        off += (uint64_t)k;
        n -= (uint64_t)k;
    }
    return 0;
}

static json_t *tensor_json(const wtensor *t, uint64_t begin) {
    json_t *shape = json_array();
    for (int i = 0; shape && i < t->ndim; i++) json_array_append_new(shape, json_integer(t->shape[i]));
    json_t *e = json_object();
    json_object_set_new(e, "dtype", json_string(tide_dtype_name(t->dtype)));
    json_object_set_new(e, "shape", shape);
    json_object_set_new(e, "data_offsets",
                        json_pack("[I, I]", (json_int_t)begin, (json_int_t)(begin + t->nbytes)));
    return e;
}

/* Builds the header JSON of one shard (its tensors in layout order, offsets
 * relative to the data region) into a malloc'd, space-padded buffer. */
static int shard_header(const tide_stw *w, wtensor **ts, size_t k, char **out, size_t *len,
                        tide_status *st) {
    json_t *root = json_object(), *meta = json_object();
    if (root && meta) {
        json_object_set_new(meta, "format", json_string("pt"));
        for (size_t i = 0; i < w->nmeta; i++)
            json_object_set_new(meta, w->meta_keys[i], json_string(w->meta_vals[i]));
        json_object_set(root, "__metadata__", meta);
    }
    json_decref(meta);
    uint64_t pos = 0;
    for (size_t i = 0; root && i < k; i++) {
        json_object_set_new(root, ts[i]->name, tensor_json(ts[i], pos));
        pos += ts[i]->nbytes;
    }
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!s) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory building a shard header");
    size_t n = strlen(s), padded = (n + 7) / 8 * 8;
    char *grown = realloc(s, 8 + padded);
    if (!grown) {
        free(s);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory building a shard header");
    }
    *out = grown;
    memmove(*out + 8, *out, n);
    memset(*out + 8 + n, ' ', padded - n);
    for (int i = 0; i < 8; i++) (*out)[i] = (char)((uint64_t)padded >> (8 * i) & 0xff);
    *len = 8 + padded;
    return 0;
}

static int lay_out_shard(tide_stw *w, int s, wtensor **ts, tide_status *st) {
    size_t k = 0;
    for (size_t i = 0; i < w->n; i++)
        if (w->t[i].shard == s) ts[k++] = &w->t[i];
    qsort(ts, k, sizeof *ts, cmp_layout);
    char *hdr = NULL;
    size_t len = 0;
    if (shard_header(w, ts, k, &hdr, &len, st) != 0) return -1;
    uint64_t pos = len;
    for (size_t i = 0; i < k; i++) {
        ts[i]->offset = pos;
        pos += ts[i]->nbytes;
    }
    wshard *sh = &w->shards[s];
    sh->fd = open(sh->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = sh->fd < 0 ? tide_fail(st, TIDE_ERR_IO, "cannot create %s: %s", sh->path, strerror(errno))
                        : write_all(sh->fd, hdr, len, 0, sh->path, st);
    free(hdr);
    return rc;
}

/* The index is what makes a directory a checkpoint: an old one goes before
 * any shard is overwritten, so a crash cannot pair it with new shards. */
static int drop_old_index(const tide_stw *w, tide_status *st) {
    char *path = malloc(strlen(w->dir) + sizeof "/" TIDE_ST_INDEX_NAME);
    if (!path) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    sprintf(path, "%s/" TIDE_ST_INDEX_NAME, w->dir);
    int rc = 0;
    if (unlink(path) != 0 && errno != ENOENT)
        rc = tide_fail(st, TIDE_ERR_IO, "cannot remove the old %s: %s", path, strerror(errno));
    free(path);
    return rc;
}

static int lay_out(tide_stw *w, tide_status *st) {
    if (w->broken)
        return tide_fail(st, TIDE_ERR_INVALID, "writer: stopped by an earlier error creating the shards");
    if (w->laid_out) return 0;
    w->laid_out = true; /* declarations are frozen from here */
    wtensor **ts = NULL;
    int rc = w->dir ? drop_old_index(w, st) : 0;
    if (rc == 0 && !(ts = malloc((w->n ? w->n : 1) * sizeof *ts)))
        rc = tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    for (int s = 0; rc == 0 && s < w->nshards; s++) rc = lay_out_shard(w, s, ts, st);
    free(ts);
    w->broken = rc != 0;
    return rc;
}

/* ---- data ---- */

int tide_stw_write_part(tide_stw *w, const char *name, uint64_t offset, const void *data,
                        uint64_t nbytes, tide_status *st) {
    wtensor *t = lookup(w, name);
    if (!t) return tide_fail(st, TIDE_ERR_INVALID, "writer: tensor '%.200s' was never declared", name);
    if (offset != t->written)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "writer: tensor '%.200s': chunk at byte %" PRIu64 " but %" PRIu64
                         " bytes were written so far (chunks go in order)",
                         name, offset, t->written);
    if (nbytes > t->nbytes - t->written)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "writer: tensor '%.200s': %" PRIu64 " more bytes would exceed its %" PRIu64,
                         name, nbytes, t->nbytes);
    if (lay_out(w, st) != 0) return -1;
    const wshard *sh = &w->shards[t->shard];
    if (write_all(sh->fd, data, nbytes, t->offset + offset, sh->path, st) != 0) return -1;
    t->written += nbytes;
    return 0;
}

int tide_stw_write(tide_stw *w, const char *name, const void *data, uint64_t nbytes,
                   tide_status *st) {
    const wtensor *t = lookup(w, name);
    if (t && (t->written || nbytes != t->nbytes))
        return tide_fail(st, TIDE_ERR_INVALID,
                         "writer: tensor '%.200s': %s%" PRIu64 " bytes given, %" PRIu64 " expected",
                         name, t->written ? "written twice; " : "", nbytes, t->nbytes);
    return tide_stw_write_part(w, name, 0, data, nbytes, st);
}

/* ---- finish ---- */

static int cmp_wname(const void *a, const void *b) {
    return strcmp((*(const wtensor *const *)a)->name, (*(const wtensor *const *)b)->name);
}

static int write_index(const tide_stw *w, tide_status *st) {
    wtensor **ts = malloc((w->n ? w->n : 1) * sizeof *ts);
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    int rc = 0;
    if (!ts || !root || !meta || !map) rc = tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    uint64_t total = 0;
    for (size_t i = 0; rc == 0 && i < w->n; i++) {
        ts[i] = &w->t[i];
        total += w->t[i].nbytes;
    }
    if (rc == 0) {
        qsort(ts, w->n, sizeof *ts, cmp_wname);
        for (size_t i = 0; i < w->n; i++) {
            const char *path = w->shards[ts[i]->shard].path;
            json_object_set_new(map, ts[i]->name, json_string(strrchr(path, '/') + 1));
        }
        json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
        json_object_set(root, "metadata", meta);
        json_object_set(root, "weight_map", map);
    }
    size_t dl = strlen(w->dir);
    char *tmp = malloc(dl + sizeof "/" TIDE_ST_INDEX_NAME ".tmp");
    char *final = malloc(dl + sizeof "/" TIDE_ST_INDEX_NAME);
    if (rc == 0 && (!tmp || !final)) rc = tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    if (rc == 0) {
        sprintf(tmp, "%s/" TIDE_ST_INDEX_NAME ".tmp", w->dir);
        sprintf(final, "%s/" TIDE_ST_INDEX_NAME, w->dir);
        if (json_dump_file(root, tmp, JSON_INDENT(2)) != 0)
            rc = tide_fail(st, TIDE_ERR_IO, "cannot write %s", tmp);
        else if (rename(tmp, final) != 0)
            rc = tide_fail(st, TIDE_ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    }
    free(tmp);
    free(final);
    json_decref(meta);
    json_decref(map);
    json_decref(root);
    free(ts);
    return rc;
}

static int close_shards(tide_stw *w, tide_status *st) {
    int rc = 0;
    for (int s = 0; s < w->nshards; s++) {
        wshard *sh = &w->shards[s];
        if (sh->fd >= 0 && close(sh->fd) != 0 && rc == 0)
            rc = tide_fail(st, TIDE_ERR_IO, "cannot close %s: %s", sh->path, strerror(errno));
        sh->fd = -1;
    }
    return rc;
}

int tide_stw_finish(tide_stw *w, tide_status *st) {
    int rc = lay_out(w, st);
    for (size_t i = 0; rc == 0 && i < w->n; i++) {
        const wtensor *t = &w->t[i];
        if (t->written != t->nbytes)
            rc = tide_fail(st, TIDE_ERR_INVALID,
                           "writer: tensor '%.200s' got %" PRIu64 " of its %" PRIu64 " bytes", t->name,
                           t->written, t->nbytes);
    }
    if (rc == 0) rc = close_shards(w, st);
    if (rc == 0 && w->dir) rc = write_index(w, st);
    if (rc == 0 && w->final_path && rename(w->shards[0].path, w->final_path) != 0)
        rc = tide_fail(st, TIDE_ERR_IO, "cannot rename %s to %s: %s", w->shards[0].path,
                       w->final_path, strerror(errno));
    tide_stw_abort(w);
    return rc;
}

void tide_stw_abort(tide_stw *w) {
    if (!w) return;
    close_shards(w, NULL);
    if (w->final_path && w->laid_out) unlink(w->shards[0].path); /* gone already after a rename */
    for (int s = 0; s < w->nshards; s++) free(w->shards[s].path);
    free(w->shards);
    for (size_t i = 0; i < w->n; i++) free(w->t[i].name);
    free(w->t);
    free(w->slots);
    for (size_t i = 0; i < w->nmeta; i++) {
        free(w->meta_keys[i]);
        free(w->meta_vals[i]);
    }
    free(w->meta_keys);
    free(w->meta_vals);
    free(w->dir);
    free(w->final_path);
    free(w);
}
