/* Synthetic checkpoints: random weights of any shape, written in the release
 * format (sharded safetensors + model.safetensors.index.json + config.json,
 * plus tokenizer.json when one is given), so every loader, test and benchmark
 * can run without the real checkpoint (about 476 GiB at the released shape).
 *
 * Values are reproducible per tensor: element i of tensor NAME is a pure
 * function of (seed, NAME, i) (a counter-based hash, no shared stream), so a
 * test can regenerate any tensor without the others, and writing streams in
 * row slabs with memory bounded by one slab (a few tens of MB) whatever the
 * shape. Quantised tensors are quantised from those values with the
 * reference's rounding (num/num.h). */
#ifndef TIDE_MODEL_SYNTH_H
#define TIDE_MODEL_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/config.h"
#include "model/manifest.h"

typedef struct tide_synth_opts {
    const char *out_dir;   /* created if missing; existing checkpoint files are overwritten */
    const char *shape;     /* recorded in config.json's tide_synthetic.shape */
    uint64_t seed;         /* < 2^63 (stored as a JSON integer) */
    int layers;            /* 0 = all backbone layers; N = only layers 0..N-1 (+ DSpark stages) */
    int nshards;           /* 0 = a default from the size (1 file per ~4 GB, at least 2, at most 48) */
    const char *tokenizer; /* tokenizer.json to copy, or NULL for none; with one, the
                            * config's engram_compressed_vocab_size is set to the size
                            * of this tokenizer's compressed (engram) vocabulary */
    int has_ids;           /* 1: generation_config.json gets bos_id / eos_id (the tokenizer's);
                            * 0: the release's ids, BOS 0 and EOS 1 */
    int32_t bos_id, eos_id;
    int dry_run;           /* compute the manifest and sizes, write nothing */
    int progress;          /* report progress on stderr (tide_progress) */
    int threads;           /* threads that generate and quantise (<= 1: the caller only);
                            * the bytes do not depend on it */
} tide_synth_opts;

typedef struct tide_synth_report {
    size_t n_tensors;
    uint64_t total_bytes;  /* tensor data, all shards */
    int nshards;
    int wrote_tokenizer;
} tide_synth_report;

/* Writes the checkpoint for cfg (a checked config; its synth metadata is set
 * from opts). rep may be NULL. */
int tide_synth_write(const tide_config *cfg, const tide_synth_opts *opts, tide_synth_report *rep,
                     tide_status *st);

/* The unquantised values of elements [first, first + n) (row-major over the
 * declared shape) of a manifest tensor, as synth generates them. For a
 * SCALE entry nothing is generated (its values come from quantising the
 * weight before it). */
void tide_synth_values(uint64_t seed, const tide_manifest_entry *e, uint64_t first, size_t n, float *out);

/* Default shard count for a checkpoint of this many bytes and tensors. */
int tide_synth_default_shards(uint64_t total_bytes, size_t n_tensors);

#endif
