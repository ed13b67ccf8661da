/* tide run: offline generation through the engine (include/tide.h).
 *
 *   tide run --model DIR --prompt-ids 0,100,200 [--max-tokens N] ...
 *       one greedy request; the generated ids on stdout (comma-separated,
 *       one line), the speed on stderr.
 *   tide run --model DIR --input prompts.jsonl --output out.jsonl ...
 *       a batch: one JSON request per input line, one JSON result per
 *       line out (in completion order), progress on stderr.
 *
 * Input line: see request_jsonl.h (without "id", the line number stands
 *   for it). Output line: {"id", "output_ids", "finish_reason",
 *   "prompt_tokens", "completion_tokens", "cached_tokens"} (+ "error" when the finish reason is
 *   "error"; a request rejected at submission gets prompt_tokens 0). */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/json.h"
#include "base/log.h"
#include "cli/batch_end.h"
#include "cli/cli.h"
#include "cli/out_file.h"
#include "cli/run_text.h"
#include "cli/stop_signal.h"
#include "cli/backend.h"
#include "cli/kv_cli.h"
#include "engine/request_jsonl.h"
#include "engine/spec.h"
#include "tide.h"

#define DEFAULT_MAX_TOKENS 16

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide run --model DIR --prompt-ids ID,ID,... [options]\n"
            "       tide run --model DIR --input FILE.jsonl --output FILE.jsonl [options]\n"
            "\n"
            "Offline generation (on the CPU unless --backend cuda). With --prompt-ids: one greedy request,\n"
            "the generated token ids on stdout (comma-separated) and the speed on stderr.\n"
            "With --input: one request per JSON line ({\"id\", \"prompt_ids\", \"max_tokens\",\n"
            "\"temperature\", \"top_p\", \"top_k\", \"min_p\", \"seed\", \"stop_token_ids\",\n"
            "\"ignore_eos\", penalties}), one result per line in --output ('-' = stdout),\n"
            "in completion order, progress on stderr. Defaults: the sampling defaults\n"
            "(temperature 1) and max_tokens 16.\n"
            "\n"
            "options:\n"
            "  --model DIR          checkpoint directory (config.json + safetensors)\n"
            "  --prompt-ids LIST    comma-separated token ids (at least one)\n"
            "  --input FILE         JSONL requests ('-' = stdin)\n"
            "  --output FILE        JSONL results ('-' = stdout; default)\n"
            "  --max-tokens N       tokens to generate (default 16; JSONL: per line)\n"
            "  --threads N          worker threads (default 2)\n"
            "  --ignore-eos         keep going after the model's end-of-sequence ids\n"
            "                       (generation_config.json / config.json eos_token_id)\n"
            "  --chunk N            prefill chunk size (default: the step budget)\n"
            "  --max-seqs N         requests running at once (default 64)\n"
            "  --step-tokens N      token budget of one step (default 512)\n"
            "  --kv-blocks N        KV pool capacity in blocks (default 1048576)\n"
            "  --kv-block N         compressed positions per KV block (default 64)\n"
            "  --seed N             engine seed for requests without one (default 0)\n"
            "  --canonical-layout   attention entry order independent of chunking (docs/model.md)\n"
            "  --no-index-quirk     index keys from each indexer's own source (docs/model.md)\n"
            "  --ep N               expert parallel over N rank processes (tide run --ep 1 --help;\n"
            "                       docs/ep.md)\n"
            "  --overlap            plan step N+1 while step N's forward pass runs (same\n"
            "                       tokens; docs/engine.md, 'Overlapped scheduling')\n"
            "  --no-prefix-cache    do not reuse the KV of earlier requests' prompt pages\n"
            "  --page-tokens N      prefix-cache page size in tokens, a multiple of the\n"
            "                       compress ratios' lcm x kv_block (default 0: the smallest\n"
            "                       such multiple >= 128)\n"
            "  --prefix-replay N    tokens recomputed before a cache hit to rebuild the\n"
            "                       attention windows (default 140); 'full' = the whole\n"
            "                       prefix (exactly a cold prefill with --canonical-layout\n"
            "                       --no-index-quirk)\n"
            "  --decoder-tail N     the decoder variant: prefills run the layers above the\n"
            "                       last KV source on the last N tokens only; 'exact' = the\n"
            "                       shortest exact tail (default 0: off; docs/engine.md)\n"
            "  --prefix-cache-inexact  also cache the pages computed after a bounded-replay\n"
            "                       hit (default: they stay private: docs/engine.md)\n"
            "  --spec MODE          speculative decoding with the DSpark head: dspark (the\n"
            "                       confidence-scheduled budget), fixed:K (K drafts per\n"
            "                       sequence) or off (default); the same tokens as off in\n"
            "                       any layout (docs/spec.md)\n"
            "%s"
            "JSONL lines may also carry \"cache_salt\" (an integer): requests share cached\n"
            "pages only with requests of the same salt (docs/engine.md).\n"
            "\n"
            "Text (run_text.c; needs MODEL_DIR/tokenizer.json):\n"
            "  --prompt TEXT        one user turn through the V4.1 template; the reply on\n"
            "                       stdout as it streams, the reasoning on stderr\n"
            "  --chat               interactive: one user turn per stdin line (a pipe works),\n"
            "                       the conversation kept; EOF or /exit ends it\n"
            "  --raw                --prompt is a raw completion prompt (no template)\n"
            "  --system TEXT        a system message first\n"
            "  --thinking           thinking mode; --effort N|NAME its reasoning effort\n"
            "  --show-reasoning     the reasoning on stdout too\n"
            "  --temperature T      sampling temperature (default 0: greedy)\n"
            "  --text               --input is a text batch even when it is stdin (detected\n"
            "                       from the first line of a file: \"messages\" or \"prompt\")\n"
            "  Text JSONL lines: a Chat Completions body (\"messages\") or a Completions body\n"
            "  (\"prompt\": text or ids), plus \"id\"; results {\"id\", \"text\", \"reasoning\",\n"
            "  \"tool_calls\", \"output_ids\", \"finish_reason\", \"prompt_tokens\",\n"
            "  \"completion_tokens\", \"cached_tokens\"}.\n",
            tide_cli_backend_help());
    kv_run_help(f);
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

typedef struct run_opts {
    const char *model_dir, *ids_s, *input, *output;
    long long max_tokens, chunk, max_seqs, step_tokens, kv_blocks, kv_block, threads, page_tokens, prefix_replay;
    long long decoder_tail;
    unsigned long long seed;
    int ignore_eos, canonical, no_quirk, no_prefix_cache, overlap, cache_inexact;
    int spec_mode, spec_k; /* --spec */
    tide_run_text_opts text; /* --prompt / --chat / text --input (run_text.c) */
    kv_run_opts kv; /* the persistent KV store's flags (kv_run.c) */
    const char *backend, *kernels;
    tide_cli_backend be; /* parsed from them */
} run_opts;

/* A flag's value: a token count 0..max, or `word` (-1). */
static int count_or_word(const char *flag, const char *v, const char *word, long long max, long long *out) {
    char *end = NULL;
    errno = 0;
    long long x = strcmp(v, word) ? strtoll(v, &end, 10) : -1;
    if (strcmp(v, word) && (*end || end == v || errno || x < 0 || x > max)) {
        fprintf(stderr, "tide run: %s: '%s' is not a token count (0..%lld) or '%s'\n", flag, v, max, word);
        return -1;
    }
    *out = x;
    return 0;
}

/* Returns -1 on success, else the exit code. */
static int parse_args(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->max_tokens = DEFAULT_MAX_TOKENS;
    o->threads = 2;
    o->max_seqs = 64;
    o->step_tokens = 512;
    o->kv_blocks = 1 << 20;
    o->kv_block = 64;
    o->prefix_replay = 140;
    static const struct {
        const char *flag;
        size_t off;
        long long lo, hi;
    } nums[] = {
        {"--max-tokens", offsetof(run_opts, max_tokens), 0, 1000000},
        {"--threads", offsetof(run_opts, threads), 1, 256},
        {"--chunk", offsetof(run_opts, chunk), 0, 1 << 24},
        {"--max-seqs", offsetof(run_opts, max_seqs), 1, 4096},
        {"--step-tokens", offsetof(run_opts, step_tokens), 1, 1 << 24},
        {"--kv-blocks", offsetof(run_opts, kv_blocks), 1, INT32_MAX},
        {"--kv-block", offsetof(run_opts, kv_block), 1, 4096},
        {"--page-tokens", offsetof(run_opts, page_tokens), 0, 1 << 24},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int done = 0, rc;
        for (size_t k = 0; k < sizeof nums / sizeof nums[0] && !done; k++) {
            if (strcmp(a, nums[k].flag) != 0 || !v) continue;
            char *end;
            errno = 0;
            long long x = strtoll(v, &end, 10);
            if (*end || end == v || errno || x < nums[k].lo || x > nums[k].hi) {
                fprintf(stderr, "tide run: %s: '%s' is not a valid count (%lld..%lld)\n", a, v, nums[k].lo,
                        nums[k].hi);
                return TIDE_EXIT_USAGE;
            }
            *(long long *)((char *)o + nums[k].off) = x;
            i++;
            done = 1;
        }
        if (done) continue;
        int kn = kv_run_flag(&o->kv, a, v);
        if (kn < 0) return TIDE_EXIT_USAGE;
        if (kn > 0) {
            i += kn - 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return TIDE_EXIT_OK;
        } else if (!strcmp(a, "--model") && v) {
            o->model_dir = argv[++i];
        } else if (!strcmp(a, "--prompt-ids") && v) {
            o->ids_s = argv[++i];
        } else if (!strcmp(a, "--backend") && v) {
            o->backend = argv[++i];
        } else if (!strcmp(a, "--kernels") && v) {
            o->kernels = argv[++i];
        } else if (!strcmp(a, "--input") && v) {
            o->input = argv[++i];
        } else if (!strcmp(a, "--output") && v) {
            o->output = argv[++i];
        } else if (!strcmp(a, "--seed") && v) {
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 10);
            if (*end || end == v || errno || *v == '-') {
                fprintf(stderr, "tide run: --seed: '%s' is not a valid seed\n", v);
                return TIDE_EXIT_USAGE;
            }
            i++;
        } else if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = 1;
        } else if (!strcmp(a, "--canonical-layout")) {
            o->canonical = 1;
        } else if (!strcmp(a, "--prefix-replay") && v) {
            if (count_or_word(a, v, "full", 1 << 24, &o->prefix_replay) != 0) return TIDE_EXIT_USAGE;
            i++;
        } else if (!strcmp(a, "--decoder-tail") && v) {
            if (count_or_word(a, v, "exact", 1 << 30, &o->decoder_tail) != 0) return TIDE_EXIT_USAGE;
            i++;
        } else if (!strcmp(a, "--prefix-cache-inexact")) {
            o->cache_inexact = 1;
        } else if (!strcmp(a, "--no-prefix-cache")) {
            o->no_prefix_cache = 1;
        } else if (!strcmp(a, "--no-index-quirk")) {
            o->no_quirk = 1;
        } else if (!strcmp(a, "--overlap")) {
            o->overlap = 1;
        } else if (!strcmp(a, "--spec") && v) {
            tide_status sst = {0};
            if (tide_spec_parse(argv[++i], &o->spec_mode, &o->spec_k, &sst) != 0) {
                fprintf(stderr, "tide run: %s\n", sst.msg);
                return TIDE_EXIT_USAGE;
            }
        } else if ((rc = tide_run_text_arg(argc, argv, &i, &o->text)) != 0) {
            if (rc < 0) return TIDE_EXIT_USAGE;
        } else {
            fprintf(stderr, "tide run: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return TIDE_EXIT_USAGE;
        }
    }
    int modes = !!o->ids_s + !!o->input + !!o->text.prompt + o->text.chat;
    if (!o->model_dir || modes != 1) {
        fprintf(stderr, "tide run: --model and one of --prompt-ids / --prompt / --chat / --input are required\n\n");
        usage(stderr);
        return TIDE_EXIT_USAGE;
    }
    tide_status bst = {0};
    if (tide_cli_backend_parse(&o->be, o->backend, o->kernels, &bst) != 0) {
        fprintf(stderr, "tide run: %s\n", bst.msg);
        return TIDE_EXIT_USAGE;
    }
    return -1;
}

static tide_engine_config engine_config(const run_opts *o) {
    tide_engine_config c = tide_engine_config_default();
    c.model_dir = o->model_dir;
    c.n_threads = (int)o->threads;
    c.kv_blocks = o->kv_blocks;
    c.kv_block = (int)o->kv_block;
    c.max_seqs = (int)o->max_seqs;
    c.max_step_tokens = o->step_tokens;
    c.prefill_chunk = o->chunk;
    if (c.prefill_chunk > c.max_step_tokens) c.max_step_tokens = c.prefill_chunk;
    c.canonical_layout = o->canonical;
    c.index_key_quirk = !o->no_quirk;
    c.overlap = o->overlap;
    c.seed = o->seed;
    c.prefix_cache = !o->no_prefix_cache;
    c.page_tokens = o->page_tokens;
    c.prefix_replay = o->prefix_replay;
    c.prefix_cache_inexact = o->cache_inexact;
    c.decoder_tail = o->decoder_tail;
    c.spec_mode = o->spec_mode;
    c.spec_k = o->spec_k;
    return c;
}

/* ---- --prompt-ids: one greedy request ---- */

/* Streams the ids to stdout as they come; the first failed write is kept
 * (the engine's callback cannot fail) and ends the run after the step. */
typedef struct ids_out {
    tide_out_file out;
    tide_status st;
    int failed;
} ids_out;

static void print_token(void *ctx, const tide_event *ev) {
    ids_out *w = ctx;
    if (ev->kind != TIDE_EVENT_TOKEN || w->failed) return;
    char s[16];
    int n = snprintf(s, sizeof s, "%s%d", ev->n_output > 1 ? "," : "", ev->token);
    if (tide_out_write(&w->out, s, (size_t)n, &w->st) != 0) w->failed = 1;
}

static int run_ids(const run_opts *o) {
    int32_t *prompt;
    int64_t n_prompt;
    if (parse_ids(o->ids_s, &prompt, &n_prompt) != 0) {
        fprintf(stderr, "tide run: --prompt-ids: expected comma-separated integers, got '%s'\n", o->ids_s);
        return TIDE_EXIT_USAGE;
    }
    ids_out w = {0};
    tide_out_open(&w.out, NULL, NULL, &w.st); /* stdout: cannot fail */
    tide_engine_config c = engine_config(o);
    c.max_seqs = 1;
    /* the whole prompt in one step unless --chunk says otherwise */
    if (c.max_step_tokens < n_prompt) c.max_step_tokens = n_prompt;
    if (!o->chunk) c.prefill_chunk = 0;
    c.on_event = print_token;
    c.event_ctx = &w;
    tide_status st = {0};
    tide_engine *e = NULL;
    int rc = TIDE_EXIT_FAIL;
    double t0 = tide_now_seconds();
    kv_run *kv = NULL;
    tide_cli_backend be = o->be;
    if (tide_cli_backend_open(&be, &c, &st) != 0) goto done;
    if (kv_run_open(&o->kv, &c, &kv, &st) != 0) goto done;
    if (tide_engine_create(&c, &e, &st) != 0) goto done;
    double t1 = tide_now_seconds();
    tide_request_info info = {0};
    tide_request_id id;
    if (o->max_tokens > 0) {
        tide_request r = tide_request_default();
        r.prompt = prompt;
        r.n_prompt = n_prompt;
        r.sampling.temperature = 0;
        r.sampling.max_tokens = o->max_tokens;
        r.stop_at_eos = !o->ignore_eos;
        if (tide_engine_submit(e, &r, &id, &st) != 0) goto done;
        while (tide_engine_busy(e) && !w.failed)
            if (tide_engine_step(e, &st) != 0 || tide_cli_backend_check(&be, &st) != 0) goto done;
        if (!w.failed && tide_engine_get(e, id, &info, &st) != 0) goto done;
    }
    if (w.failed) {
        st = w.st;
        goto done;
    }
    if (tide_out_write(&w.out, "\n", 1, &st) != 0 || tide_out_commit(&w.out, &st) != 0) goto done;
    if (info.reason == TIDE_FINISH_ERROR) {
        tide_fail(&st, TIDE_ERR_INTERNAL, "%s", info.error);
        goto done;
    }
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    double t2 = tide_now_seconds();
    if (o->max_tokens > 0)
        fprintf(stderr,
                "tide run: load %.2f s; %lld prompt + %lld generated tokens in %lld steps, %.3f s (%.1f tok/s through the model, %.2f generated tok/s), %lld threads\n",
                t1 - t0, (long long)n_prompt, (long long)info.n_output, (long long)s.steps, t2 - t1,
                s.tokens_per_s, s.generated_per_s, o->threads);
    rc = TIDE_EXIT_OK;
done:
    if (rc != TIDE_EXIT_OK) fprintf(stderr, "tide run: %s\n", st.msg);
    tide_out_abort(&w.out);
    tide_engine_destroy(e);
    kv_run_close(kv);
    tide_cli_backend_close(&be);
    free(prompt);
    return rc;
}

/* ---- --input: a JSONL batch of token ids (cli/batch_end.h drives it) ---- */

typedef struct batch {
    tide_batch b;
    tide_engine *e;
    const run_opts *o;
    json_t **ids;          /* [slot] the line's "id" (the slot rides in the request's user pointer) */
    int64_t n_ids, cap_ids;
    tide_request_id *done; /* finished, to release after the step */
    int64_t n_done, cap_done;
    double last_progress;
} batch;

static void write_result(batch *b, json_t *id, const int32_t *out, int64_t n_out, const char *reason,
                         int64_t n_prompt, int64_t n_cached, const char *error) {
    json_t *o = json_object(), *ids = json_array();
    json_object_set(o, "id", id ? id : json_null());
    for (int64_t i = 0; i < n_out; i++) json_array_append_new(ids, json_integer(out[i]));
    json_object_set_new(o, "output_ids", ids);
    json_object_set_new(o, "finish_reason", json_string(reason));
    json_object_set_new(o, "prompt_tokens", json_integer(n_prompt));
    json_object_set_new(o, "completion_tokens", json_integer(n_out));
    json_object_set_new(o, "cached_tokens", json_integer(n_cached));
    if (error) json_object_set_new(o, "error", json_string(error));
    tide_batch_write(&b->b, o, error != NULL);
}

static void on_event(void *ctx, const tide_event *ev) {
    batch *b = ctx;
    if (ev->kind != TIDE_EVENT_FINISHED) return;
    int64_t slot = (int64_t)(intptr_t)ev->user;
    write_result(b, b->ids[slot], ev->output, ev->n_output, tide_finish_reason_name(ev->reason),
                 ev->n_prompt, ev->n_cached, ev->error);
    if (b->n_done < b->cap_done) b->done[b->n_done++] = ev->id;
}

static void progress(tide_engine *e, const batch *b, int final) {
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    fprintf(stderr,
            "tide run: %lld/%lld done, %lld running, %lld waiting, KV %lld/%lld blocks, %lld steps, "
            "%.1f tok/s (%.2f generated/s), last step %.3f s, %lld preemptions, prefix hits %lld/%lld tokens "
            "(%.1f%%), %lld pages cached%s\n",
            b->b.n_finished, b->b.n_lines, (long long)s.n_running, (long long)s.n_waiting,
            (long long)s.kv_blocks_used, (long long)s.kv_blocks_total, (long long)s.steps, s.tokens_per_s,
            s.generated_per_s, s.last_step_seconds, (long long)s.preemptions, (long long)s.prefix_hit_tokens,
            (long long)s.prefix_lookup_tokens, 100.0 * s.prefix_hit_rate, (long long)s.prefix_pages_cached,
            final ? " (end)" : "");
}

/* One line: parsed (request_jsonl.h) and submitted, its slot in b->ids
 * handed back in its events; else its error result. */
static void submit_line(void *ctx, const char *line, size_t len, int64_t lineno) {
    batch *b = ctx;
    const tide_jsonl_defaults d = {.max_tokens = b->o->max_tokens, .ignore_eos = b->o->ignore_eos};
    tide_status st = {0};
    tide_jsonl_request jr;
    int ok = tide_jsonl_request_parse(line, len, lineno, &d, &jr, &st) == 0;
    if (ok && b->n_ids == b->cap_ids) {
        int64_t c = b->cap_ids ? 2 * b->cap_ids : 256;
        json_t **a = realloc(b->ids, (size_t)c * sizeof *a);
        if (a) b->ids = a, b->cap_ids = c;
        else ok = 0, tide_fail(&st, TIDE_ERR_NOMEM, "line %lld: out of memory", (long long)lineno);
    }
    if (ok) {
        tide_request r = jr.req;
        r.user = (void *)(intptr_t)b->n_ids;
        b->ids[b->n_ids] = jr.id; /* the batch takes the id's reference */
        if (tide_engine_submit(b->e, &r, NULL, &st) == 0) {
            b->n_ids++;
            jr.id = NULL;
        } else {
            tide_fail_ctx(&st, "line %lld", (long long)lineno);
            ok = 0;
        }
    }
    if (!ok) {
        fprintf(stderr, "tide run: %s\n", st.msg);
        write_result(b, jr.id, NULL, 0, "error", 0, 0, st.msg);
    }
    tide_jsonl_request_free(&jr);
}

static int busy(void *ctx) { return tide_engine_busy(((batch *)ctx)->e); }

/* A step; then the finished requests are released, and the progress
 * line comes every second. */
static int step(void *ctx, tide_status *st) {
    batch *b = ctx;
    b->n_done = 0;
    if (tide_engine_step(b->e, st) != 0) return -1;
    for (int64_t i = 0; i < b->n_done; i++) tide_engine_release(b->e, b->done[i]);
    if (tide_now_seconds() - b->last_progress >= 1.0) {
        progress(b->e, b, 0);
        b->last_progress = tide_now_seconds();
    }
    return 0;
}

static int run_jsonl(const run_opts *o) {
    batch b;
    memset(&b, 0, sizeof b);
    b.o = o;
    if (tide_batch_open(&b.b, o->output, o->input) != 0) return TIDE_EXIT_FAIL;
    tide_status st = {0};
    int ok = 0, sig = 0;
    kv_run *kv = NULL;
    tide_cli_backend be = o->be;
    tide_engine_config c = engine_config(o);
    c.on_event = on_event;
    c.event_ctx = &b;
    b.cap_done = 2 * (int64_t)c.max_seqs + 16; /* finished in one step: running + failed at admission */
    b.done = malloc((size_t)b.cap_done * sizeof *b.done);
    b.last_progress = tide_now_seconds();
    if (!b.done) {
        fprintf(stderr, "tide run: out of memory\n");
    } else if (tide_cli_backend_open(&be, &c, &st) != 0 || kv_run_open(&o->kv, &c, &kv, &st) != 0 ||
               tide_engine_create(&c, &b.e, &st) != 0) {
        fprintf(stderr, "tide run: %s\n", st.msg);
    } else {
        const tide_batch_ops ops = {.submit = submit_line, .busy = busy, .step = step};
        sig = tide_batch_drive(&b.b, &ops, &b);
        if (sig >= 0 && tide_cli_backend_check(&be, &st) != 0) {
            fprintf(stderr, "tide run: %s\n", st.msg);
            sig = -1;
        }
        if (sig >= 0) progress(b.e, &b, 1);
        ok = sig >= 0;
    }
    int rc = tide_batch_finish(&b.b, ok, sig > 0 ? sig : 0);
    tide_engine_destroy(b.e);
    tide_batch_close(&b.b);
    kv_run_close(kv);
    tide_cli_backend_close(&be);
    for (int64_t i = 0; i < b.n_ids; i++) json_decref(b.ids[i]);
    free(b.ids);
    free(b.done);
    return rc;
}

int tide_cmd_run(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--ep")) return tide_cmd_ep_run(argc, argv); /* expert parallel: docs/ep.md */
    run_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    if (o.text.prompt || o.text.chat || (o.input && (o.text.text_input || tide_run_text_is_text_input(o.input)))) {
        tide_engine_config c = engine_config(&o);
        o.text.input = o.input;
        o.text.output = o.output;
        o.text.max_tokens = o.max_tokens;
        o.text.ignore_eos = o.ignore_eos;
        kv_run *kv = NULL;
        tide_cli_backend be = o.be;
        tide_status st = {0};
        if (tide_cli_backend_open(&be, &c, &st) != 0 || kv_run_open(&o.kv, &c, &kv, &st) != 0) {
            fprintf(stderr, "tide run: %s\n", st.msg);
            tide_cli_backend_close(&be);
            return TIDE_EXIT_FAIL;
        }
        rc = tide_run_text(&o.text, &c);
        kv_run_close(kv); /* after the engine (tide_run_text destroyed it) */
        if (rc == TIDE_EXIT_OK && tide_cli_backend_check(&be, &st) != 0) {
            fprintf(stderr, "tide run: %s\n", st.msg);
            rc = TIDE_EXIT_FAIL;
        }
        tide_cli_backend_close(&be);
        return rc;
    }
    return o.ids_s ? run_ids(&o) : run_jsonl(&o);
}
