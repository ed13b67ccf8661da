/* tide bench roofline: the roofline model (bench/roofline.h) of decode and
 * prefill steps for a shape or a checkpoint's config, under given ceilings
 * (default: the H200's nominal HBM3e bandwidth and dense FP8 rate), without
 * loading any weights. Also the roofline printer the step modes share. */
#include <string.h>

#include "bench/model_spec.h"
#include "bench/roofline.h"
#include "cli/bench.h"
#include "cli/cli.h"
#include "model/config.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide bench roofline (--shape NAME | --model DIR|synth:SHAPE) [options]\n"
            "\n"
            "Prints the roofline of decode steps (batch B x context C) and prefills (L tokens)\n"
            "from the model config alone (docs/perf.md): bytes moved, FLOPs, and the roofline\n"
            "time max(bytes / bandwidth, FLOPs / rate) under the given ceilings. Nothing is\n"
            "measured and no weights are read. The defaults are the H200's nominal figures\n"
            "(HBM3e 4.8 TB/s, dense FP8 1979 TFLOP/s); 'tide bench decode' measures them.\n"
            "\n"
            "options:\n"
            "  --shape NAME       tiny | small | flash | flash-ep8\n"
            "  --model SPEC       a checkpoint directory (its config.json only) or synth:SHAPE\n"
            "  --batch LIST       decode batch sizes (default 1,32,256)\n"
            "  --context LIST     decode contexts (default 4096,131072)\n"
            "  --len LIST         prefill lengths (default 8192)\n"
            "  --kv packed|f32    cache dtypes (default packed: FP8 window, FP4 latents and keys)\n"
            "  --bw-gbs N         memory bandwidth in GB/s (default 4800)\n"
            "  --tflops N         GEMM rate in TFLOP/s (default 1979)\n"
            "  --detail           after each row, the bytes and FLOPs by part\n");
}

void tide_bench_print_roofline(const tide_roof *r, const char *kv, double bw, double rate, double measured) {
    char a[8][32];
    double w = r->w_dense + r->w_experts + r->w_head + r->w_gather;
    double k = r->kv_window + r->kv_latent + r->kv_index + r->kv_write;
    printf("  roofline bytes   %s = weights %s (dense %s, experts %s: %.1f of %lld per layer, head %s, rows gathered %s)\n",
           tide_bench_si(r->bytes, "B", a[0], 32), tide_bench_si(w, "B", a[1], 32),
           tide_bench_si(r->w_dense, "B", a[2], 32), tide_bench_si(r->w_experts, "B", a[3], 32), r->experts_touched,
           (long long)r->n_experts, tide_bench_si(r->w_head, "B", a[4], 32), tide_bench_si(r->w_gather, "B", a[5], 32));
    printf("                   + KV %s (%s: window %s, latents %s, index keys %s, writes %s)\n",
           tide_bench_si(k, "B", a[0], 32), kv, tide_bench_si(r->kv_window, "B", a[1], 32),
           tide_bench_si(r->kv_latent, "B", a[2], 32), tide_bench_si(r->kv_index, "B", a[3], 32),
           tide_bench_si(r->kv_write, "B", a[4], 32));
    printf("  roofline flops   %s = GEMM %s + attention %s + indexer %s\n", tide_bench_si(r->flops, "FLOP", a[0], 32),
           tide_bench_si(r->f_gemm, "FLOP", a[1], 32), tide_bench_si(r->f_attn, "FLOP", a[2], 32),
           tide_bench_si(r->f_index, "FLOP", a[3], 32));
    int mem;
    double t = tide_roof_time(r, bw, rate, &mem);
    printf("  roofline time    %.4g ms = max(bytes/BW %.4g ms, flops/rate %.4g ms): %s bound\n", 1e3 * t,
           1e3 * r->bytes / bw, 1e3 * r->flops / rate, mem ? "memory" : "compute");
    if (measured > 0) printf("  roofline/measured %.3f\n", t / measured);
}

typedef struct roof_opts {
    const char *shape, *model, *kv;
    bench_list batch, context, len;
    int64_t bw_gbs, tflops;
    int detail;
} roof_opts;

static int load_config(const roof_opts *o, tide_config *cfg, tide_status *st) {
    const char *shape = o->shape ? o->shape : tide_bench_synth_shape(o->model);
    if (shape) return tide_config_preset(shape, cfg, st);
    return tide_config_load(o->model, cfg, st);
}

static void row(const char *label, const tide_roof *r, double bw, double rate, int64_t tokens) {
    char a[4][32];
    int mem;
    double t = tide_roof_time(r, bw, rate, &mem);
    printf("%-24s %10s %10s %10s %10s %9.3f %9.3f %9.3f %-7s %12.0f\n", label, tide_bench_si(r->bytes, "B", a[0], 32),
           tide_bench_si(r->w_experts, "B", a[1], 32),
           tide_bench_si(r->kv_window + r->kv_latent + r->kv_index + r->kv_write, "B", a[2], 32),
           tide_bench_si(r->flops, "FLOP", a[3], 32), 1e3 * r->bytes / bw, 1e3 * r->flops / rate, 1e3 * t,
           mem ? "memory" : "compute", (double)tokens / t);
}

int tide_bench_roofline(int argc, char **argv) {
    roof_opts o = {.kv = "packed", .batch = {{1, 32, 256}, 3}, .context = {{4096, 131072}, 2}, .len = {{8192}, 1},
                   .bw_gbs = 4800, .tflops = 1979};
    bench_opt t[] = {
        {"--shape", BENCH_STR, &o.shape, 0, 0},
        {"--model", BENCH_STR, &o.model, 0, 0},
        {"--batch", BENCH_LIST, &o.batch, 1, 1 << 20},
        {"--context", BENCH_LIST, &o.context, 0, (int64_t)1 << 30},
        {"--len", BENCH_LIST, &o.len, 1, (int64_t)1 << 24},
        {"--kv", BENCH_STR, &o.kv, 0, 0},
        {"--bw-gbs", BENCH_INT, &o.bw_gbs, 1, 1000000000},
        {"--tflops", BENCH_INT, &o.tflops, 1, 1000000000},
        {"--detail", BENCH_FLAG, &o.detail, 0, 0},
        {NULL, BENCH_FLAG, NULL, 0, 0},
    };
    int rc = tide_bench_parse("roofline", argc, argv, t, usage);
    if (rc >= 0) return rc;
    if (!o.shape == !o.model) return tide_bench_usage_error("roofline", usage, "give one of --shape and --model");
    if (strcmp(o.kv, "f32") && strcmp(o.kv, "packed"))
        return tide_bench_usage_error("roofline", usage, "--kv: '%s' is neither f32 nor packed", o.kv);
    tide_status st = {0};
    tide_config cfg;
    if (load_config(&o, &cfg, &st) != 0) {
        fprintf(stderr, "tide bench roofline: %s\n", st.msg);
        return o.shape ? TIDE_EXIT_USAGE : TIDE_EXIT_FAIL;
    }
    tide_roof_kv kv = !strcmp(o.kv, "packed") ? tide_roof_kv_packed() : tide_roof_kv_f32();
    double bw = (double)o.bw_gbs * 1e9, rate = (double)o.tflops * 1e12;
    printf("tide bench roofline: %s, KV %s, ceilings %lld GB/s and %lld TFLOP/s\n", o.shape ? o.shape : o.model, o.kv,
           (long long)o.bw_gbs, (long long)o.tflops);
    printf("KV bytes/token %.2f (the paged pool's latents and index keys), window rings %.2f MiB per sequence\n",
           tide_roof_kv_token_bytes(&cfg, &kv), tide_roof_kv_ring_bytes(&cfg, &kv) / 1048576.0);
    printf("%-24s %10s %10s %10s %10s %9s %9s %9s %-7s %12s\n", "step", "bytes", "experts", "KV", "FLOPs", "mem ms",
           "flop ms", "roof ms", "bound", "tokens/s");
    for (int c = 0; c < o.context.n; c++)
        for (int b = 0; b < o.batch.n; b++) {
            tide_roof r;
            char label[64];
            if (tide_roof_decode(&cfg, &kv, o.batch.v[b], o.context.v[c], &r, &st) != 0) {
                fprintf(stderr, "tide bench roofline: %s\n", st.msg);
                return TIDE_EXIT_FAIL;
            }
            snprintf(label, sizeof label, "decode B=%lld C=%lld", (long long)o.batch.v[b], (long long)o.context.v[c]);
            row(label, &r, bw, rate, o.batch.v[b]);
            if (o.detail) tide_bench_print_roofline(&r, o.kv, bw, rate, 0);
        }
    for (int l = 0; l < o.len.n; l++) {
        tide_roof r;
        char label[64];
        if (tide_roof_prefill(&cfg, &kv, o.len.v[l], &r, &st) != 0) {
            fprintf(stderr, "tide bench roofline: %s\n", st.msg);
            return TIDE_EXIT_FAIL;
        }
        snprintf(label, sizeof label, "prefill L=%lld", (long long)o.len.v[l]);
        row(label, &r, bw, rate, o.len.v[l]);
        if (o.detail) tide_bench_print_roofline(&r, o.kv, bw, rate, 0);
    }
    return TIDE_EXIT_OK;
}
