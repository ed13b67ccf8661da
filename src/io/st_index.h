/* model.safetensors.index.json, parsed and checked on its own (the reader
 * then checks it against the shards). Internal to src/io and the fuzzer. */
#ifndef TIDE_IO_ST_INDEX_H
#define TIDE_IO_ST_INDEX_H

#include <stddef.h>

#include "base/status.h"

#define TIDE_ST_INDEX_NAME "model.safetensors.index.json"
/* An index larger than this is refused (the release's is a few MB). */
#define TIDE_ST_MAX_INDEX ((size_t)256 << 20)

typedef struct tide_st_index_entry {
    char *name;
    size_t shard; /* into files[] */
} tide_st_index_entry;

typedef struct tide_st_index {
    size_t n;
    tide_st_index_entry *entries; /* sorted by name */
    size_t nfiles;
    char **files;                 /* distinct shard names, in order of first mention */
} tide_st_index;

/* Checks: one JSON object, "weight_map" an object of tensor name -> shard file
 * name (a plain file name: no '/', not "." or ".."), not empty, no duplicate
 * keys; "metadata", if present, an object (its contents are not used).
 * `label` names the file in messages. */
int tide_st_parse_index(const char *json, size_t len, const char *label, tide_st_index **out,
                        tide_status *st);
void tide_st_index_free(tide_st_index *ix);
/* Binary search; NULL if absent. */
const tide_st_index_entry *tide_st_index_find(const tide_st_index *ix, const char *name);

#endif
