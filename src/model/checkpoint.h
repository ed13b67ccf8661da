/* The checks that decide whether a checkpoint directory can be loaded,
 * written once and run in the same order by tide_model_load (so tide run,
 * serve and bench) and by tide inspect, so the two never disagree:
 *
 *   1. tide_ckpt_check_dir   the path is a directory (DIR/config.json or a
 *                            shard given instead gets a message saying so);
 *   2. tide_config_load      DIR/config.json: every field, the consistency
 *                            checks and the forward pass's limits
 *                            (tide_config_check), messages naming the field;
 *   3. tide_st_open          the index and every shard it names (regular
 *                            files only; headers validated);
 *   4. tide_manifest_build + tide_manifest_verify
 *                            every tensor the config calls for, with its
 *                            dtype and shape, and no other text tensor;
 *   5. tide_ckpt_engram      the engram token map and tables.
 *
 * Only tide_model_load then refuses a checkpoint written with --layers
 * (inspect verifies what is there and reports it PARTIAL). */
#ifndef TIDE_MODEL_CHECKPOINT_H
#define TIDE_MODEL_CHECKPOINT_H

#include "base/status.h"
#include "model/config.h"
#include "model/engram.h"

/* Fails unless path names a directory. */
int tide_ckpt_check_dir(const char *path, tide_status *st);

/* Where a checkpoint's engram token map comes from. */
typedef enum tide_tokmap_source {
    TIDE_TOKMAP_NONE = 0,  /* the config has no engram layers */
    TIDE_TOKMAP_TOKENIZER, /* DIR/tokenizer.json */
    TIDE_TOKMAP_SYNTHETIC, /* tide's stand-in, as config.json's tide_synthetic record says */
} tide_tokmap_source;

/* The engram tables of cfg (nothing when it has no engram layers). The
 * token map is DIR/tokenizer.json's, which is then required, unless the
 * config records that tide synth wrote the checkpoint without a tokenizer
 * (tide_synthetic.engram_token_map = "synthetic"): a missing tokenizer.json
 * never silently switches to the stand-in map, which hashes differently.
 * *has_tables is set when *t was filled (free it with
 * tide_engram_tables_free); *source may be NULL. */
int tide_ckpt_engram(const char *dir, const tide_config *cfg, tide_engram_tables *t, int *has_tables,
                     tide_tokmap_source *source, tide_status *st);

#endif
