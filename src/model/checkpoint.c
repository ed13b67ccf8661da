/* Loadability checks shared by tide_model_load and tide inspect
 * (model/checkpoint.h). */
#include "model/checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int tide_ckpt_check_dir(const char *path, tide_status *st) {
    struct stat sb;
    if (!path || !*path) return tide_fail(st, TIDE_ERR_INVALID, "no checkpoint directory given");
    if (stat(path, &sb) != 0)
        return tide_fail(st, errno == ENOENT ? TIDE_ERR_MISSING : TIDE_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        const char *slash = strrchr(path, '/');
        int dlen = slash ? (int)(slash - path) : 0;
        return tide_fail(st, TIDE_ERR_INVALID,
                         "%s is not a directory: a checkpoint is the directory holding config.json and the "
                         "safetensors shards (give %.*s)",
                         path, slash ? (dlen ? dlen : 1) : 1, slash ? path : ".");
    }
    return 0;
}

int tide_ckpt_engram(const char *dir, const tide_config *cfg, tide_engram_tables *t, int *has_tables,
                     tide_tokmap_source *source, tide_status *st) {
    *has_tables = 0;
    if (source) *source = TIDE_TOKMAP_NONE;
    const tide_text_config *c = &cfg->text;
    if (c->n_engram_layer_ids == 0) return 0;
    tide_engram_token_map tm;
    memset(&tm, 0, sizeof tm);
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= sizeof path)
        return tide_fail(st, TIDE_ERR_INVALID, "%s: path too long", dir);
    int rc;
    tide_tokmap_source src;
    if (cfg->synth.synthetic_token_map) {
        src = TIDE_TOKMAP_SYNTHETIC;
        rc = tide_engram_token_map_synthetic(c->vocab_size, c->engram_compressed_vocab_size, &tm, st);
    } else {
        struct stat sb;
        if (stat(path, &sb) != 0)
            return tide_fail(st, TIDE_ERR_MISSING,
                             "%s is missing: the engram layers (text_config.engram_layer_ids) hash token ids "
                             "through the tokenizer's compressed vocabulary, so the checkpoint needs its "
                             "tokenizer.json%s",
                             path,
                             cfg->synth.is_synthetic
                                 ? " (tide synth wrote this one with a tokenizer; tide synth --no-tokenizer "
                                   "writes a checkpoint that records tide's synthetic token map instead)"
                                 : "");
        src = TIDE_TOKMAP_TOKENIZER;
        rc = tide_engram_token_map_from_tokenizer_json(path, &tm, st);
    }
    if (rc == 0) rc = tide_engram_tables_build(cfg, &tm, t, st);
    tide_engram_token_map_free(&tm);
    if (rc != 0) return -1;
    *has_tables = 1;
    if (source) *source = src;
    return 0;
}
