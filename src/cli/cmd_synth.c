/* tide synth: write a synthetic checkpoint (random weights, release format)
 * of a named shape. See docs/model-config.md for the shapes. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "cli/cli.h"
#include "model/config.h"
#include "model/synth.h"
#include "text/render.h"
#include "text/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide synth --shape NAME -o DIR [options]\n"
            "\n"
            "Writes a checkpoint with random weights in the release format: sharded\n"
            "safetensors (model-0000K-of-0000N.safetensors + model.safetensors.index.json),\n"
            "config.json (HF form, with a \"tide_synthetic\" record) and tokenizer.json.\n"
            "The same shape and seed always give the same bytes.\n"
            "\n"
            "options:\n"
            "  --shape NAME       tiny | small | flash | flash-ep8 (docs/model-config.md)\n"
            "  -o, --out DIR      output directory (created if missing; files are overwritten)\n"
            "  --seed N           random seed, 0 <= N < 2^63 (default 1)\n"
            "  --layers N         write only backbone layers 0..N-1 (plus the DSpark stages);\n"
            "                     recorded as tide_synthetic.written_layers, such a checkpoint\n"
            "                     can be inspected but not run\n"
            "  --shards N         number of safetensors shards (default: one per ~4 GB, 2..48)\n"
            "  --threads N        threads generating weights (default: the online CPUs, at most\n"
            "                     16); the output does not depend on it\n"
            "  --tokenizer FILE   tokenizer.json to copy into DIR (default: $TIDE_TOKENIZER,\n"
            "                     else the build's stand-in tokenizer if it exists; with\n"
            "                     neither, the checkpoint is written without one and a\n"
            "                     warning is printed)\n"
            "  --vocab N          the model's vocabulary size (default: the shape's, 129280); the\n"
            "                     tokenizer must have at most N ids (tools/make_mini_standin_tokenizer.py\n"
            "                     writes a 16K one)\n"
            "  --no-tokenizer     write no tokenizer.json; the config then records that the\n"
            "                     engram layers use tide's synthetic token map\n"
            "  --no-vision        the reference's text-only layout: no vision_config, no\n"
            "                     image_token_id, no model_type, no ffn.gate.bias_vl\n"
            "  --vision           add a vision tower of the shape's width (the released one for\n"
            "                     flash; docs/vision.md) and its ffn.gate.bias_vl\n"
            "  --dry-run          print the tensor count and size, write nothing\n"
            "  -q, --quiet        no progress on stderr\n"
            "  -h, --help         this text\n"
            "\n"
            "With a tokenizer, the special ids come from it, found by their text: BOS and EOS\n"
            "(generation_config.json), the image placeholder (image_token_id) and <\xef\xbd\x9cSystem\xef\xbd\x9c>\n"
            "(dspark_noise_token_id, as in the release); with the V4.1 tokenizer they are the\n"
            "release's ids.\n"
            "\n"
            "Exit status: 0 written, 1 failed (message on stderr), 2 bad usage.\n");
}

static int parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

static const char *default_tokenizer(void) {
    const char *env = getenv("TIDE_TOKENIZER");
    if (env && *env) return env;
#ifdef TIDE_DEFAULT_TOKENIZER
    struct stat sb;
    if (stat(TIDE_DEFAULT_TOKENIZER, &sb) == 0 && S_ISREG(sb.st_mode)) return TIDE_DEFAULT_TOKENIZER;
#endif
    return NULL;
}

/* The special ids of the checkpoint from its tokenizer, by their text (the
 * one source of truth: a checkpoint with its own tokenizer, tide-mini's
 * 16K one, has its own ids). A token the tokenizer lacks keeps the shape's
 * id, which the config check then refuses if it is outside the vocabulary. */
static int ids_from_tokenizer(const char *path, int64_t vocab, tide_config *cfg, tide_synth_opts *o,
                              tide_status *st) {
    tide_tokenizer *tok;
    if (tide_tokenizer_load(path, &tok, st) != 0) return -1;
    int rc = 0;
    uint32_t n = tide_tokenizer_n_ids(tok);
    if (vocab > 0) cfg->text.vocab_size = vocab;
    if ((int64_t)n > cfg->text.vocab_size) {
        rc = tide_fail(st, TIDE_ERR_INVALID, "the tokenizer %s has %u ids, more than the vocabulary size %lld%s", path,
                       n, (long long)cfg->text.vocab_size, vocab > 0 ? "" : " (give --vocab N)");
    } else {
        int32_t bos = tide_tokenizer_token_id(tok, TIDE_TOK_BOS, strlen(TIDE_TOK_BOS));
        int32_t eos = tide_tokenizer_token_id(tok, TIDE_TOK_EOS, strlen(TIDE_TOK_EOS));
        int32_t sys = tide_tokenizer_token_id(tok, TIDE_TOK_SYSTEM, strlen(TIDE_TOK_SYSTEM));
        int32_t img = tide_tokenizer_token_id(tok, TIDE_CONV_IMAGE_PLACEHOLDER, strlen(TIDE_CONV_IMAGE_PLACEHOLDER));
        o->has_ids = 1;
        o->bos_id = bos >= 0 ? bos : 0;
        o->eos_id = eos >= 0 ? eos : 1;
        if (sys >= 0) cfg->text.dspark_noise_token_id = sys;
        if (img >= 0 && cfg->image_token_id >= 0) cfg->image_token_id = img;
    }
    tide_tokenizer_free(tok);
    return rc;
}

int tide_cmd_synth(int argc, char **argv) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    tide_synth_opts o = {.seed = 1, .progress = 1, .threads = ncpu < 1 ? 1 : ncpu > 16 ? 16 : (int)ncpu};
    const char *tok = NULL;
    int no_tok = 0, no_vision = 0, with_vision = 0;
    int64_t vocab = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return TIDE_EXIT_OK;
        } else if (!strcmp(a, "--shape") && v) o.shape = v, i++;
        else if ((!strcmp(a, "-o") || !strcmp(a, "--out")) && v) o.out_dir = v, i++;
        else if (!strcmp(a, "--tokenizer") && v) tok = v, i++;
        else if (!strcmp(a, "--no-tokenizer")) no_tok = 1;
        else if (!strcmp(a, "--no-vision")) no_vision = 1;
        else if (!strcmp(a, "--vision")) with_vision = 1;
        else if (!strcmp(a, "--dry-run")) o.dry_run = 1;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) o.progress = 0;
        else if (!strcmp(a, "--seed") && v) {
            if (parse_u64(v, &n) || n >> 63) {
                fprintf(stderr, "tide synth: --seed wants an integer in 0..2^63-1, got '%s'\n", v);
                return TIDE_EXIT_USAGE;
            }
            o.seed = n, i++;
        } else if (!strcmp(a, "--vocab") && v) {
            if (parse_u64(v, &n) || n < 16 || n > ((uint64_t)1 << 31) - 1) {
                fprintf(stderr, "tide synth: --vocab wants an integer in 16..2^31-1, got '%s'\n", v);
                return TIDE_EXIT_USAGE;
            }
            vocab = (int64_t)n, i++;
        } else if ((!strcmp(a, "--layers") || !strcmp(a, "--shards") || !strcmp(a, "--threads")) && v) {
            if (parse_u64(v, &n) || n < 1 || n > 100000) {
                fprintf(stderr, "tide synth: %s wants a positive integer, got '%s'\n", a, v);
                return TIDE_EXIT_USAGE;
            }
            if (!strcmp(a, "--layers")) o.layers = (int)n;
            else if (!strcmp(a, "--shards")) o.nshards = (int)n;
            else o.threads = n > 256 ? 256 : (int)n;
            i++;
        } else {
            fprintf(stderr, "tide synth: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return TIDE_EXIT_USAGE;
        }
    }
    if (!o.shape || (!o.out_dir && !o.dry_run)) {
        fprintf(stderr, "tide synth: --shape and -o DIR are required\n\n");
        usage(stderr);
        return TIDE_EXIT_USAGE;
    }
    tide_status st = {0};
    tide_config cfg;
    if (tide_config_preset(o.shape, &cfg, &st)) {
        fprintf(stderr, "tide synth: %s\n", st.msg);
        return TIDE_EXIT_USAGE;
    }
    if (no_vision && with_vision) {
        fprintf(stderr, "tide synth: --vision and --no-vision contradict each other\n");
        return TIDE_EXIT_USAGE;
    }
    if (with_vision && tide_config_preset_vision(o.shape, &cfg, &st)) {
        fprintf(stderr, "tide synth: --vision: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    if (no_vision && tide_config_drop_vision(&cfg, &st)) {
        fprintf(stderr, "tide synth: --no-vision: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    if (o.layers > cfg.text.num_hidden_layers) {
        fprintf(stderr, "tide synth: --layers %d: shape %s has %lld backbone layers\n", o.layers, o.shape,
                (long long)cfg.text.num_hidden_layers);
        return TIDE_EXIT_USAGE;
    }
    if (!no_tok) {
        o.tokenizer = tok ? tok : default_tokenizer();
        if (!o.tokenizer && !o.dry_run)
            fprintf(stderr, "tide synth: warning: no tokenizer (give --tokenizer FILE or set TIDE_TOKENIZER); "
                            "writing the checkpoint without tokenizer.json (its engram layers will use "
                            "tide's synthetic token map, not a real tokenizer's)\n");
    }
    if (vocab && !o.tokenizer) {
        fprintf(stderr, "tide synth: --vocab needs a tokenizer (--tokenizer FILE): the special ids come from it\n");
        return TIDE_EXIT_USAGE;
    }
    if (o.tokenizer && ids_from_tokenizer(o.tokenizer, vocab, &cfg, &o, &st) != 0) {
        fprintf(stderr, "tide synth: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    tide_synth_report rep;
    double t0 = tide_now_seconds();
    if (tide_synth_write(&cfg, &o, &rep, &st)) {
        fprintf(stderr, "tide synth: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    printf("%s %s: shape %s, seed %" PRIu64 ", %d of %lld backbone layers + %lld DSpark stages, "
           "%zu tensors, %" PRIu64 " bytes (%.2f GiB) in %d shards%s",
           o.dry_run ? "would write" : "wrote", o.dry_run ? (o.out_dir ? o.out_dir : "-") : o.out_dir, o.shape,
           o.seed, o.layers ? o.layers : (int)cfg.text.num_hidden_layers, (long long)cfg.text.num_hidden_layers,
           (long long)cfg.text.num_nextn_predict_layers, rep.n_tensors, rep.total_bytes,
           (double)rep.total_bytes / (1024.0 * 1024.0 * 1024.0), rep.nshards,
           rep.wrote_tokenizer ? ", tokenizer.json" : "");
    if (!o.dry_run) printf(" (%.1f s)", tide_now_seconds() - t0);
    printf("\n");
    return TIDE_EXIT_OK;
}
