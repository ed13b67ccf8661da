/* tide synth's engine: manifest -> random values -> quantised bytes ->
 * sharded safetensors, one row slab at a time (see synth.h). */
#include "model/synth.h"

#include "base/fs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "base/threadpool.h"
#include "io/safetensors.h"
#include "model/engram.h"
#include "model/gen_config.h"
#include "num/num.h"

/* Elements per slab: a write holds ~8 bytes per element (~32 MiB) whatever the shape. */
#define SLAB_ELEMS ((size_t)1 << 22)

/* ---------------------------------------------------------------- values */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001B3ull;
    return h;
}

void tide_synth_values(uint64_t seed, const tide_manifest_entry *e, uint64_t first, size_t n, float *out) {
    if (e->kind == TIDE_WK_SCALE) return;
    uint64_t key = mix64(seed ^ mix64(name_hash(e->name)));
    /* Uniform of unit variance: (u - 1/2) * sqrt(12), |value| <= sqrt(3). */
    const float k = 3.4641016f * e->init_std;
    for (size_t i = 0; i < n; i++) {
        uint64_t h = mix64(key + (first + i) * 0x9E3779B97F4A7C15ull);
        float u = (float)(h >> 40) * (1.0f / 16777216.0f);
        out[i] = e->init_mean + k * (u - 0.5f);
    }
}

/* ---------------------------------------------------------------- slabs */

typedef struct slab_bufs {
    float *f;
    uint8_t *q;
    uint8_t *s;
} slab_bufs;

/* rows x cols of a 1-D or 2-D entry. */
static void rows_cols(const tide_manifest_entry *e, int64_t *rows, int64_t *cols) {
    if (e->ndim == 1) {
        *rows = 1;
        *cols = e->shape[0];
    } else {
        *rows = e->shape[0];
        *cols = e->shape[1];
    }
}

/* Rows per slab: a multiple of 32 for quantised kinds (block rows). */
static int64_t slab_rows(const tide_manifest_entry *e, int64_t cols) {
    int64_t r = (int64_t)(SLAB_ELEMS / (size_t)(cols > 0 ? cols : 1));
    if (e->kind == TIDE_WK_FP8_WEIGHT) r = r / 32 * 32;
    return r < 32 ? (e->kind == TIDE_WK_PLAIN ? (r < 1 ? 1 : r) : 32) : r;
}

typedef struct synth_ctx {
    tide_stw *w;
    tide_pool *pool;
    uint64_t seed;
    uint64_t done, total;
    int progress;
    slab_bufs b;
    tide_status *st;
} synth_ctx;

static int put(synth_ctx *c, const char *name, uint64_t off, const void *data, uint64_t n) {
    if (tide_stw_write_part(c->w, name, off, data, n, c->st) != 0) return -1;
    c->done += n;
    if (c->progress) tide_progress("synth", c->done, c->total);
    return 0;
}

/* Bytes of weight and of scale that rows [0, r) of a slab occupy (r a
 * multiple of 32 for FP8 weights, whose scales cover 32-row blocks). */
static void row_bytes(const tide_manifest_entry *e, int64_t r, int64_t cols, uint64_t *wb, uint64_t *sb) {
    uint64_t n = (uint64_t)r * (uint64_t)cols;
    switch (e->kind) {
    case TIDE_WK_FP8_WEIGHT:
        *wb = n;
        *sb = (uint64_t)((r + 31) / 32) * (uint64_t)((cols + 31) / 32);
        break;
    case TIDE_WK_FP4_WEIGHT:
        *wb = n / 2;
        *sb = n / 32;
        break;
    case TIDE_WK_ENGRAM_TABLE:
        *wb = n;
        *sb = n / 32;
        break;
    default:
        *wb = n * (e->dtype == TIDE_DT_F32 ? 4 : 2);
        *sb = 0;
    }
}

/* Rows [a, b) of the slab that starts at row r0: values, then encoding. */
static void encode_rows(const tide_manifest_entry *e, uint64_t seed, int64_t r0, int64_t a, int64_t b, int64_t cols,
                        const slab_bufs *buf) {
    size_t n = (size_t)((b - a) * cols);
    float *f = buf->f + (size_t)(a * cols);
    uint64_t wo, so;
    row_bytes(e, a, cols, &wo, &so);
    uint8_t *q = buf->q + wo, *s = buf->s + so;
    tide_synth_values(seed, e, (uint64_t)((r0 + a) * cols), n, f);
    switch (e->kind) {
    case TIDE_WK_FP8_WEIGHT: tide_quant_fp8_weight(f, (size_t)(b - a), (size_t)cols, q, s); break;
    case TIDE_WK_FP4_WEIGHT: tide_quant_fp4_weight(f, (size_t)(b - a), (size_t)cols, q, s); break;
    case TIDE_WK_ENGRAM_TABLE: tide_quant_fp8_act(f, n, 32, q, s); break;
    default:
        if (e->dtype == TIDE_DT_F32) {
            memcpy(q, f, n * 4);
        } else {
            for (size_t i = 0; i < n; i++) {
                uint16_t h = tide_f32_to_bf16(f[i]);
                memcpy(q + 2 * i, &h, 2);
            }
        }
    }
}

typedef struct slab_job {
    const tide_manifest_entry *e;
    uint64_t seed;
    int64_t r0, nr, cols, per_task;
    const slab_bufs *buf;
} slab_job;

static void slab_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const slab_job *j = arg;
    int64_t a = task * j->per_task, b = a + j->per_task < j->nr ? a + j->per_task : j->nr;
    if (a < b) encode_rows(j->e, j->seed, j->r0, a, b, j->cols, j->buf);
}

/* One tensor (and, for quantised kinds, its scale entry s), slab by slab;
 * the rows of a slab are encoded in parallel, written in order. */
static int write_tensor(synth_ctx *c, const tide_manifest_entry *e, const tide_manifest_entry *s) {
    int64_t rows, cols;
    rows_cols(e, &rows, &cols);
    int64_t R = slab_rows(e, cols), unit = e->kind == TIDE_WK_FP8_WEIGHT ? 32 : 1;
    uint64_t woff = 0, soff = 0;
    for (int64_t r0 = 0; r0 < rows; r0 += R) {
        int64_t nr = rows - r0 < R ? rows - r0 : R;
        int64_t units = (nr + unit - 1) / unit, tasks = 4 * (int64_t)tide_pool_size(c->pool);
        if (tasks > units) tasks = units;
        slab_job j = {e, c->seed, r0, nr, cols, (units + tasks - 1) / tasks * unit, &c->b};
        tide_pool_for(c->pool, (nr + j.per_task - 1) / j.per_task, slab_task, &j);
        uint64_t wb, sb;
        row_bytes(e, nr, cols, &wb, &sb);
        if (put(c, e->name, woff, c->b.q, wb) || (s && put(c, s->name, soff, c->b.s, sb))) return -1;
        woff += wb;
        soff += sb;
    }
    return 0;
}

/* ---------------------------------------------------------------- files */

int tide_synth_default_shards(uint64_t total_bytes, size_t n_tensors) {
    uint64_t n = total_bytes / ((uint64_t)4 << 30) + 1;
    if (n < 2) n = 2;
    if (n > 48) n = 48;
    if (n > n_tensors) n = n_tensors ? n_tensors : 1;
    return (int)n;
}

/* Shard of each entry: consecutive runs of about total/nshards bytes, a
 * weight and its scale kept together, and no shard left empty unless there
 * are about as many shards as tensors. */
static void assign_shards(const tide_manifest *m, int nshards, int *shard) {
    uint64_t cum = 0;
    int k = 0;
    for (size_t i = 0; i < m->n; i++) {
        int must_advance = (size_t)(nshards - 1 - k) >= m->n - i && k < nshards - 1 && i > 0;
        int over = k < nshards - 1 && (double)cum >= (double)m->total_bytes * (k + 1) / nshards;
        if ((must_advance || over) && m->e[i].kind != TIDE_WK_SCALE) k++;
        shard[i] = k;
        cum += m->e[i].nbytes;
    }
}

static int copy_file(const char *src, const char *dst, tide_status *st) {
    FILE *in = tide_fopen_regular(src, st);
    if (!in) return -1;
    FILE *out = fopen(dst, "wb");
    if (!out) {
        fclose(in);
        return tide_fail(st, TIDE_ERR_IO, "%s: cannot create: %s", dst, strerror(errno));
    }
    char buf[65536];
    size_t n;
    int bad = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) bad = 1;
    bad |= ferror(in);
    fclose(in);
    bad |= fclose(out) != 0;
    if (bad) return tide_fail(st, TIDE_ERR_IO, "copying %s to %s failed", src, dst);
    return 0;
}

static int copy_tokenizer(const char *tok, const char *dir, tide_status *st) {
    char dst[4096], side[4096], sdst[4096];
    snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
    if (copy_file(tok, dst, st)) return -1;
    /* A tokenizer_config.json beside it travels too (HF loaders read both). */
    const char *slash = strrchr(tok, '/');
    int dlen = slash ? (int)(slash - tok) : 1;
    snprintf(side, sizeof side, "%.*s/tokenizer_config.json", dlen, slash ? tok : ".");
    struct stat sb;
    if (stat(side, &sb) == 0 && S_ISREG(sb.st_mode)) {
        snprintf(sdst, sizeof sdst, "%s/tokenizer_config.json", dir);
        if (copy_file(side, sdst, st)) return -1;
    }
    return 0;
}

static int declare_all(tide_stw *w, const tide_manifest *m, const int *shard, tide_status *st) {
    for (size_t i = 0; i < m->n; i++) {
        const tide_manifest_entry *e = &m->e[i];
        if (tide_stw_add(w, shard[i], e->name, e->dtype, e->ndim, e->shape, st)) return -1;
    }
    return 0;
}

static int write_all(synth_ctx *c, const tide_manifest *m) {
    for (size_t i = 0; i < m->n; i++) {
        const tide_manifest_entry *e = &m->e[i];
        int rc;
        if (e->kind == TIDE_WK_PLAIN) rc = write_tensor(c, e, NULL);
        else if (e->kind == TIDE_WK_SCALE) rc = 0; /* written with its weight */
        else if (i + 1 < m->n && m->e[i + 1].kind == TIDE_WK_SCALE) rc = write_tensor(c, e, &m->e[i + 1]);
        else rc = tide_fail(c->st, TIDE_ERR_INTERNAL, "manifest: %s has no scale after it", e->name);
        if (rc) return -1;
    }
    return 0;
}

static int write_tensors(const tide_manifest *m, const tide_synth_opts *o, int nshards, tide_status *st) {
    int *shard = malloc(sizeof(int) * (m->n ? m->n : 1));
    synth_ctx c = {.seed = o->seed, .total = m->total_bytes, .progress = o->progress, .st = st};
    size_t elems = SLAB_ELEMS; /* a slab of very wide rows may exceed SLAB_ELEMS */
    for (size_t i = 0; i < m->n; i++) {
        int64_t rows, cols;
        rows_cols(&m->e[i], &rows, &cols);
        size_t need = (size_t)(slab_rows(&m->e[i], cols) * cols);
        if (need > elems) elems = need;
    }
    c.b.f = malloc(elems * sizeof(float) + 128);
    c.b.q = malloc(elems * sizeof(float) + 128);
    c.b.s = malloc(elems / 16 + 128);
    int rc = -1;
    if (!shard || !c.b.f || !c.b.q || !c.b.s) {
        tide_fail(st, TIDE_ERR_NOMEM, "synth: out of memory");
        goto out;
    }
    if (o->threads > 1 && tide_pool_create(o->threads, &c.pool, st)) goto out;
    assign_shards(m, nshards, shard);
    if (tide_stw_open(o->out_dir, nshards, &c.w, st)) goto out;
    if (tide_stw_meta(c.w, "tide_synthetic", o->shape ? o->shape : "custom", st) || declare_all(c.w, m, shard, st) ||
        write_all(&c, m)) {
        tide_stw_abort(c.w);
        goto out;
    }
    rc = tide_stw_finish(c.w, st);
out:
    tide_pool_destroy(c.pool);
    free(shard);
    free(c.b.f);
    free(c.b.q);
    free(c.b.s);
    return rc;
}

/* The engram hash multipliers derive from the size of the tokenizer's
 * compressed vocabulary, so a checkpoint that ships a tokenizer must record
 * that tokenizer's size, not the released one (the reference asserts it). */
static int match_tokenizer(tide_config *cfg, const char *tok, tide_status *st) {
    if (!tok || cfg->text.n_engram_layer_ids == 0) return 0;
    tide_engram_token_map map;
    if (tide_engram_token_map_from_tokenizer_json(tok, &map, st))
        return tide_fail_ctx(st, "engram token map of the tokenizer");
    cfg->text.engram_compressed_vocab_size = map.n_compressed;
    tide_engram_token_map_free(&map);
    return 0;
}

int tide_synth_write(const tide_config *cfg_in, const tide_synth_opts *o, tide_synth_report *rep,
                     tide_status *st) {
    tide_synth_report dummy;
    if (!rep) rep = &dummy;
    memset(rep, 0, sizeof *rep);
    if (o->seed >> 63) return tide_fail(st, TIDE_ERR_INVALID, "synth: seed must be below 2^63");
    tide_config *cfg = malloc(sizeof *cfg);
    if (!cfg) return tide_fail(st, TIDE_ERR_NOMEM, "synth: out of memory");
    *cfg = *cfg_in;
    int64_t L = cfg->text.num_hidden_layers;
    if (o->layers < 0 || o->layers > L) {
        free(cfg);
        return tide_fail(st, TIDE_ERR_INVALID, "synth: --layers %d is outside 1..%lld", o->layers, (long long)L);
    }
    cfg->synth.is_synthetic = 1;
    snprintf(cfg->synth.shape, sizeof cfg->synth.shape, "%s", o->shape ? o->shape : "custom");
    cfg->synth.seed = o->seed;
    cfg->synth.written_layers = o->layers ? o->layers : L;
    /* Recorded, so that loading never picks the stand-in map merely because
     * tokenizer.json went missing (model/checkpoint.h). */
    cfg->synth.synthetic_token_map = o->tokenizer == NULL;
    tide_manifest m;
    int rc = -1;
    if (match_tokenizer(cfg, o->tokenizer, st) || tide_config_check(cfg, st) || tide_manifest_build(cfg, &m, st)) {
        free(cfg);
        return -1;
    }
    rep->n_tensors = m.n;
    rep->total_bytes = m.total_bytes;
    rep->nshards = o->nshards > 0 ? o->nshards : tide_synth_default_shards(m.total_bytes, m.n);
    if ((size_t)rep->nshards > m.n) rep->nshards = (int)m.n;
    if (o->dry_run) {
        rc = 0;
        goto out;
    }
    if (tide_mkdir_p(o->out_dir, st) != 0) goto out;
    if (write_tensors(&m, o, rep->nshards, st)) goto out;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", o->out_dir);
    if (tide_config_write_json(cfg, path, st)) goto out;
    /* The tokenizer's ids when the caller looked them up, else the
     * release's: BOS 0, EOS 1 (spec section 1). */
    int32_t bos = o->has_ids ? o->bos_id : 0, eos = o->has_ids ? o->eos_id : 1;
    if (bos < 0 || bos >= cfg->text.vocab_size || eos < 0 || eos >= cfg->text.vocab_size) {
        tide_fail(st, TIDE_ERR_INVALID, "synth: BOS %d / EOS %d outside the vocabulary (%lld)", (int)bos, (int)eos,
                  (long long)cfg->text.vocab_size);
        goto out;
    }
    if (tide_gen_config_write(o->out_dir, bos, &eos, 1, st)) goto out;
    if (o->tokenizer) {
        if (copy_tokenizer(o->tokenizer, o->out_dir, st)) goto out;
        rep->wrote_tokenizer = 1;
    }
    rc = 0;
out:
    tide_manifest_free(&m);
    free(cfg);
    return rc;
}
