/* The device-resident composed step (backend/cuda/dev_step.h) on the tiny
 * and small shapes: planning (every buffer inside its allocation: under
 * tests/gpu/fake_cuda.c each pointer a kernel touches is bounds-checked,
 * under compute-sanitizer on the GPU likewise), the kernel sequence of a
 * decode step (several batch / pool layouts) and of a prefill, graph
 * capture and replay, finite logits, and the clear failures: a budget too
 * small for the weights, a context shorter than one compressed group.
 *
 * It checks that the step RUNS as planned, not what it computes (its values
 * are random by design; the model's numerics are checked by gpu_test_model
 * through the CUDA ops table). Built twice: as a GPU program (scripts/gpu)
 * and, in CI, against fake_cuda as the ctest dstep_host. */
#include "gpu_util.h"

#include "backend/cuda/dev_step.h"

typedef struct {
    const char *shape;
    int prefill;
    int64_t batch, context, pools;
} dcase;

static void run_case(gu_ctx *c, const dcase *k) {
    char name[96];
    snprintf(name, sizeof name, "%s/%s/B%lld/C%lld/P%lld", k->shape, k->prefill ? "prefill" : "decode",
             (long long)k->batch, (long long)k->context, (long long)k->pools);
    tide_status st = {0};
    tide_config cfg;
    if (tide_config_preset(k->shape, &cfg, &st) != 0) {
        gu_result(c, name, 0, "preset: %s", st.msg);
        return;
    }
    tide_dstep_opts o = {.prefill = k->prefill, .batch = k->batch, .context = k->context, .n_pools = k->pools,
                         .seed = c->seed};
    tide_dstep *s = NULL;
    if (tide_dstep_create(&cfg, &o, &s, &st) != 0) {
        gu_result(c, name, 0, "create: %s", st.msg);
        return;
    }
    int ok = 1;
    const char *why = "";
    int64_t finite = 0, total = 0;
    int32_t am = -1;
    if (tide_dstep_enqueue(s, &st) != 0 || tide_cuda_stream_sync(tide_dstep_stream(s), &st) != 0) {
        ok = 0;
        why = "eager step";
    } else if (!k->prefill && (tide_dstep_capture(s, &st) != 0 || tide_dstep_replay(s, &st) != 0 ||
                               tide_dstep_replay(s, &st) != 0)) {
        ok = 0;
        why = "graph capture / replay";
    } else if (tide_dstep_check_output(s, &finite, &total, &am, &st) != 0) {
        ok = 0;
        why = "reading the logits";
    }
    /* a replayed graph computes what the eager launches compute: both from
     * the state create left (bit for bit: the kernels are deterministic) */
    int64_t nl = (k->prefill ? 1 : k->batch) * cfg.text.vocab_size, diff = -1;
    if (ok && !k->prefill) {
        float *a = gu_xmalloc((size_t)nl * sizeof(float)), *b = gu_xmalloc((size_t)nl * sizeof(float));
        if (tide_dstep_reset(s, &st) != 0 || tide_dstep_enqueue(s, &st) != 0 || tide_dstep_logits(s, a, nl, &st) != 0 ||
            tide_dstep_reset(s, &st) != 0 || tide_dstep_replay(s, &st) != 0 || tide_dstep_logits(s, b, nl, &st) != 0) {
            ok = 0;
            why = "reset / eager / replay";
        } else {
            diff = 0;
            for (int64_t j = 0; j < nl; j++) diff += memcmp(&a[j], &b[j], sizeof(float)) != 0;
            if (diff) {
                ok = 0;
                why = "graph replay differs from the eager step";
            }
        }
        free(a);
        free(b);
    }
    tide_dstep_info info;
    tide_dstep_get_info(s, &info);
    int64_t want_pools = k->prefill ? 1 : (k->pools > 0 ? (k->pools < k->batch ? k->pools : k->batch) : k->batch);
    int64_t vocab = cfg.text.vocab_size;
    if (ok && (finite != total || total != (k->prefill ? 1 : k->batch) * vocab)) {
        ok = 0;
        why = "non-finite logits or a wrong logit count";
    }
    if (ok && (am < 0 || am >= vocab)) {
        ok = 0;
        why = "argmax out of range";
    }
    if (ok && (info.n_pools != want_pools || info.launches < 10 * cfg.text.num_hidden_layers)) {
        ok = 0;
        why = "pools or launch count";
    }
    gu_result(c, name, ok,
              "%s%s%s launches %lld, pools %lld, %lld/%lld logits finite, replay vs eager: %lld differ, weights %.1f "
              "MB, kv %.1f MB",
              why, *why ? ": " : "", ok ? "" : st.msg, (long long)info.launches, (long long)info.n_pools,
              (long long)finite, (long long)total, (long long)diff, info.weight_bytes / 1e6, info.pool_bytes / 1e6);
    tide_dstep_destroy(s);
}

static void bad_args(gu_ctx *c) {
    tide_status st = {0};
    tide_config cfg;
    if (tide_config_preset("tiny", &cfg, &st) != 0) {
        gu_result(c, "bad-args", 0, "preset: %s", st.msg);
        return;
    }
    tide_dstep *s = NULL;
    tide_dstep_opts o = {.batch = 2, .context = 100, .mem_budget = 1 << 16, .seed = 1};
    int rc = tide_dstep_create(&cfg, &o, &s, &st);
    int ok = rc != 0 && s == NULL && st.code == TIDE_ERR_NOMEM && strstr(st.msg, "exceed the budget");
    gu_result(c, "bad-args/budget", ok, "%s", st.msg);
    tide_dstep_opts o2 = {.batch = 1, .context = 1, .seed = 1};
    memset(&st, 0, sizeof st);
    rc = tide_dstep_create(&cfg, &o2, &s, &st);
    ok = rc != 0 && s == NULL && st.code == TIDE_ERR_INVALID;
    gu_result(c, "bad-args/short-context", ok, "%s", st.msg);
    tide_dstep_opts o3 = {.batch = 0, .context = 100, .seed = 1};
    memset(&st, 0, sizeof st);
    rc = tide_dstep_create(&cfg, &o3, &s, &st);
    gu_result(c, "bad-args/no-batch", rc != 0 && s == NULL && st.code == TIDE_ERR_INVALID, "%s", st.msg);
}

int main(void) {
    gu_ctx c;
    gu_init(&c, "gpu_test_dstep");
    static const dcase cases[] = {
        {"tiny", 0, 1, 70, 0},   {"tiny", 0, 5, 100, 2}, {"tiny", 0, 3, 9, 0},    {"tiny", 1, 1, 40, 0},
        {"tiny", 1, 1, 7, 0},    {"small", 0, 4, 64, 0}, {"small", 1, 1, 33, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&c, &cases[i]);
    bad_args(&c);
    return gu_finish(&c);
}
