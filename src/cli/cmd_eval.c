/* tide eval: teacher-forced perplexity of a text through the real forward
 * pass (model/forward.h, the CPU ops: the reference numerics).
 *
 *   tide eval --model DIR --text FILE [--ctx N] [--stride S] [--json]
 *
 * The text is tokenized whole with the model's tokenizer, then scored in
 * windows of ctx tokens starting every stride tokens. Each window is one
 * fresh sequence, BOS first (unless --no-bos), run as one prefill with the
 * logits of every row; a token is scored once, in the first window that
 * holds it with context (the whole first window; then the tokens past the
 * previous window's end). With stride = ctx (the default) the windows do
 * not overlap and every token is predicted from the window's start: the
 * trainer's held-out protocol (docs/tide-mini.md). Reported: tokens scored,
 * mean negative log-likelihood (natural log), perplexity exp(NLL) and top-1
 * accuracy (the target is the arg-max logit; ties go to the lower id). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "cli/backend.h"
#include "cli/cli.h"
#include "model/forward.h"
#include "model/model.h"
#include "text/render.h"
#include "text/tokenizer.h"

typedef struct {
    const char *model, *text, *tokenizer, *dump;
    int64_t ctx, stride, max_tokens;
    int threads, bos, json, split_special, quiet;
    const char *backend, *kernels;
} eval_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide eval --model DIR --text FILE [options]\n\n"
            "Teacher-forced perplexity of FILE through tide's forward pass on the CPU: the text is\n"
            "tokenized whole, scored in windows of --ctx tokens every --stride tokens, each window a\n"
            "fresh sequence with BOS first; every token is scored once. Prints the tokens scored,\n"
            "the mean negative log-likelihood (nats), the perplexity exp(NLL) and the top-1 accuracy.\n\n"
            "  --model DIR        checkpoint directory (config.json, safetensors, tokenizer.json)\n"
            "  --text FILE        UTF-8 text ('-' = stdin)\n"
            "  --ctx N            tokens per window, BOS not counted (default 512)\n"
            "  --stride S         tokens between window starts, 1..ctx (default: ctx, no overlap;\n"
            "                     smaller: each token scored with at least ctx - S tokens before it)\n"
            "  --tokenizer FILE   tokenizer.json (default DIR/tokenizer.json)\n"
            "  --split-special    special tokens' text in FILE is plain text (default: matched,\n"
            "                     as the trainer's tokenizer does)\n"
            "  --no-bos           windows do not start with BOS\n"
            "  --max-tokens N     score only the first N tokens of the text\n"
            "  --threads N        worker threads (default 2)\n"
            "  --backend cpu|cuda, --kernels exact|fast: where the forward runs (as tide run;\n"
            "                     cuda exact gives the CPU's perplexity bit for bit)\n"
            "  --dump FILE        one line per scored token: its index in the text's tokens, its id,\n"
            "                     its NLL and the arg-max id (the predicted token)\n"
            "  --json             one JSON object on stdout: {\"tokens\", \"nll\", \"ppl\", \"top1\",\n"
            "                     \"windows\", \"ctx\", \"stride\", \"bos\"}\n"
            "  -q, --quiet        no progress on stderr\n");
}

static int parse_args(int argc, char **argv, eval_opts *o) {
    memset(o, 0, sizeof *o);
    o->ctx = 512;
    o->threads = 2;
    o->bos = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--model") && v) o->model = argv[++i];
        else if (!strcmp(a, "--text") && v) o->text = argv[++i];
        else if (!strcmp(a, "--tokenizer") && v) o->tokenizer = argv[++i];
        else if (!strcmp(a, "--dump") && v) o->dump = argv[++i];
        else if (!strcmp(a, "--backend") && v) o->backend = argv[++i];
        else if (!strcmp(a, "--kernels") && v) o->kernels = argv[++i];
        else if (!strcmp(a, "--no-bos")) o->bos = 0;
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--split-special")) o->split_special = 1;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) o->quiet = 1;
        else if ((!strcmp(a, "--ctx") || !strcmp(a, "--stride") || !strcmp(a, "--threads") ||
                  !strcmp(a, "--max-tokens")) && v) {
            if (tide_cli_parse_i64(v, 1, (int64_t)1 << 30, &n) != 0) {
                fprintf(stderr, "tide eval: %s wants a positive integer, got '%s'\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--ctx")) o->ctx = n;
            else if (!strcmp(a, "--stride")) o->stride = n;
            else if (!strcmp(a, "--threads")) o->threads = n > 256 ? 256 : (int)n;
            else o->max_tokens = n;
            i++;
        } else {
            fprintf(stderr, "tide eval: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!o->model || !o->text) {
        fprintf(stderr, "tide eval: --model and --text are required\n\n");
        usage(stderr);
        return 2;
    }
    if (!o->stride) o->stride = o->ctx;
    if (o->stride > o->ctx) {
        fprintf(stderr, "tide eval: --stride %" PRId64 " is larger than --ctx %" PRId64 "\n", o->stride, o->ctx);
        return 2;
    }
    return 0;
}

char *tide_cli_read_file(const char *path, size_t *len, tide_status *st) {
    FILE *f = strcmp(path, "-") ? tide_fopen_regular(path, st) : stdin;
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 == cap) {
            char *b = realloc(buf, cap * 2);
            if (!b) break;
            buf = b;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf) {
        tide_fail(st, TIDE_ERR_NOMEM, "out of memory reading %s", path);
        return NULL;
    }
    if (bad) {
        free(buf);
        tide_fail(st, TIDE_ERR_IO, "reading %s failed", path);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* Scores one row: adds -log softmax(row)[target] to *nll (double) and
 * whether target is the arg-max to *hits; returns the arg-max, and this
 * token's NLL in *one. */
static int64_t score_row(const float *row, int64_t V, int32_t target, double *nll, int64_t *hits, double *one) {
    float mx = row[0];
    int64_t best = 0;
    for (int64_t j = 1; j < V; j++)
        if (row[j] > mx) mx = row[j], best = j;
    double s = 0;
    for (int64_t j = 0; j < V; j++) s += exp((double)row[j] - (double)mx);
    *one = log(s) - ((double)row[target] - (double)mx);
    *nll += *one;
    *hits += best == target;
    return best;
}

typedef struct {
    int64_t tokens, hits, windows;
    double nll;
} eval_sums;

/* Runs the windows over ids[0..n). */
static int run_windows(tide_fwd_ctx *fx, const tide_model *m, const int32_t *ids, int64_t n, int32_t bos,
                       const eval_opts *o, FILE *dump, eval_sums *sum, tide_status *st) {
    int64_t V = m->cfg.text.vocab_size, lead = bos >= 0 ? 1 : 0;
    int64_t cap = o->ctx + lead;
    int32_t *win = malloc((size_t)cap * sizeof *win);
    float *logits = malloc((size_t)(cap * V) * sizeof *logits);
    if (!win || !logits) {
        free(win);
        free(logits);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory for a window of %" PRId64 " x %" PRId64 " logits", cap, V);
    }
    int rc = 0;
    int64_t scored_to = 0; /* tokens [0, scored_to) are scored */
    for (int64_t start = 0; scored_to < n && rc == 0; start += o->stride) {
        int64_t end = start + o->ctx < n ? start + o->ctx : n;
        if (lead) win[0] = bos;
        memcpy(win + lead, ids + start, (size_t)(end - start) * sizeof *win);
        int64_t rows = end - start + lead;
        tide_seq_cache sc;
        if (tide_fwd_seq_init(fx, &sc, st) != 0) {
            rc = -1;
            break;
        }
        /* Without BOS the window's first token has nothing to be predicted
         * from: its row predicts the second token. */
        tide_step_seq s = {&sc, win, rows, TIDE_LOGITS_ALL};
        tide_step_out out = {logits, NULL};
        rc = tide_forward(fx, &s, 1, &out, st);
        tide_fwd_seq_free(fx, &sc);
        if (rc != 0) {
            tide_fail_ctx(st, "window at token %" PRId64, start);
            break;
        }
        /* Row r (0-based in the window) predicts win[r + 1] = ids[start + r + 1 - lead]. */
        int64_t first = scored_to > start ? scored_to : start;
        if (!lead && first == start) first++; /* nothing predicts the very first token */
        for (int64_t t = first; t < end; t++) {
            int64_t r = t - start + lead - 1;
            double one;
            int64_t best = score_row(logits + r * V, V, ids[t], &sum->nll, &sum->hits, &one);
            if (dump) fprintf(dump, "%" PRId64 " %d %.9g %" PRId64 "\n", t, (int)ids[t], one, best);
            sum->tokens++;
        }
        scored_to = end;
        sum->windows++;
        if (!o->quiet)
            fprintf(stderr, "\rtide eval: %" PRId64 "/%" PRId64 " tokens, ppl %.4f", scored_to, n,
                    sum->tokens ? exp(sum->nll / (double)sum->tokens) : 0.0);
    }
    if (!o->quiet) fprintf(stderr, "\n");
    free(win);
    free(logits);
    return rc;
}

int tide_cmd_eval(int argc, char **argv) {
    eval_opts o;
    int pr = parse_args(argc, argv, &o);
    if (pr) return pr == 1 ? TIDE_EXIT_OK : TIDE_EXIT_USAGE;
    tide_status st = {0};
    char tokpath[4096];
    if (o.tokenizer) snprintf(tokpath, sizeof tokpath, "%s", o.tokenizer);
    else snprintf(tokpath, sizeof tokpath, "%s/tokenizer.json", o.model);
    tide_tokenizer *tok = NULL;
    tide_model *m = NULL;
    tide_cli_backend be = {0};
    tide_fwd_ctx *fx = NULL;
    tide_tok_ids ids = {0};
    char *text = NULL;
    size_t len = 0;
    FILE *dump = NULL;
    int rc = TIDE_EXIT_FAIL;
    if (tide_tokenizer_load(tokpath, &tok, &st) != 0) goto out;
    if (!(text = tide_cli_read_file(o.text, &len, &st))) goto out;
    if (tide_tokenizer_encode(tok, text, len, o.split_special ? TIDE_ENCODE_SPLIT_SPECIAL : 0, NULL, &ids, &st) != 0) {
        tide_fail_ctx(&st, "tokenizing %s", o.text);
        goto out;
    }
    int64_t n = (int64_t)ids.n;
    if (o.max_tokens && n > o.max_tokens) n = o.max_tokens;
    if (n < (o.bos ? 1 : 2)) {
        tide_fail(&st, TIDE_ERR_INVALID, "%s holds %" PRId64 " tokens: nothing to score", o.text, n);
        goto out;
    }
    int32_t bos = -1;
    if (o.bos && (bos = tide_tokenizer_token_id(tok, TIDE_TOK_BOS, strlen(TIDE_TOK_BOS))) < 0) {
        tide_fail(&st, TIDE_ERR_INVALID, "%s has no %s token (give --no-bos)", tokpath, TIDE_TOK_BOS);
        goto out;
    }
    if (tide_cli_backend_parse(&be, o.backend, o.kernels, &st) != 0) goto out;
    if (tide_model_load(o.model, &m, &st) != 0) goto out;
    tide_engine_config ec;
    memset(&ec, 0, sizeof ec);
    if (tide_cli_backend_open(&be, &ec, &st) != 0) goto out;
    const tide_ops *ops = ec.ops ? ec.ops : tide_cpu_ops();
    if (ops->bind_weights && ops->bind_weights(ops, m->ck, &st) != 0) goto out;
    tide_fwd_opts fo = tide_fwd_default_opts();
    if (tide_fwd_ctx_create(m, ops, o.threads, &fo, &fx, &st) != 0) goto out;
    eval_sums sum = {0};
    if (o.dump && !(dump = fopen(o.dump, "w"))) {
        tide_fail(&st, TIDE_ERR_IO, "cannot write %s: %s", o.dump, strerror(errno));
        goto out;
    }
    if (run_windows(fx, m, ids.ids, n, bos, &o, dump, &sum, &st) != 0 || tide_cli_backend_check(&be, &st) != 0)
        goto out;
    if (dump) {
        int bad = ferror(dump);
        if (fclose(dump) != 0 || bad) {
            dump = NULL;
            tide_fail(&st, TIDE_ERR_IO, "writing %s failed", o.dump);
            goto out;
        }
        dump = NULL;
    }
    double nll = sum.nll / (double)sum.tokens, ppl = exp(nll), top1 = (double)sum.hits / (double)sum.tokens;
    if (o.json)
        printf("{\"tokens\": %" PRId64 ", \"nll\": %.8f, \"ppl\": %.6f, \"top1\": %.6f, \"windows\": %" PRId64
               ", \"ctx\": %" PRId64 ", \"stride\": %" PRId64 ", \"bos\": %s}\n",
               sum.tokens, nll, ppl, top1, sum.windows, o.ctx, o.stride, o.bos ? "true" : "false");
    else
        printf("tokens %" PRId64 "  nll %.6f  ppl %.4f  top1 %.4f  (%" PRId64 " windows, ctx %" PRId64
               ", stride %" PRId64 "%s)\n",
               sum.tokens, nll, ppl, top1, sum.windows, o.ctx, o.stride, o.bos ? ", BOS first" : "");
    rc = fflush(stdout) == 0 && !ferror(stdout) ? TIDE_EXIT_OK : TIDE_EXIT_FAIL;
    if (rc != TIDE_EXIT_OK) tide_fail(&st, TIDE_ERR_IO, "writing to standard output failed");
out:
    if (rc != TIDE_EXIT_OK) fprintf(stderr, "tide eval: %s\n", st.msg);
    if (dump) fclose(dump);
    tide_fwd_ctx_free(fx);
    tide_cli_backend_close(&be);
    tide_model_free(m);
    tide_tok_ids_free(&ids);
    tide_tokenizer_free(tok);
    free(text);
    return rc;
}
