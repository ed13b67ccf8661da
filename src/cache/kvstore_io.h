/* Batched file I/O for the KV store's shards: one io_uring submission
 * carries every shard of a page (a write and its fsync, linked, per file; or
 * one read per file), with O_DIRECT where the file system allows it (tmpfs
 * does not: those files are opened without it). Buffers must be
 * TIDE_KVS_ALIGN-aligned and their lengths multiples of it.
 *
 * Writes are crash-safe: each file is written under a temporary name,
 * fsynced, renamed to its final name and its directory fsynced, so a file
 * under a final name is always complete (a crash leaves at most temporary
 * files, which the store's gc removes). One thread uses an io at a time. */
#ifndef TIDE_CACHE_KVSTORE_IO_H
#define TIDE_CACHE_KVSTORE_IO_H

#include <liburing.h>
#include <stdint.h>

#include "base/status.h"

typedef struct tide_kvs_io {
    struct io_uring ring;
    int on;
    int no_sync; /* buffered, no fsync (tests, scratch stores): see tide_kvstore_cfg */
} tide_kvs_io;

typedef struct tide_kvs_file {
    const char *tmp, *path, *dir; /* tmp unused for reads */
    uint8_t *buf;
    uint64_t len;                 /* bytes to write / buffer capacity to read */
    int64_t res;                  /* out: bytes written or read, or -errno */
} tide_kvs_file;

int tide_kvs_io_init(tide_kvs_io *io, tide_status *st);
void tide_kvs_io_free(tide_kvs_io *io);

/* At most 32 files per call. res = len for a file now under its final
 * name; a negative errno otherwise (its temporary file removed). */
void tide_kvs_io_write(tide_kvs_io *io, tide_kvs_file *f, int n);
void tide_kvs_io_read(tide_kvs_io *io, tide_kvs_file *f, int n);

/* An aligned buffer of len bytes (zeroed), freed with free(). */
uint8_t *tide_kvs_alloc(uint64_t len);

#endif
