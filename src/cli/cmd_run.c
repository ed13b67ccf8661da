/* tide run: offline generation through the engine (include/tide.h).
 *
 *   tide run --model DIR --prompt-ids 0,100,200 [--max-tokens N] ...
 *       one greedy request; the generated ids on stdout (comma-separated,
 *       one line), the speed on stderr.
 *   tide run --model DIR --input prompts.jsonl --output out.jsonl ...
 *       a batch: one JSON request per input line, one JSON result per
 *       line out (in completion order), progress on stderr.
 *
 * Input line: {"id": any, "prompt_ids": [..], "max_tokens": N,
 *   "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
 *   "presence_penalty", "frequency_penalty", "seed", "stop_token_ids": [..],
 *   "ignore_eos": bool, "cache_salt": N}; without "id", the line number. Output line: {"id", "output_ids", "finish_reason",
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
#include "cli/cli.h"
#include "tide.h"

#define TIDE_EOS_ID 1 /* <｜end▁of▁sentence｜> in the V4.1 vocabulary */
#define DEFAULT_MAX_TOKENS 16

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide run --model DIR --prompt-ids ID,ID,... [options]\n"
            "       tide run --model DIR --input FILE.jsonl --output FILE.jsonl [options]\n"
            "\n"
            "Offline generation on the CPU backend. With --prompt-ids: one greedy request,\n"
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
            "  --ignore-eos         keep going after the end-of-sentence token (id 1)\n"
            "  --chunk N            prefill chunk size (default: the step budget)\n"
            "  --max-seqs N         requests running at once (default 64)\n"
            "  --step-tokens N      token budget of one step (default 512)\n"
            "  --kv-blocks N        KV pool capacity in blocks (default 1048576)\n"
            "  --kv-block N         compressed positions per KV block (default 64)\n"
            "  --seed N             engine seed for requests without one (default 0)\n"
            "  --canonical-layout   attention entry order independent of chunking (docs/model.md)\n"
            "  --no-index-quirk     index keys from each indexer's own source (docs/model.md)\n"
            "  --no-prefix-cache    do not reuse the KV of earlier requests' prompt pages\n"
            "  --page-tokens N      prefix-cache page size in tokens, a multiple of the\n"
            "                       compress ratios' lcm x kv_block (default 0: the smallest\n"
            "                       such multiple >= 128)\n"
            "  --prefix-replay N    tokens recomputed before a cache hit to rebuild the\n"
            "                       attention windows (default 140); 'full' = the whole\n"
            "                       prefix (exactly a cold prefill with --canonical-layout\n"
            "                       --no-index-quirk)\n"
            "JSONL lines may also carry \"cache_salt\" (an integer): requests share cached\n"
            "pages only with requests of the same salt (docs/engine.md).\n");
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
    unsigned long long seed;
    int ignore_eos, canonical, no_quirk, no_prefix_cache;
} run_opts;

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
        int done = 0;
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
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return TIDE_EXIT_OK;
        } else if (!strcmp(a, "--model") && v) {
            o->model_dir = argv[++i];
        } else if (!strcmp(a, "--prompt-ids") && v) {
            o->ids_s = argv[++i];
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
            char *end = NULL;
            errno = 0;
            long long x = strcmp(v, "full") ? strtoll(v, &end, 10) : -1;
            if (strcmp(v, "full") && (*end || end == v || errno || x < 0 || x > (1 << 24))) {
                fprintf(stderr, "tide run: --prefix-replay: '%s' is not a token count (0..%d) or 'full'\n", v,
                        1 << 24);
                return TIDE_EXIT_USAGE;
            }
            o->prefix_replay = x;
            i++;
        } else if (!strcmp(a, "--no-prefix-cache")) {
            o->no_prefix_cache = 1;
        } else if (!strcmp(a, "--no-index-quirk")) {
            o->no_quirk = 1;
        } else {
            fprintf(stderr, "tide run: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return TIDE_EXIT_USAGE;
        }
    }
    if (!o->model_dir || (!o->ids_s && !o->input) || (o->ids_s && o->input)) {
        fprintf(stderr, "tide run: --model and one of --prompt-ids / --input are required\n\n");
        usage(stderr);
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
    c.seed = o->seed;
    c.prefix_cache = !o->no_prefix_cache;
    c.page_tokens = o->page_tokens;
    c.prefix_replay = o->prefix_replay;
    return c;
}

/* ---- --prompt-ids: one greedy request ---- */

static void print_token(void *ctx, const tide_event *ev) {
    (void)ctx;
    if (ev->kind != TIDE_EVENT_TOKEN) return;
    printf("%s%d", ev->n_output > 1 ? "," : "", ev->token);
    fflush(stdout);
}

static int run_ids(const run_opts *o) {
    int32_t *prompt;
    int64_t n_prompt;
    if (parse_ids(o->ids_s, &prompt, &n_prompt) != 0) {
        fprintf(stderr, "tide run: --prompt-ids: expected comma-separated integers, got '%s'\n", o->ids_s);
        return TIDE_EXIT_USAGE;
    }
    tide_engine_config c = engine_config(o);
    c.max_seqs = 1;
    /* the whole prompt in one step unless --chunk says otherwise */
    if (c.max_step_tokens < n_prompt) c.max_step_tokens = n_prompt;
    if (!o->chunk) c.prefill_chunk = 0;
    c.on_event = print_token;
    tide_status st = {0};
    tide_engine *e = NULL;
    int rc = TIDE_EXIT_FAIL;
    double t0 = tide_now_seconds();
    if (tide_engine_create(&c, &e, &st) != 0) goto done;
    double t1 = tide_now_seconds();
    if (o->max_tokens == 0) { /* nothing to generate */
        printf("\n");
        rc = TIDE_EXIT_OK;
        goto done;
    }
    int32_t eos = TIDE_EOS_ID;
    tide_request r = tide_request_default();
    r.prompt = prompt;
    r.n_prompt = n_prompt;
    r.sampling.temperature = 0;
    r.sampling.max_tokens = o->max_tokens;
    r.sampling.stop_tokens = o->ignore_eos ? NULL : &eos;
    r.sampling.n_stop_tokens = o->ignore_eos ? 0 : 1;
    tide_request_id id;
    if (tide_engine_submit(e, &r, &id, &st) != 0) goto done;
    if (tide_engine_run(e, &st) != 0) goto done;
    printf("\n");
    fflush(stdout);
    tide_request_info info;
    if (tide_engine_get(e, id, &info, &st) != 0) goto done;
    if (info.reason == TIDE_FINISH_ERROR) {
        tide_fail(&st, TIDE_ERR_INTERNAL, "%s", info.error);
        goto done;
    }
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    double t2 = tide_now_seconds();
    fprintf(stderr,
            "tide run: load %.2f s; %lld prompt + %lld generated tokens in %lld steps, %.3f s (%.1f tok/s through the model, %.2f generated tok/s), %lld threads\n",
            t1 - t0, (long long)n_prompt, (long long)info.n_output, (long long)s.steps, t2 - t1,
            s.tokens_per_s, s.generated_per_s, o->threads);
    rc = TIDE_EXIT_OK;
done:
    if (rc != TIDE_EXIT_OK) fprintf(stderr, "tide run: %s\n", st.msg);
    tide_engine_destroy(e);
    free(prompt);
    return rc;
}

/* ---- --input: a JSONL batch ---- */

typedef struct batch {
    FILE *out;
    json_t **ids;          /* [request id] the line's "id" (index by request id) */
    int64_t n_ids, cap_ids;
    tide_request_id *done; /* finished, to release after the step */
    int64_t n_done, cap_done;
    int64_t n_lines, n_finished, n_errors;
    int write_failed;
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
    char *s = json_dumps(o, JSON_COMPACT);
    if (!s || fprintf(b->out, "%s\n", s) < 0) b->write_failed = 1;
    free(s);
    json_decref(o);
    b->n_finished++;
    if (error) b->n_errors++;
}

static void on_event(void *ctx, const tide_event *ev) {
    batch *b = ctx;
    if (ev->kind != TIDE_EVENT_FINISHED) return;
    int64_t slot = (int64_t)(intptr_t)ev->user;
    write_result(b, b->ids[slot], ev->output, ev->n_output, tide_finish_reason_name(ev->reason),
                 ev->n_prompt, ev->n_cached, ev->error);
    if (b->n_done < b->cap_done) b->done[b->n_done++] = ev->id;
}

static int get_num(json_t *o, const char *k, double lo, double hi, float *out, tide_status *st) {
    json_t *v = json_object_get(o, k);
    if (!v) return 0;
    if (!json_is_number(v)) return tide_fail(st, TIDE_ERR_INVALID, "\"%s\": expected a number, got %s", k, tide_json_kind(v));
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return tide_fail(st, TIDE_ERR_INVALID, "\"%s\": %g is outside [%g, %g]", k, x, lo, hi);
    *out = (float)x;
    return 0;
}

static int get_int(json_t *o, const char *k, long long lo, long long hi, long long *out, tide_status *st) {
    json_t *v = json_object_get(o, k);
    if (!v) return 0;
    if (!json_is_integer(v)) return tide_fail(st, TIDE_ERR_INVALID, "\"%s\": expected an integer, got %s", k, tide_json_kind(v));
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return tide_fail(st, TIDE_ERR_INVALID, "\"%s\": %lld is outside [%lld, %lld]", k, x, lo, hi);
    *out = x;
    return 0;
}

/* A list of token ids; *out is malloc'd (NULL when empty). */
static int get_ids(json_t *o, const char *k, int32_t **out, int64_t *n, tide_status *st) {
    *out = NULL;
    *n = 0;
    json_t *v = json_object_get(o, k);
    if (!v) return 0;
    if (!json_is_array(v)) return tide_fail(st, TIDE_ERR_INVALID, "\"%s\": expected an array of token ids, got %s", k, tide_json_kind(v));
    size_t len = json_array_size(v);
    if (len == 0) return 0;
    int32_t *ids = malloc(len * sizeof *ids);
    if (!ids) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < len; i++) {
        json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || json_integer_value(x) < INT32_MIN || json_integer_value(x) > INT32_MAX) {
            free(ids);
            return tide_fail(st, TIDE_ERR_INVALID, "\"%s\"[%zu]: expected a token id, got %s", k, i, tide_json_kind(x));
        }
        ids[i] = (int32_t)json_integer_value(x);
    }
    *out = ids;
    *n = (int64_t)len;
    return 0;
}

static const char *const known_keys[] = {"id", "prompt_ids", "max_tokens", "temperature", "top_p", "top_k",
                                         "min_p", "repetition_penalty", "presence_penalty",
                                         "frequency_penalty", "seed", "stop_token_ids", "ignore_eos", "cache_salt",
                                         NULL};

/* Parses one request line and submits it. */
static int submit_line(tide_engine *e, json_t *o, const run_opts *ro, int64_t slot, tide_status *st) {
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        int ok = 0;
        for (int i = 0; known_keys[i] && !ok; i++) ok = !strcmp(key, known_keys[i]);
        if (!ok && !strcmp(key, "prompt"))
            return tide_fail(st, TIDE_ERR_UNSUPPORTED, "text prompts are not supported yet: give \"prompt_ids\"");
        if (!ok) return tide_fail(st, TIDE_ERR_INVALID, "unknown field \"%s\"", key);
    }
    tide_request r = tide_request_default();
    tide_sampling_params *p = &r.sampling;
    long long max_tokens = ro->max_tokens, top_k = 0, seed = 0;
    int32_t *prompt = NULL, *stop = NULL;
    int64_t n_prompt = 0, n_stop = 0;
    int rc = -1;
    if (get_ids(o, "prompt_ids", &prompt, &n_prompt, st) != 0 || get_ids(o, "stop_token_ids", &stop, &n_stop, st) != 0 ||
        get_int(o, "max_tokens", LLONG_MIN, LLONG_MAX, &max_tokens, st) != 0 ||
        get_int(o, "top_k", -1, INT32_MAX, &top_k, st) != 0 || get_num(o, "temperature", 0, 1e6, &p->temperature, st) != 0 ||
        get_num(o, "top_p", -1e30, 1e30, &p->top_p, st) != 0 || get_num(o, "min_p", -1e30, 1e30, &p->min_p, st) != 0 ||
        get_num(o, "repetition_penalty", -1e30, 1e30, &p->repetition_penalty, st) != 0 ||
        get_num(o, "presence_penalty", -1e30, 1e30, &p->presence_penalty, st) != 0 ||
        get_num(o, "frequency_penalty", -1e30, 1e30, &p->frequency_penalty, st) != 0)
        goto done;
    json_t *s = json_object_get(o, "seed");
    if (s) {
        if (!json_is_integer(s) || json_integer_value(s) < 0) {
            tide_fail(st, TIDE_ERR_INVALID, "\"seed\": expected a non-negative integer");
            goto done;
        }
        seed = json_integer_value(s);
        r.has_seed = 1;
        p->seed = (uint64_t)seed;
    }
    json_t *cs = json_object_get(o, "cache_salt");
    if (cs) {
        if (!json_is_integer(cs) || json_integer_value(cs) < 0) {
            tide_fail(st, TIDE_ERR_INVALID, "\"cache_salt\": expected a non-negative integer");
            goto done;
        }
        r.cache_salt = (uint64_t)json_integer_value(cs);
    }
    json_t *ie = json_object_get(o, "ignore_eos");
    if (ie && !json_is_boolean(ie)) {
        tide_fail(st, TIDE_ERR_INVALID, "\"ignore_eos\": expected a boolean, got %s", tide_json_kind(ie));
        goto done;
    }
    int ignore_eos = ie ? json_is_true(ie) : ro->ignore_eos;
    if (!ignore_eos) { /* EOS is one more stop token */
        int32_t *s2 = realloc(stop, (size_t)(n_stop + 1) * sizeof *s2);
        if (!s2) {
            tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
            goto done;
        }
        stop = s2;
        stop[n_stop++] = TIDE_EOS_ID;
    }
    if (!json_object_get(o, "prompt_ids")) {
        tide_fail(st, TIDE_ERR_MISSING, "missing \"prompt_ids\"");
        goto done;
    }
    p->top_k = (int32_t)top_k;
    p->max_tokens = max_tokens;
    p->stop_tokens = stop;
    p->n_stop_tokens = (int32_t)n_stop;
    r.prompt = prompt;
    r.n_prompt = n_prompt;
    r.user = (void *)(intptr_t)slot;
    rc = tide_engine_submit(e, &r, NULL, st);
done:
    free(prompt);
    free(stop);
    return rc;
}

static void progress(tide_engine *e, const batch *b, int final) {
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    fprintf(stderr,
            "tide run: %lld/%lld done, %lld running, %lld waiting, KV %lld/%lld blocks, %lld steps, "
            "%.1f tok/s (%.2f generated/s), last step %.3f s, %lld preemptions, prefix hits %lld/%lld tokens "
            "(%.1f%%), %lld pages cached%s\n",
            (long long)b->n_finished, (long long)b->n_lines, (long long)s.n_running, (long long)s.n_waiting,
            (long long)s.kv_blocks_used, (long long)s.kv_blocks_total, (long long)s.steps, s.tokens_per_s,
            s.generated_per_s, s.last_step_seconds, (long long)s.preemptions, (long long)s.prefix_hit_tokens,
            (long long)s.prefix_lookup_tokens, 100.0 * s.prefix_hit_rate, (long long)s.prefix_pages_cached,
            final ? " (end)" : "");
}

static int read_lines(tide_engine *e, FILE *in, const run_opts *o, batch *b) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t lineno = 0;
    while ((len = getline(&line, &cap, in)) > 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ')) line[--len] = 0;
        if (len == 0) continue;
        b->n_lines++;
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)len, JSON_REJECT_DUPLICATES, &je);
        tide_status st = {0};
        json_t *id = NULL;
        if (!j) tide_fail(&st, TIDE_ERR_FORMAT, "not JSON (%s at column %d)", je.text, je.column);
        else if (!json_is_object(j)) tide_fail(&st, TIDE_ERR_INVALID, "expected an object, got %s", tide_json_kind(j));
        else id = json_object_get(j, "id");
        json_t *idc = id ? json_incref(id) : json_integer(lineno);
        if (b->n_ids == b->cap_ids) {
            int64_t c = b->cap_ids ? 2 * b->cap_ids : 256;
            json_t **a = realloc(b->ids, (size_t)c * sizeof *a);
            if (!a) {
                json_decref(idc);
                json_decref(j);
                free(line);
                return -1;
            }
            b->ids = a;
            b->cap_ids = c;
        }
        b->ids[b->n_ids] = idc;
        if (j && json_is_object(j) && submit_line(e, j, o, b->n_ids, &st) == 0) {
            b->n_ids++;
        } else {
            char msg[TIDE_STATUS_MSG + 64];
            snprintf(msg, sizeof msg, "line %lld: %s", (long long)lineno, st.msg);
            fprintf(stderr, "tide run: %s\n", msg);
            write_result(b, idc, NULL, 0, "error", 0, 0, msg);
            json_decref(idc);
        }
        json_decref(j);
    }
    free(line);
    return ferror(in) ? -1 : 0;
}

static int run_jsonl(const run_opts *o) {
    int rc = TIDE_EXIT_FAIL;
    batch b;
    memset(&b, 0, sizeof b);
    tide_status st = {0};
    tide_engine *e = NULL;
    FILE *in = !strcmp(o->input, "-") ? stdin : fopen(o->input, "r");
    if (!in) {
        fprintf(stderr, "tide run: cannot open %s: %s\n", o->input, strerror(errno));
        return TIDE_EXIT_FAIL;
    }
    b.out = !o->output || !strcmp(o->output, "-") ? stdout : fopen(o->output, "w");
    if (!b.out) {
        fprintf(stderr, "tide run: cannot create %s: %s\n", o->output, strerror(errno));
        goto done;
    }
    tide_engine_config c = engine_config(o);
    c.on_event = on_event;
    c.event_ctx = &b;
    if (tide_engine_create(&c, &e, &st) != 0) {
        fprintf(stderr, "tide run: %s\n", st.msg);
        goto done;
    }
    if (read_lines(e, in, o, &b) != 0) {
        fprintf(stderr, "tide run: reading %s failed\n", o->input);
        goto done;
    }
    b.cap_done = 2 * (int64_t)c.max_seqs + 16; /* finished in one step: running + failed at admission */
    b.done = malloc((size_t)b.cap_done * sizeof *b.done);
    if (!b.done) goto done;
    double last = tide_now_seconds();
    while (tide_engine_busy(e)) {
        b.n_done = 0;
        if (tide_engine_step(e, &st) != 0) {
            fprintf(stderr, "tide run: %s\n", st.msg);
            goto done;
        }
        for (int64_t i = 0; i < b.n_done; i++) tide_engine_release(e, b.done[i]);
        if (tide_now_seconds() - last >= 1.0) {
            progress(e, &b, 0);
            last = tide_now_seconds();
        }
    }
    progress(e, &b, 1);
    if (fflush(b.out) != 0 || b.write_failed) {
        fprintf(stderr, "tide run: writing the results failed\n");
        goto done;
    }
    rc = b.n_errors ? TIDE_EXIT_FAIL : TIDE_EXIT_OK;
done:
    tide_engine_destroy(e);
    for (int64_t i = 0; i < b.n_ids; i++) json_decref(b.ids[i]);
    free(b.ids);
    free(b.done);
    if (in && in != stdin) fclose(in);
    if (b.out && b.out != stdout) fclose(b.out);
    return rc;
}

int tide_cmd_run(int argc, char **argv) {
    run_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    return o.ids_s ? run_ids(&o) : run_jsonl(&o);
}
