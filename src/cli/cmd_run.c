/* tide run: greedy generation on the CPU backend from token ids.
 *
 *   tide run --model DIR --prompt-ids 0,100,200 [--max-tokens N] [--threads N]
 *
 * Prefills the prompt in one step, then decodes one token per step, printing
 * the generated ids (comma-separated, one line) on stdout and the speed on
 * stderr. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cli/cli.h"
#include "model/forward.h"
#include "model/model.h"

#define TIDE_EOS_ID 1 /* <｜end▁of▁sentence｜> in the V4.1 vocabulary */

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide run --model DIR --prompt-ids ID,ID,... [options]\n"
            "\n"
            "Greedy generation on the CPU backend. Prints the generated token ids on\n"
            "stdout (comma-separated) and the speed on stderr.\n"
            "\n"
            "options:\n"
            "  --model DIR          checkpoint directory (config.json + safetensors)\n"
            "  --prompt-ids LIST    comma-separated token ids (at least one)\n"
            "  --max-tokens N       tokens to generate (default 16)\n"
            "  --threads N          worker threads (default 2)\n"
            "  --ignore-eos         keep going after the end-of-sentence token (id 1)\n"
            "  --chunk N            prefill the prompt in chunks of N tokens (default: one step)\n"
            "  --canonical-layout   attention entry order independent of chunking (docs/model.md)\n"
            "  --no-index-quirk     index keys from each indexer's own source (docs/model.md)\n");
}

static int parse_ids(const char *s, int32_t **out, int64_t *n) {
    int64_t cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < INT32_MIN || x > INT32_MAX || (*end && *end != ',')) {
            free(v);
            return -1;
        }
        if (k == cap) {
            cap *= 2;
            int32_t *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        free(v);
        return -1;
    }
    *out = v;
    *n = k;
    return 0;
}

static int32_t argmax(const float *l, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return (int32_t)b;
}

int tide_cmd_run(int argc, char **argv) {
    const char *model_dir = NULL, *ids_s = NULL;
    long max_tokens = 16, threads = 2, chunk = 0;
    int ignore_eos = 0;
    tide_fwd_opts opts = tide_fwd_default_opts();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return TIDE_EXIT_OK;
        } else if (!strcmp(a, "--model") && v) {
            model_dir = v;
            i++;
        } else if (!strcmp(a, "--prompt-ids") && v) {
            ids_s = v;
            i++;
        } else if ((!strcmp(a, "--max-tokens") || !strcmp(a, "--threads") || !strcmp(a, "--chunk")) && v) {
            char *end;
            errno = 0;
            long x = strtol(v, &end, 10);
            if (*end || errno || x < 0 || x > 1000000) {
                fprintf(stderr, "tide run: %s: '%s' is not a valid count\n", a, v);
                return TIDE_EXIT_USAGE;
            }
            if (!strcmp(a, "--max-tokens")) max_tokens = x;
            else if (!strcmp(a, "--threads")) threads = x;
            else chunk = x;
            i++;
        } else if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = 1;
        } else if (!strcmp(a, "--canonical-layout")) {
            opts.ref_layout = 0;
        } else if (!strcmp(a, "--no-index-quirk")) {
            opts.index_key_quirk = 0;
        } else {
            fprintf(stderr, "tide run: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return TIDE_EXIT_USAGE;
        }
    }
    if (!model_dir || !ids_s) {
        fprintf(stderr, "tide run: --model and --prompt-ids are required\n\n");
        usage(stderr);
        return TIDE_EXIT_USAGE;
    }
    if (threads < 1 || threads > 256) {
        fprintf(stderr, "tide run: --threads must be 1..256\n");
        return TIDE_EXIT_USAGE;
    }
    int32_t *prompt;
    int64_t n_prompt;
    if (parse_ids(ids_s, &prompt, &n_prompt) != 0) {
        fprintf(stderr, "tide run: --prompt-ids: expected comma-separated integers, got '%s'\n", ids_s);
        return TIDE_EXIT_USAGE;
    }
    tide_status st = {0};
    tide_model *m = NULL;
    tide_fwd_ctx *fx = NULL;
    tide_seq_cache sc;
    int have_seq = 0, rc = TIDE_EXIT_FAIL;
    float *logits = NULL;
    double t0 = tide_now_seconds();
    if (tide_model_load(model_dir, &m, &st) != 0) goto done;
    if (tide_fwd_ctx_create(m, tide_cpu_ops(), (int)threads, &opts, &fx, &st) != 0) goto done;
    if (tide_fwd_seq_init(fx, &sc, &st) != 0) goto done;
    have_seq = 1;
    int64_t V = m->cfg.text.vocab_size;
    logits = malloc((size_t)V * sizeof(float));
    if (!logits) {
        tide_fail(&st, TIDE_ERR_NOMEM, "out of memory");
        goto done;
    }
    double t1 = tide_now_seconds();
    /* prefill (optionally chunked) */
    int64_t step = chunk > 0 ? chunk : n_prompt;
    for (int64_t off = 0; off < n_prompt; off += step) {
        int64_t n = n_prompt - off < step ? n_prompt - off : step;
        tide_step_seq s = {&sc, prompt + off, n, off + n == n_prompt ? TIDE_LOGITS_LAST : TIDE_LOGITS_NONE};
        tide_step_out o = {off + n == n_prompt ? logits : NULL, NULL};
        if (tide_forward(fx, &s, 1, &o, &st) != 0) goto done;
    }
    double t2 = tide_now_seconds();
    long produced = 0;
    for (long i = 0; i < max_tokens; i++) {
        int32_t next = argmax(logits, V);
        printf("%s%d", i ? "," : "", next);
        fflush(stdout);
        produced++;
        if (next == TIDE_EOS_ID && !ignore_eos) break;
        if (i + 1 == max_tokens) break;
        tide_step_seq s = {&sc, &next, 1, TIDE_LOGITS_LAST};
        tide_step_out o = {logits, NULL};
        if (tide_forward(fx, &s, 1, &o, &st) != 0) goto done;
    }
    printf("\n");
    fflush(stdout);
    double t3 = tide_now_seconds();
    fprintf(stderr,
            "tide run: load %.2f s; prefill %lld tokens in %.3f s (%.1f tok/s); decode %ld tokens in %.3f s (%.2f tok/s), %ld threads\n",
            t1 - t0, (long long)n_prompt, t2 - t1, (double)n_prompt / (t2 - t1 > 0 ? t2 - t1 : 1e-9),
            produced > 1 ? produced - 1 : 0, t3 - t2,
            produced > 1 ? (double)(produced - 1) / (t3 - t2 > 0 ? t3 - t2 : 1e-9) : 0.0, threads);
    rc = TIDE_EXIT_OK;
done:
    if (rc != TIDE_EXIT_OK) fprintf(stderr, "tide run: %s\n", st.msg);
    free(logits);
    if (have_seq) tide_fwd_seq_free(fx, &sc);
    tide_fwd_ctx_free(fx);
    tide_model_free(m);
    free(prompt);
    return rc;
}
