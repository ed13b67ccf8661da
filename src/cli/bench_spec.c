/* tide bench spec: speculative decoding off / fixed:K / dspark at several
 * loads through the engine (measured), and the budget's simulation with
 * acceptance rates given on the command line (modelled: on random weights
 * the drafts are never right, so the measured acceptance means nothing
 * there; docs/spec.md). */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench/drive.h"
#include "bench/model_spec.h"
#include "bench/recorder.h"
#include "bench/workload.h"
#include "cli/bench.h"
#include "cli/cli.h"
#include "engine/engine.h"
#include "engine/request_jsonl.h"
#include "engine/spec.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide bench spec --model DIR|synth:SHAPE [options]\n"
            "\n"
            "For each load in --seqs and each mode in --modes: a fresh engine runs that many\n"
            "greedy requests at once (random prompts of --prompt tokens, --gen tokens each) and\n"
            "prints the accepted length (tokens per sequence-step), the drafts verified per\n"
            "sequence-step, the steps, and the generated tokens per second of the whole run.\n"
            "The engine profiles the budget's cost model at start-up on the running backend\n"
            "(printed). With --acceptance, the budget is also simulated at every load with\n"
            "those per-position acceptance rates and the profiled (or --costs) costs.\n"
            "Every mode runs in the engine's default layout (the same tokens as off). The CPU\n"
            "seconds of each run (every thread, getrusage) are printed too, and the generated\n"
            "tokens per CPU second: on a shared machine the wall time measures the load.\n"
            "\n"
            "options:\n"
            "  --model SPEC         checkpoint directory, or synth:tiny|small|flash|flash-ep8\n"
            "  --seqs LIST          loads (default 1,16,32,48,60,72,96)\n"
            "  --modes LIST         comma-separated modes (default off,fixed:5,dspark)\n"
            "  --prompt N           prompt tokens (default 16)\n"
            "  --gen N              tokens generated per request (default 32)\n"
            "  --input FILE         prompts from a JSONL file in the format of 'tide run --input'\n"
            "                       (\"prompt_ids\"; only the prompts are used): load n takes the\n"
            "                       first n, cycling (real text, where drafts can be right)\n"
            "  --acceptance LIST    per-position acceptance rates in percent, e.g. 80,70,60,50,40\n"
            "  --costs A,B,C        the cost model in microseconds (pass, per row, draft per\n"
            "                       sequence) instead of the profile, for the simulation\n"
            "  --no-run             only the simulation (needs --acceptance)\n");
    tide_bench_engine_help(f);
}

typedef struct spec_opts {
    const char *model, *modes, *input;
    bench_list seqs, acc, costs;
    int64_t prompt, gen;
    int no_run;
    bench_engine_opts eng;
} spec_opts;

void tide_bench_spec_report(const tide_engine_stats *s) {
    double seq_steps = s->spec_seq_steps > 0 ? (double)s->spec_seq_steps : 1;
    printf("  speculation      accepted length %.3f, verified %.3f per sequence-step, %lld of %lld drafts "
           "accepted, drafting %.3f s\n",
           1.0 + (double)s->spec_accepted / seq_steps, (double)s->spec_verified / seq_steps,
           (long long)s->spec_accepted, (long long)s->spec_verified, s->spec_draft_seconds);
    printf("  cost model       pass %.3g s + %.3g s per row, draft %.3g s per sequence (profiled at start-up)\n",
           s->spec_verify_fixed_s, s->spec_verify_token_s, s->spec_draft_seq_s);
}

/* --input: the prompts of a JSONL request file, as views. */
typedef struct prompt_file {
    tide_bench_jsonl f;
    const int32_t **p;
    int64_t *n;
} prompt_file;

static void prompts_free(prompt_file *pf) {
    tide_bench_jsonl_free(&pf->f);
    free(pf->p);
    free(pf->n);
    memset(pf, 0, sizeof *pf);
}

static int prompts_read(const char *path, prompt_file *pf, tide_status *st) {
    memset(pf, 0, sizeof *pf);
    if (tide_bench_jsonl_read(path, 1, &pf->f, st) != 0) return -1;
    pf->p = malloc((size_t)pf->f.n * sizeof *pf->p);
    pf->n = malloc((size_t)pf->f.n * sizeof *pf->n);
    if (!pf->p || !pf->n) {
        prompts_free(pf);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory for %lld prompts", (long long)pf->f.n);
    }
    for (int64_t i = 0; i < pf->f.n; i++) {
        pf->p[i] = pf->f.r[i].req.prompt;
        pf->n[i] = pf->f.r[i].req.n_prompt;
    }
    return 0;
}

static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)u.ru_stime.tv_usec;
}

/* One measured run: n requests at once under mode (wall and CPU time of
 * the drive, engine creation and its profile excluded). */
static int run_once(const spec_opts *o, const tide_model *m, const tide_workload *w, int mode, int k,
                    tide_engine_stats *s, double *wall, double *cpu, tide_status *st) {
    tide_recorder rec;
    if (tide_recorder_init(&rec, w->n, w->n * w->max_tokens, st) != 0) return -1;
    tide_engine_config c = tide_bench_engine_config(&o->eng);
    c.on_event = tide_recorder_on_event;
    c.event_ctx = &rec;
    c.spec_mode = mode;
    c.spec_k = k;
    if (c.max_seqs < w->n) c.max_seqs = (int)w->n;
    tide_engine *e = NULL;
    tide_drive_result d;
    int rc = -1;
    if (tide_engine_create_with_model(&c, m, &e, st) != 0) goto done;
    double c0 = cpu_seconds();
    if (tide_drive(e, &rec, w, 0, w->n, &d, st) != 0) goto done;
    *cpu = cpu_seconds() - c0;
    if (rec.n_errors) {
        tide_fail(st, TIDE_ERR_INTERNAL, "%lld requests failed; the first: %s", (long long)rec.n_errors, rec.first_error);
        goto done;
    }
    tide_engine_get_stats(e, s);
    *wall = d.wall;
    rc = 0;
done:
    tide_engine_destroy(e);
    tide_recorder_free(&rec);
    return rc;
}

/* The modes of --modes, parsed. */
static int parse_modes(const char *list, int *mode, int *k, int max, tide_status *st) {
    char buf[256];
    if (strlen(list) >= sizeof buf) return tide_fail(st, TIDE_ERR_INVALID, "--modes: too long");
    strcpy(buf, list);
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == max) return tide_fail(st, TIDE_ERR_INVALID, "--modes: at most %d", max);
        if (tide_spec_parse(t, &mode[n], &k[n], st) != 0) return -1;
        n++;
    }
    if (n == 0) return tide_fail(st, TIDE_ERR_INVALID, "--modes: empty");
    return n;
}

static void simulate(const spec_opts *o, const tide_spec_costs *c, int block, const int *mode, const int *k, int nm) {
    float acc[TIDE_SPEC_MAX_BLOCK];
    for (int j = 0; j < block; j++) acc[j] = j < o->acc.n ? (float)o->acc.v[j] / 100.0f : 0.0f;
    printf("simulation: acceptance per draft position");
    for (int j = 0; j < block; j++) printf(" %.2f", acc[j]);
    printf("; costs: pass %.3g s + %.3g s per row, draft %.3g s per sequence\n", c->verify_fixed,
           c->verify_per_token, c->draft_per_seq);
    printf("  %5s %-9s %10s %10s %14s %9s\n", "seqs", "mode", "tok/seq", "verified", "tokens/s", "vs off");
    for (int i = 0; i < o->seqs.n; i++) {
        double base = 0;
        for (int x = 0; x < nm; x++) {
            double tok, ver, sec;
            int kk = mode[x] == TIDE_SPEC_FIXED && k[x] > block ? block : k[x];
            tide_spec_simulate(c, mode[x], kk, (int)o->seqs.v[i], block, acc, &tok, &ver, &sec);
            double tps = tok * (double)o->seqs.v[i] / sec;
            if (mode[x] == TIDE_SPEC_OFF) base = tps;
            char name[24];
            printf("  %5lld %-9s %10.3f %10.3f %14.1f %8s", (long long)o->seqs.v[i], tide_spec_name(mode[x], k[x], name, sizeof name),
                   tok, ver, tps, "");
            if (base > 0 && mode[x] != TIDE_SPEC_OFF) printf("%+.1f%%", 100.0 * (tps / base - 1));
            printf("\n");
        }
    }
}

int tide_bench_spec(int argc, char **argv) {
    spec_opts o = {.modes = "off,fixed:5,dspark", .prompt = 16, .gen = 32};
    const int64_t loads[] = {1, 16, 32, 48, 60, 72, 96};
    for (int i = 0; i < 7; i++) o.seqs.v[i] = loads[i];
    o.seqs.n = 7;
    tide_bench_engine_defaults(&o.eng);
    bench_opt t[9 + BENCH_ENGINE_OPTS + 1] = {
        {"--model", BENCH_STR, &o.model, 0, 0},
        {"--seqs", BENCH_LIST, &o.seqs, 1, 4096},
        {"--modes", BENCH_STR, &o.modes, 0, 0},
        {"--prompt", BENCH_INT, &o.prompt, 1, 1 << 20},
        {"--gen", BENCH_INT, &o.gen, 1, 1 << 20},
        {"--acceptance", BENCH_LIST, &o.acc, 0, 100},
        {"--costs", BENCH_LIST, &o.costs, 0, 1000000000},
        {"--no-run", BENCH_FLAG, &o.no_run, 0, 0},
        {"--input", BENCH_STR, &o.input, 0, 0},
    };
    int nt = 9;
    tide_bench_engine_table(&o.eng, t, &nt);
    int rc = tide_bench_parse("spec", argc, argv, t, usage);
    if (rc >= 0) return rc;
    if (!o.model) return tide_bench_usage_error("spec", usage, "--model is required");
    if (o.costs.n != 0 && o.costs.n != 3) return tide_bench_usage_error("spec", usage, "--costs takes three values");
    if (o.no_run && o.acc.n == 0) return tide_bench_usage_error("spec", usage, "--no-run needs --acceptance");
    int mode[8], k[8];
    tide_status st = {0};
    int nm = parse_modes(o.modes, mode, k, 8, &st);
    if (nm < 0) return tide_bench_usage_error("spec", usage, "%s", st.msg);

    tide_model *m = NULL;
    prompt_file pf = {0};
    rc = TIDE_EXIT_FAIL;
    if (o.input && prompts_read(o.input, &pf, &st) != 0) goto done;
    tide_spec_costs costs = {0};
    if (tide_bench_load_model(o.model, (int)o.eng.threads, &m, &st) != 0) goto done;
    if (!m->has_dspark) {
        tide_fail(&st, TIDE_ERR_UNSUPPORTED, "%s has no DSpark stages", o.model);
        goto done;
    }
    int block = (int)m->cfg.text.dspark_block_size;
    if (o.input) printf("tide bench spec: model %s, prompts of %s, gen %lld, draft block %d, threads %lld\n", o.model,
                        o.input, (long long)o.gen, block, (long long)o.eng.threads);
    else
        printf("tide bench spec: model %s, prompt %lld, gen %lld, draft block %d, threads %lld, seed %lld\n", o.model,
               (long long)o.prompt, (long long)o.gen, block, (long long)o.eng.threads, (long long)o.eng.seed);
    if (!o.no_run) {
        printf("  %5s %-9s %8s %8s %6s %10s %7s %9s %10s %8s  %s\n", "seqs", "mode", "tok/seq", "verified", "steps",
               "gen tok/s", "vs off", "cpu s", "tok/cpu-s", "vs off", "draft s; cost model (ms: pass + row, draft)");
        for (int i = 0; i < o.seqs.n; i++) {
            tide_workload w = {0};
            if (o.input ? tide_workload_cycle(&w, pf.p, pf.n, pf.f.n, o.seqs.v[i], o.gen, &st) != 0
                        : tide_workload_random(&w, o.seqs.v[i], o.prompt, o.prompt, o.gen, m->cfg.text.vocab_size,
                                               m->cfg.image_token_id, (uint64_t)o.eng.seed + (uint64_t)i, &st) != 0)
                goto done;
            double base = 0, cbase = 0;
            for (int x = 0; x < nm; x++) {
                tide_engine_stats s;
                double wall, cpu = 0;
                if (run_once(&o, m, &w, mode[x], k[x], &s, &wall, &cpu, &st) != 0) {
                    tide_workload_free(&w);
                    goto done;
                }
                if (mode[x] == TIDE_SPEC_DSPARK && o.costs.n == 0)
                    costs = (tide_spec_costs){s.spec_verify_fixed_s, s.spec_verify_token_s, s.spec_draft_seq_s};
                double seq_steps = s.spec_seq_steps > 0 ? (double)s.spec_seq_steps : 1;
                double tok = mode[x] == TIDE_SPEC_OFF ? 1.0 : 1.0 + (double)s.spec_accepted / seq_steps;
                double ver = (double)s.spec_verified / seq_steps, tps = (double)s.tokens_generated / wall;
                double cps = cpu > 0 ? (double)s.tokens_generated / cpu : 0;
                if (mode[x] == TIDE_SPEC_OFF) {
                    base = tps;
                    cbase = cps;
                }
                char name[24], vs[16] = "", cvs[16] = "";
                if (base > 0 && mode[x] != TIDE_SPEC_OFF) snprintf(vs, sizeof vs, "%+.1f%%", 100.0 * (tps / base - 1));
                if (cbase > 0 && mode[x] != TIDE_SPEC_OFF)
                    snprintf(cvs, sizeof cvs, "%+.1f%%", 100.0 * (cps / cbase - 1));
                printf("  %5lld %-9s %8.3f %8.3f %6lld %10.1f %7s %9.2f %10.2f %8s", (long long)o.seqs.v[i],
                       tide_spec_name(mode[x], k[x], name, sizeof name), tok, ver, (long long)s.steps, tps, vs, cpu,
                       cps, cvs);
                if (mode[x] != TIDE_SPEC_OFF)
                    printf("  %.2f; %.1f + %.1f, %.1f", s.spec_draft_seconds, 1e3 * s.spec_verify_fixed_s,
                           1e3 * s.spec_verify_token_s, 1e3 * s.spec_draft_seq_s);
                printf("\n");
                fflush(stdout);
            }
            tide_workload_free(&w);
        }
        if (costs.verify_fixed + costs.verify_per_token > 0)
            printf("  cost model (profiled at start-up): pass %.3g s + %.3g s per row, draft %.3g s per sequence\n",
                   costs.verify_fixed, costs.verify_per_token, costs.draft_per_seq);
    }
    if (o.acc.n > 0) {
        if (o.costs.n == 3)
            costs = (tide_spec_costs){o.costs.v[0] * 1e-6, o.costs.v[1] * 1e-6, o.costs.v[2] * 1e-6};
        else if (costs.verify_fixed + costs.verify_per_token <= 0) {
            /* --no-run: profile once through an engine */
            tide_engine_config c = tide_bench_engine_config(&o.eng);
            c.spec_mode = TIDE_SPEC_DSPARK;
            tide_engine *e;
            if (tide_engine_create_with_model(&c, m, &e, &st) != 0) goto done;
            tide_engine_stats s;
            tide_engine_get_stats(e, &s);
            costs = (tide_spec_costs){s.spec_verify_fixed_s, s.spec_verify_token_s, s.spec_draft_seq_s};
            tide_engine_destroy(e);
        }
        simulate(&o, &costs, block, mode, k, nm);
    }
    rc = TIDE_EXIT_OK;
done:
    if (rc != TIDE_EXIT_OK) fprintf(stderr, "tide bench spec: %s\n", st.msg);
    tide_model_free(m);
    prompts_free(&pf);
    return rc;
}
