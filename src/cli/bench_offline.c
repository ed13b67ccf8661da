/* tide bench offline: throughput and latency of a workload through the
 * public engine API (include/tide.h), timestamps from the event callback
 * (bench/recorder.h). The workload is generated (bench/workload.h) or read
 * from a JSONL request file, the format of `tide run --input`
 * (engine/request_jsonl.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "bench/drive.h"
#include "bench/model_spec.h"
#include "bench/roofline.h"
#include "bench/stats.h"
#include "bench/workload.h"
#include "cli/bench.h"
#include "cli/cli.h"
#include "engine/request_jsonl.h"
#include "engine/engine.h"

#define DEFAULT_REQUESTS 16
#define DEFAULT_LEN_LO 16
#define DEFAULT_LEN_HI 64

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide bench offline --model DIR|synth:SHAPE [options]\n"
            "       tide bench offline --model DIR|synth:SHAPE --input FILE.jsonl [options]\n"
            "\n"
            "Submits a workload to the engine at once (or --concurrency C at a time) and\n"
            "steps until it is done. Prints requests/s, prompt and generated tokens/s over\n"
            "the wall time from the first submission to the end (model load and reading the\n"
            "input excluded), TTFT p50/p90/p99 (each request's submission to its first token\n"
            "event), inter-token latency p50/p99, steps and the mean batch. The prefix cache\n"
            "is on, as in the engine's default.\n"
            "\n"
            "Generated workload (default): N requests with random prompts (lengths uniform\n"
            "in A..B) and greedy decoding of exactly G tokens each (no stop tokens; random\n"
            "prompts share no pages).\n"
            "\n"
            "--input FILE.jsonl: the requests of a file in the format of 'tide run --input'\n"
            "(one JSON object per line: \"prompt_ids\", \"max_tokens\", sampling fields,\n"
            "\"stop_token_ids\", \"ignore_eos\", \"cache_salt\"; 'tide run --help'), each as\n"
            "its line says: a line without \"max_tokens\" generates up to G tokens, and the\n"
            "model's EOS ids (eos_token_id; none for synth:) end a request unless the line\n"
            "sets \"ignore_eos\". Blank lines are\n"
            "skipped. A malformed line or a request the engine rejects fails the run (exit\n"
            "1, the line named). Replaces --requests and --prompt-len; --seed then seeds\n"
            "only the lines without \"seed\" (the engine seed).\n"
            "\n"
            "options:\n"
            "  --model SPEC         checkpoint directory, or synth:tiny|small|flash|flash-ep8\n"
            "  --input FILE         JSONL requests instead of a generated workload ('-' = stdin)\n"
            "  --requests N         requests (default 16)\n"
            "  --prompt-len A[-B]   prompt tokens, uniform in A..B (default 16-64)\n"
            "  --gen G              tokens to generate per request (default 16; with --input,\n"
            "                       for lines without \"max_tokens\")\n"
            "  --concurrency C      at most C requests in flight: the next is submitted when one\n"
            "                       finishes, so TTFT counts from its own submission, not from a\n"
            "                       queue (1: one at a time, as 'tide bench serve --concurrency 1';\n"
            "                       default: all at once; not with --input)\n"
            "  --ttft-out FILE      one line per request: its index and TTFT in seconds\n");
    tide_bench_engine_help(f);
}

typedef struct offline_opts {
    const char *model, *input, *ttft_out;
    int64_t requests, len[2], gen, concurrency;
    bench_engine_opts eng;
} offline_opts;

typedef tide_bench_jsonl jsonl_workload;

void tide_bench_jsonl_free(jsonl_workload *w) {
    for (int64_t i = 0; i < w->n; i++) tide_jsonl_request_free(&w->r[i]);
    free(w->r);
    free(w->lineno);
    memset(w, 0, sizeof *w);
}

static int jsonl_push(jsonl_workload *w, tide_jsonl_request *r, int64_t lineno, tide_status *st) {
    if (w->n == w->cap) {
        int64_t c = w->cap ? 2 * w->cap : 64;
        tide_jsonl_request *a = realloc(w->r, (size_t)c * sizeof *a);
        if (a) w->r = a;
        int64_t *l = a ? realloc(w->lineno, (size_t)c * sizeof *l) : NULL;
        if (l) w->lineno = l;
        if (!a || !l) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory for %lld requests", (long long)c);
        w->cap = c;
    }
    int64_t len = r->req.n_prompt, gen = r->req.sampling.max_tokens;
    w->len_lo = w->n == 0 || len < w->len_lo ? len : w->len_lo;
    w->len_hi = len > w->len_hi ? len : w->len_hi;
    w->total_prompt += len;
    /* only a size hint for the recorder: clamp, never overflow */
    w->max_tokens_sum += gen > 0 ? (gen < (1 << 20) ? gen : (1 << 20)) : 0;
    if (w->max_tokens_sum > (1 << 24)) w->max_tokens_sum = 1 << 24;
    w->lineno[w->n] = lineno;
    w->r[w->n++] = *r;
    memset(r, 0, sizeof *r);
    return 0;
}

/* Reads and checks every line of path before the model is loaded, so a bad
 * file fails fast. */
int tide_bench_jsonl_read(const char *path, int64_t gen, jsonl_workload *w, tide_status *st) {
    memset(w, 0, sizeof *w);
    FILE *in = !strcmp(path, "-") ? stdin : fopen(path, "r");
    if (!in) return tide_fail(st, TIDE_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    const tide_jsonl_defaults d = {.max_tokens = gen, .ignore_eos = 0};
    char *line = NULL;
    size_t cap = 0, len;
    int64_t lineno = 0;
    int more, rc = 0;
    while (rc == 0 && (more = tide_jsonl_next_line(in, &line, &cap, &len, &lineno)) != 0) {
        if (more < 0) {
            rc = tide_fail(st, TIDE_ERR_IO, "reading %s failed", path);
            break;
        }
        tide_jsonl_request r;
        rc = tide_jsonl_request_parse(line, len, lineno, &d, &r, st);
        if (rc == 0) rc = jsonl_push(w, &r, lineno, st);
        tide_jsonl_request_free(&r); /* a no-op once pushed */
    }
    if (rc == 0 && w->n == 0) rc = tide_fail(st, TIDE_ERR_INVALID, "%s holds no requests", path);
    free(line);
    if (in != stdin) fclose(in);
    if (rc != 0) tide_bench_jsonl_free(w);
    return rc;
}

/* Submits every request of w at once (slot = its index), then steps until
 * the engine is idle, as tide_drive does for a generated workload. */
static int drive_jsonl(tide_engine *e, tide_recorder *rec, const jsonl_workload *w, tide_drive_result *out,
                       tide_status *st) {
    memset(out, 0, sizeof *out);
    double t0 = tide_now_seconds();
    for (int64_t i = 0; i < w->n; i++) {
        tide_request r = w->r[i].req;
        r.user = tide_recorder_slot(i);
        tide_recorder_submitted(rec, i);
        if (tide_engine_submit(e, &r, NULL, st) != 0) return tide_fail_ctx(st, "line %lld", (long long)w->lineno[i]);
    }
    return tide_drive_until_idle(e, rec, t0, out, st);
}

/* --ttft-out: "index seconds" per request that got a first token. */
static int write_ttft(const char *path, const tide_recorder *rec, tide_status *st) {
    FILE *f = fopen(path, "w");
    if (!f) return tide_fail(st, TIDE_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    for (int64_t i = 0; i < rec->n_ttft; i++) fprintf(f, "%lld %.9f\n", (long long)rec->ttft_slot[i], rec->ttft[i]);
    return fclose(f) == 0 ? 0 : tide_fail(st, TIDE_ERR_IO, "writing %s failed", path);
}

static void print_ms(const char *label, double *v, int64_t n, const double *ps, int nps) {
    tide_stats_sort(v, n);
    printf("  %-16s", label);
    for (int i = 0; i < nps; i++) printf(" p%g %.2f", ps[i], 1e3 * tide_stats_percentile(v, n, ps[i]));
    printf("  (ms, %lld samples)\n", (long long)n);
}

/* What the header line says of the workload. */
typedef struct summary {
    int64_t n, len_lo, len_hi, total_prompt;
} summary;

static void report(const offline_opts *o, const summary *w, tide_recorder *rec, const tide_drive_result *d,
                   const tide_engine *e, const tide_model *m) {
    double wall = d->wall > 0 ? d->wall : 1e-9;
    printf("tide bench offline: model %s, %lld requests", o->model, (long long)w->n);
    if (o->input) printf(" from %s", strcmp(o->input, "-") ? o->input : "stdin");
    printf(", prompt %lld-%lld tokens (%lld in all), ", (long long)w->len_lo, (long long)w->len_hi,
           (long long)w->total_prompt);
    if (!o->input) printf("%lld generated each, ", (long long)o->gen);
    if (o->concurrency) printf("concurrency %lld, ", (long long)o->concurrency);
    printf("seed %lld, threads %lld\n", (long long)o->eng.seed, (long long)o->eng.threads);
    printf("  wall             %.3f s\n", wall);
    printf("  requests/s       %.3f\n", (double)rec->n_finished / wall);
    printf("  prompt tok/s     %.1f\n", (double)w->total_prompt / wall);
    printf("  generated tok/s  %.1f (%lld tokens)\n", (double)rec->n_tokens_total / wall,
           (long long)rec->n_tokens_total);
    static const double p3[] = {50, 90, 99}, p2[] = {50, 99};
    print_ms("TTFT", rec->ttft, rec->n_ttft, p3, 3);
    print_ms("inter-token", rec->itl, rec->n_itl, p2, 2);
    printf("  steps            %lld, mean batch %.2f sequences (%.1f tokens)\n", (long long)d->steps,
           d->steps ? (double)d->sum_seqs / (double)d->steps : 0.0,
           d->steps ? (double)d->sum_tokens / (double)d->steps : 0.0);
    /* the pool's bytes per cached token against the roofline's packed figure */
    tide_engine_stats es;
    tide_engine_get_stats(e, &es);
    tide_roof_kv packed = tide_roof_kv_packed();
    printf("  KV bytes/token   %.2f in the pool (roofline packed %.2f); window rings %.2f MiB per sequence"
           " (DSpark stages too)\n",
           es.kv_bytes_per_token, tide_roof_kv_token_bytes(&m->cfg, &packed), (double)es.kv_ring_bytes / 1048576.0);
}

int tide_bench_offline(int argc, char **argv) {
    /* --requests and --prompt-len start at 0 = not given, so that --input can refuse them */
    offline_opts o = {.gen = 16};
    tide_bench_engine_defaults(&o.eng);
    bench_opt t[7 + BENCH_ENGINE_OPTS + 1] = {
        {"--model", BENCH_STR, &o.model, 0, 0},
        {"--input", BENCH_STR, &o.input, 0, 0},
        {"--requests", BENCH_INT, &o.requests, 1, 1000000},
        {"--prompt-len", BENCH_RANGE, o.len, 1, 1 << 24},
        {"--gen", BENCH_INT, &o.gen, 1, 1 << 24},
        {"--concurrency", BENCH_INT, &o.concurrency, 1, 1000000},
        {"--ttft-out", BENCH_STR, &o.ttft_out, 0, 0},
    };
    int nt = 7;
    tide_bench_engine_table(&o.eng, t, &nt);
    int rc = tide_bench_parse("offline", argc, argv, t, usage);
    if (rc >= 0) return rc;
    if (!o.model) return tide_bench_usage_error("offline", usage, "--model is required");
    if (o.input && (o.requests || o.len[0]))
        return tide_bench_usage_error("offline", usage, "--input replaces --requests and --prompt-len");
    if (o.input && o.concurrency) return tide_bench_usage_error("offline", usage, "--concurrency is for the generated workload");
    if (!o.requests) o.requests = DEFAULT_REQUESTS;
    if (!o.len[0]) {
        o.len[0] = DEFAULT_LEN_LO;
        o.len[1] = DEFAULT_LEN_HI;
    }

    tide_status st = {0};
    tide_model *m = NULL;
    tide_engine *e = NULL;
    tide_workload w = {0};
    jsonl_workload jw = {0};
    tide_recorder rec = {0};
    tide_drive_result d;
    summary sum;
    rc = TIDE_EXIT_FAIL;
    if (o.input && tide_bench_jsonl_read(o.input, o.gen, &jw, &st) != 0) goto done;
    if (tide_bench_load_model(o.model, (int)o.eng.threads, &m, &st) != 0) goto done;
    if (o.input) {
        sum = (summary){jw.n, jw.len_lo, jw.len_hi, jw.total_prompt};
        if (tide_recorder_init(&rec, jw.n, jw.max_tokens_sum, &st) != 0) goto done;
    } else {
        if (tide_workload_random(&w, o.requests, o.len[0], o.len[1], o.gen, m->cfg.text.vocab_size,
                                 m->cfg.image_token_id, (uint64_t)o.eng.seed, &st) != 0 ||
            tide_recorder_init(&rec, o.requests, o.requests * o.gen, &st) != 0)
            goto done;
        sum = (summary){w.n, o.len[0], o.len[1], w.total_prompt};
    }
    tide_engine_config c = tide_bench_engine_config(&o.eng);
    c.on_event = tide_recorder_on_event;
    c.event_ctx = &rec;
    if (strncmp(o.model, "synth:", 6) != 0) c.model_dir = o.model; /* its EOS ids (a synth: shape has none) */
    if (tide_engine_create_with_model(&c, m, &e, &st) != 0) goto done;
    if ((o.input ? drive_jsonl(e, &rec, &jw, &d, &st) : tide_drive_window(e, &rec, &w, 0, w.n, o.concurrency, &d, &st)) != 0)
        goto done;
    if (rec.n_errors) {
        tide_fail(&st, TIDE_ERR_INTERNAL, "%lld requests failed; the first: %s", (long long)rec.n_errors,
                  rec.first_error);
        goto done;
    }
    if (o.ttft_out && write_ttft(o.ttft_out, &rec, &st) != 0) goto done;
    report(&o, &sum, &rec, &d, e, m);
    if (c.spec_mode > 0) {
        tide_engine_stats es;
        tide_engine_get_stats(e, &es);
        tide_bench_spec_report(&es);
    }
    rc = TIDE_EXIT_OK;
done:
    if (rc != TIDE_EXIT_OK) fprintf(stderr, "tide bench offline: %s\n", st.msg);
    tide_engine_destroy(e);
    tide_model_free(m);
    tide_workload_free(&w);
    tide_bench_jsonl_free(&jw);
    tide_recorder_free(&rec);
    return rc;
}
