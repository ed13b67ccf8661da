/* The DSpark draft head against the numpy reference (tools/ref/model.py's
 * dspark_seed / dspark_step): a tiny checkpoint from a fresh seed, a prompt
 * prefilled (seeding the stage rings), then decode steps each followed by a
 * draft block; draft ids, draft logits (Markov bias included) and the
 * confidence logits compared. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dspark.h"
#include "model/forward.h"
#include "model/model.h"
#include "test_ops_util.h"

#define N_PROMPT 11
#define N_STEPS 3

static void test_dspark_vs_ref(void **state) {
    (void)state;
    uint64_t seed = tu_seed() % 100000 + 7;
    char *dir = tu_mkdtemp("dspark");
    assert_int_equal(tn_synth(dir, "tiny", seed), 0);
    if (!tn_has_tokenizer(dir)) { /* the oracle needs the stand-in tokenizer */
        tu_rmtree(dir);
        free(dir);
        TU_NEED_DEP(0, "the stand-in tokenizer", "scripts/oracle-deps.sh or $TIDE_TOKENIZER");
    }
    tide_status st = {0};
    tide_model *m;
    if (tide_model_load(dir, &m, &st) != 0) fail_msg("%s", st.msg);
    const tide_text_config *c = &m->cfg.text;
    int64_t V = c->vocab_size, B = c->dspark_block_size, T = c->n_dspark_target_layer_ids * c->hidden_size;
    int32_t p[N_PROMPT];
    tu_rng r = {seed};
    for (int i = 0; i < N_PROMPT; i++) p[i] = (int32_t)(3 + tu_next(&r) % 100000);

    /* the oracle (the engine computes its own RoPE frequencies) */
    char cmd[8192], ids[512] = "", b[32];
    for (int i = 0; i < N_PROMPT; i++) {
        snprintf(b, sizeof b, "%s%d", i ? "," : "", p[i]);
        strcat(ids, b);
    }
    snprintf(cmd, sizeof cmd,
             "cd '%s' && mkdir -p out && %s -c \"\nimport sys; sys.path.insert(0, '%s/tools/ref')\n"
             "import numpy as np, model as mdl\n"
             "m = mdl.Model('.'); st = m.new_state()\n"
             "o = m.forward(st, [%s]); m.dspark_seed(st, o['main_hidden'])\n"
             "g = int(np.argmax(o['logits'][-1])); toks=[g]; dr=[]; lg=[]; cf=[]\n"
             "for s in range(%d):\n"
             "    pos = st.pos; o = m.forward(st, [g]); g = int(np.argmax(o['logits'][-1])); toks.append(g)\n"
             "    r = m.dspark_step(st, pos, o['main_hidden'], g)\n"
             "    dr.append(r['draft_ids']); lg.append(r['logits']); cf.append(r['confidence'])\n"
             "sv = lambda n, a: np.save('out/' + n + '.npy', np.asarray(a).astype('<f8'))\n"
             "sv('toks', toks); sv('drafts', dr); sv('logits', lg); sv('conf', cf)\n"
             "\"",
             dir, TIDE_PYTHON, TIDE_SOURCE_DIR, ids, N_STEPS);
    assert_int_equal(tu_system(cmd, NULL), 0);
    int64_t n = 0;
    double *toks = tn_out(dir, "toks", &n);
    assert_int_equal(n, N_STEPS + 1);
    double *rdr = tn_out(dir, "drafts", &n);
    assert_int_equal(n, N_STEPS * (B + 1));
    double *rlg = tn_out(dir, "logits", &n);
    assert_int_equal(n, N_STEPS * B * V);
    double *rcf = tn_out(dir, "conf", &n);
    assert_int_equal(n, N_STEPS * B);
    /* the engine */
    tide_fwd_ctx *fx;
    tide_fwd_opts o = tide_fwd_default_opts();
    assert_int_equal(tide_fwd_ctx_create(m, tide_cpu_ops(), 2, &o, &fx, &st), 0);
    tide_seq_cache sc;
    assert_int_equal(tide_fwd_seq_init(fx, &sc, &st), 0);
    float *lg = malloc((size_t)V * sizeof(float)), *hid = malloc((size_t)(N_PROMPT * T) * sizeof(float));
    tide_step_seq s = {&sc, p, N_PROMPT, TIDE_LOGITS_LAST};
    tide_step_out out = {lg, hid};
    assert_int_equal(tide_forward(fx, &s, 1, &out, &st), 0);
    assert_int_equal(tide_dspark_seed(fx, &sc, hid, N_PROMPT, 0, &st), 0);
    int32_t draft[16];
    float *dl = malloc((size_t)(B * V) * sizeof(float)), conf[16];
    tide_dspark_out dout = {draft, dl, conf};
    double worst_l = 0, worst_c = 0;
    for (int k = 0; k < N_STEPS; k++) {
        int32_t tok = (int32_t)toks[k];
        int64_t pos = sc.pos;
        s.tokens = &tok;
        s.n_tokens = 1;
        assert_int_equal(tide_forward(fx, &s, 1, &out, &st), 0);
        int32_t next = (int32_t)toks[k + 1];
        if (tide_dspark_draft(fx, &sc, hid, pos, next, NULL, &dout, &st) != 0) fail_msg("%s", st.msg);
        for (int64_t j = 0; j <= B; j++) assert_int_equal(draft[j], (int32_t)rdr[k * (B + 1) + j]);
        for (int64_t i = 0; i < B * V; i++) worst_l = fmax(worst_l, fabs(dl[i] - rlg[k * B * V + i]));
        for (int64_t j = 0; j < B; j++) worst_c = fmax(worst_c, fabs(conf[j] - rcf[k * B + j]));
    }
    print_message("seed %llu: dspark max |draft logit err| %.6f, |confidence err| %.6f\n",
                  (unsigned long long)seed, worst_l, worst_c);
    assert_true(worst_l < 1e-3);
    assert_true(worst_c < 1e-3);
    free(toks);
    free(rdr);
    free(rlg);
    free(rcf);
    free(lg);
    free(hid);
    free(dl);
    tide_fwd_seq_free(fx, &sc);
    tide_fwd_ctx_free(fx);
    tide_model_free(m);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_dspark_vs_ref)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
