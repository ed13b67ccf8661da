/* Safetensors checkpoints: a validating, mmap-based reader and a streaming
 * writer, both for one file or for a sharded checkpoint directory
 * (model-00001-of-00048.safetensors ... + model.safetensors.index.json).
 *
 * File layout (docs/checkpoint-io.md has the details):
 *   u64 little-endian N | N bytes of JSON header | data region
 * The header maps each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} (offsets relative to the data region) and may hold a
 * "__metadata__" object of string -> string.
 *
 * Reading
 *     tide_st *ck;
 *     if (tide_st_open("/models/v41", &ck, &st) != 0) { ... st.msg ... }
 *     const tide_tensor *t = tide_st_find(ck, "embed.weight");
 *     for (size_t i = 0; i < tide_st_count(ck); i++) { tide_st_at(ck, i)->name ... }
 *     tide_st_close(ck);
 * Every shard is mapped read-only for the lifetime of the tide_st; tensor
 * data pointers stay valid until tide_st_close. Everything in the headers and
 * the index is checked at open (see tide_st_parse_header), so a tensor that
 * tide_st_find returns is always fully inside its file.
 *
 * Alignment: files written by tide (and by the official safetensors library)
 * keep every tensor aligned to its element size, but a foreign file need not;
 * read elements of `data` with memcpy unless tide_tensor_aligned() says so.
 *
 * F4 (torch float4_e2m1fn_x2): the shape counts 4-bit values, two per byte,
 * low nibble = even element. A weight stored as [out, in/2] bytes is declared
 * [out, in]; nelem counts values, nbytes = nelem / 2 (nelem must be even).
 *
 * Writing, with memory bounded by one tensor (or one chunk of one):
 *     tide_stw *w;
 *     tide_stw_open(dir, 48, &w, &st);                 // or tide_stw_open_file(path, ...)
 *     tide_stw_add(w, shard, name, TIDE_DT_BF16, 2, shape, &st);  // declare all first
 *     ...
 *     tide_stw_write(w, name, bytes, nbytes, &st);     // any order, one tensor at a time
 *     tide_stw_finish(w, &st);                         // index.json; frees w
 * On any failure after open, call tide_stw_abort(w) (frees w; partial shards
 * stay on disk but no index is written, and an index already in the
 * directory is removed before the first shard is touched).
 *
 * A tide_st is never modified after open: any number of threads may read it. */
#ifndef TIDE_IO_SAFETENSORS_H
#define TIDE_IO_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* ---- dtypes ---- */

typedef enum tide_dtype {
    TIDE_DT_F32 = 0,
    TIDE_DT_BF16,
    TIDE_DT_F16,
    TIDE_DT_F8_E4M3,
    TIDE_DT_F8_E8M0,
    TIDE_DT_F4, /* e2m1, two values per byte */
    TIDE_DT_I32,
    TIDE_DT_I64,
    TIDE_DT_U8,
    /* Accepted so that foreign files open; tide's model does not use them. */
    TIDE_DT_F64,
    TIDE_DT_F8_E5M2,
    TIDE_DT_I8,
    TIDE_DT_I16,
    TIDE_DT_U16,
    TIDE_DT_U32,
    TIDE_DT_U64,
    TIDE_DT_BOOL,
    TIDE_DT_COUNT
} tide_dtype;

#define TIDE_DT_ANY ((tide_dtype) - 1) /* wildcard for tide_st_expect */

/* The safetensors spelling ("F32", "BF16", "F8_E4M3", "F4", ...); "?" if out of range. */
const char *tide_dtype_name(tide_dtype dt);
/* Parses a safetensors dtype string; -1 (no status: callers word the error) if unknown. */
int tide_dtype_from_name(const char *name, tide_dtype *out);
/* Bits per element: 4 for F4, 8 for F8_*, U8, I8, BOOL, 16, 32, 64 for the rest. 0 if out of range. */
unsigned tide_dtype_bits(tide_dtype dt);
/* Byte size of a tensor of this dtype and shape, with overflow checks; fails
 * (TIDE_ERR_FORMAT) on negative dims, on more than TIDE_ST_MAX_DIMS dims, on
 * sizes past 2^62 bytes and on an odd element count for F4. nelem may be NULL. */
int tide_dtype_nbytes(tide_dtype dt, int ndim, const int64_t *shape, uint64_t *nelem,
                      uint64_t *nbytes, tide_status *st);

/* ---- reader ---- */

#define TIDE_ST_MAX_DIMS 8
/* Header JSON larger than this is refused (the official library uses 100 MB too). */
#define TIDE_ST_MAX_HEADER ((uint64_t)100000000)

typedef struct tide_tensor {
    const char *name;
    tide_dtype dtype;
    int ndim;
    int64_t shape[TIDE_ST_MAX_DIMS]; /* entries past ndim are 0 */
    uint64_t nelem;                  /* product of shape (F4: 4-bit values) */
    uint64_t nbytes;
    const void *data;   /* inside the read-only mapping; NULL only from tide_st_parse_header */
    uint64_t offset;    /* absolute byte offset of data within its file */
    const char *file;   /* shard file name without directory, e.g. "model-00003-of-00048.safetensors" */
} tide_tensor;

typedef struct tide_st tide_st;

/* Opens a checkpoint: `path` is either one .safetensors file, or a directory
 * holding model.safetensors.index.json (every shard it names is opened) or,
 * failing that, a single model.safetensors. Validates everything (see
 * tide_st_parse_header; for an index also: the weight_map is an object of
 * string -> shard file, every shard exists, every named tensor is in the
 * named shard, every tensor of every shard is in the weight_map with that
 * shard). On failure *out is NULL and st says which file and tensor. */
int tide_st_open(const char *path, tide_st **out, tide_status *st);
void tide_st_close(tide_st *ck); /* NULL is fine */

/* All tensors, sorted by name (strcmp order). */
size_t tide_st_count(const tide_st *ck);
const tide_tensor *tide_st_at(const tide_st *ck, size_t i); /* NULL if i >= count */
/* Binary search by name; NULL if absent. */
const tide_tensor *tide_st_find(const tide_st *ck, const char *name);
/* Find + check in one step, for weight binding: fails with TIDE_ERR_MISSING if
 * absent, TIDE_ERR_FORMAT if dtype (unless TIDE_DT_ANY) or shape (unless
 * shape is NULL) differ, with a message naming the tensor, file, expected and
 * found values. */
int tide_st_expect(const tide_st *ck, const char *name, tide_dtype dt, int ndim,
                   const int64_t *shape, const tide_tensor **out, tide_status *st);

/* Shards, in the order the index first names them (one for a single file). */
size_t tide_st_nfiles(const tide_st *ck);
const char *tide_st_file_name(const tide_st *ck, size_t i); /* base name */
uint64_t tide_st_total_bytes(const tide_st *ck);            /* sum of tensor nbytes */
/* A "__metadata__" value; the first shard that has the key wins. NULL if absent. */
const char *tide_st_meta(const tide_st *ck, const char *key);

/* True when data is aligned to the element size (to 1 byte for F4/8-bit). */
bool tide_tensor_aligned(const tide_tensor *t);
/* Formats "[7168, 4096]" into buf (always NUL-terminated). Returns buf. */
char *tide_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap);

/* ---- header parser (in memory; the fuzz target's entry point) ---- */

typedef struct tide_st_header {
    char *file;           /* copy of the label; tensors[i].file points here */
    uint64_t header_len;  /* N, the JSON length */
    uint64_t data_start;  /* 8 + N: where the data region begins in the file */
    uint64_t data_size;   /* file_size - data_start */
    size_t ntensors;
    tide_tensor *tensors; /* sorted by name; data NULL; offset absolute; file = label */
    size_t nmeta;
    char **meta_keys;     /* "__metadata__" entries, in file order */
    char **meta_vals;
} tide_st_header;

/* Parses and validates the header of one safetensors file. `buf` holds the
 * first `len` bytes of a file of `file_size` bytes (len <= file_size; it must
 * cover the 8-byte length and the JSON or the call fails as truncated).
 * `label` names the file in messages ("x.safetensors: tensor 'a': ...").
 * Checks: N sane (>= 2, <= TIDE_ST_MAX_HEADER, 8 + N <= file_size), the JSON
 * is one object (trailing spaces allowed), no duplicate keys, every entry but
 * "__metadata__" is an object with a known "dtype" string, a "shape" array of
 * at most TIDE_ST_MAX_DIMS non-negative integers and "data_offsets" of two
 * non-negative integers begin <= end, end inside the data region, end - begin
 * == the size the dtype and shape imply, and the tensors tile the data region
 * exactly (no overlap, no gap, nothing left over: as the official library
 * requires). "__metadata__" must map strings to strings. */
int tide_st_parse_header(const uint8_t *buf, size_t len, uint64_t file_size, const char *label,
                         tide_st_header **out, tide_status *st);
void tide_st_header_free(tide_st_header *h); /* NULL is fine */

/* ---- streaming writer ---- */

typedef struct tide_stw tide_stw;

/* A sharded checkpoint in `dir` (created if missing): nshards >= 1 files named
 * model-%05d-of-%05d.safetensors plus model.safetensors.index.json. */
int tide_stw_open(const char *dir, int nshards, tide_stw **out, tide_status *st);
/* One file at `path`, no index (tensors must be added to shard 0). It is
 * written as `path`.tmp and renamed to `path` by a successful finish. */
int tide_stw_open_file(const char *path, tide_stw **out, tide_status *st);
/* A "__metadata__" entry written into every shard header; "format": "pt" is
 * always present (the official loaders expect it). Before the first write. */
int tide_stw_meta(tide_stw *w, const char *key, const char *value, tide_status *st);
/* Declares a tensor in shard `shard` (0-based). All tensors are declared
 * before the first write; names are unique. Within a shard, tensors are laid
 * out by decreasing element size, then by name, so every one is aligned. */
int tide_stw_add(tide_stw *w, int shard, const char *name, tide_dtype dt, int ndim,
                 const int64_t *shape, tide_status *st);
/* Writes all nbytes of a declared tensor (nbytes must equal its size). The
 * first write creates the shard files and writes their headers. Tensors may
 * come in any order, each exactly once. */
int tide_stw_write(tide_stw *w, const char *name, const void *data, uint64_t nbytes,
                   tide_status *st);
/* Writes part of a tensor: the chunks of one tensor must arrive in order
 * (offset == bytes already written), so a producer can stream a huge tensor. */
int tide_stw_write_part(tide_stw *w, const char *name, uint64_t offset, const void *data,
                        uint64_t nbytes, tide_status *st);
/* Checks that every declared tensor was written in full, writes the index
 * (sharded mode: {"metadata": {"total_size": N}, "weight_map": {...}}),
 * closes the files and frees w, whether it succeeds or not. */
int tide_stw_finish(tide_stw *w, tide_status *st);
/* Frees w after a failure: shards written so far stay on disk (without an
 * index); a single file's .tmp is removed. NULL is fine. */
void tide_stw_abort(tide_stw *w);

/* The shard file name the writer uses: "model-00001-of-00048.safetensors"
 * for shard 0 of 48. buf needs 48 bytes. */
void tide_st_shard_name(int shard, int nshards, char *buf, size_t cap);

#endif
