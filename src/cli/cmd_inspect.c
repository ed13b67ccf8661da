/* tide inspect: summarise and verify a checkpoint directory: the config, the
 * derived layer-role table, tensor counts and bytes by dtype, and a check of
 * every tensor the manifest requires (name, dtype, shape). Exit 1 with a
 * message naming the problem when anything is missing or wrong. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/manifest.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide inspect DIR [options]\n"
            "\n"
            "Reads DIR/config.json and the safetensors shards in DIR, prints a config\n"
            "summary, the layer-role table (one row per layer, DSpark stages included),\n"
            "tensor counts and bytes by dtype, and verifies that every tensor the config\n"
            "requires is present with the right dtype and shape, and that no other\n"
            "text-model tensor is (vision tower tensors are counted, not used), then\n"
            "builds the engram tables: the same checks, in the same order, as loading\n"
            "the model for tide run (docs/model-config.md).\n"
            "\n"
            "options:\n"
            "  --config-only   check and print the config and roles; do not open the shards\n"
            "                  (DIR may then be the config.json file itself)\n"
            "  --tensors       also list every tensor of the checkpoint\n"
            "  -h, --help      this text\n"
            "\n"
            "Exit status: 0 the checkpoint is complete and consistent; 1 a problem (config,\n"
            "shard or tensor; the message names it); 2 bad usage.\n");
}

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

static void print_config(const tide_config *c) {
    const tide_text_config *x = &c->text;
    printf("config: %s / %s%s\n", c->model_type[0] ? c->model_type : "(no model_type)",
           x->model_type[0] ? x->model_type : "(no model_type)", c->synth.is_synthetic ? " (synthetic)" : "");
    if (c->synth.is_synthetic) {
        printf("  synthetic: shape %s, seed %" PRIu64 ", backbone layers written %lld of %lld%s\n", c->synth.shape,
               c->synth.seed, (long long)c->synth.written_layers, (long long)x->num_hidden_layers,
               c->synth.written_layers < x->num_hidden_layers ? " (PARTIAL: cannot run)" : "");
    }
    printf("  vocab %lld, hidden %lld, layers %lld + %lld DSpark stages\n", (long long)x->vocab_size,
           (long long)x->hidden_size, (long long)x->num_hidden_layers, (long long)x->num_nextn_predict_layers);
    printf("  attention: %lld heads x %lld (rope %lld), q_lora %lld, o %lld groups x %lld, window %lld\n",
           (long long)x->num_attention_heads, (long long)x->head_dim, (long long)x->qk_rope_head_dim,
           (long long)x->q_lora_rank, (long long)x->o_groups, (long long)x->o_lora_rank, (long long)x->sliding_window);
    printf("  indexer: %lld heads x %lld, top-k %lld; candidates: source %lld, %lld blocks of %lld\n",
           (long long)x->index_n_heads, (long long)x->index_head_dim, (long long)x->index_topk,
           (long long)x->candidate_source_layer_id, (long long)x->candidate_topk_blocks,
           (long long)x->candidate_block_size);
    printf("  moe: %lld routed (top %lld) + %lld shared, inter %lld, %s, scale %g; DSpark %lld (top %lld)\n",
           (long long)x->n_routed_experts, (long long)x->num_experts_per_tok, (long long)x->n_shared_experts,
           (long long)x->moe_intermediate_size, x->scoring_func, x->routed_scaling_factor,
           (long long)x->dspark_n_routed_experts, (long long)x->dspark_num_experts_per_tok);
    printf("  rope: theta %g; compressed layers %g with yarn x%g (original %lld)\n", x->rope_theta,
           x->compress_rope_theta, x->rope_scaling.factor, (long long)x->rope_scaling.original_max_position_embeddings);
    printf("  hc: %lld copies, %lld sinkhorn iterations; engram: %d layers, %lld-grams x %lld heads x %lld\n",
           (long long)x->hc_mult, (long long)x->hc_sinkhorn_iters, x->n_engram_layer_ids,
           (long long)x->engram_max_ngram_size, (long long)x->engram_n_heads, (long long)x->engram_head_dim);
    printf("  DSpark: block %lld, markov rank %lld, targets", (long long)x->dspark_block_size,
           (long long)x->dspark_markov_rank);
    for (int i = 0; i < x->n_dspark_target_layer_ids; i++) printf(" %d", x->dspark_target_layer_ids[i]);
    if (c->vision.present) printf("; vision tower: %lld layers\n", (long long)c->vision.num_hidden_layers);
    else printf("; text only (no vision_config)\n");
}

static void print_roles(const tide_config *c) {
    printf("\nlayer roles:\n  %-7s %-5s %-4s %-6s %-6s %-9s %-5s %-6s %-9s %-8s %s\n", "layer", "ratio", "kv",
           "topk", "keys", "cand", "engr", "dspark", "rope", "experts", "summary");
    for (int i = 0; i < c->n_layers; i++) {
        const tide_layer_role *r = &c->roles[i];
        char name[16], kv[8] = "-", tk[8] = "-", keys[8] = "-", cand[12] = "-", summ[160];
        if (r->is_dspark) snprintf(name, sizeof name, "mtp.%d", r->dspark_stage);
        else snprintf(name, sizeof name, "%d", i);
        if (r->compress_ratio) {
            snprintf(kv, sizeof kv, "%d", r->kv_source);
            snprintf(tk, sizeof tk, "%d", r->index_source);
        }
        if (r->is_index_source) snprintf(keys, sizeof keys, "%d", r->index_key_source);
        if (r->is_candidate_source) snprintf(cand, sizeof cand, "source");
        else if (r->uses_candidates) snprintf(cand, sizeof cand, "masked");
        char rope[16];
        snprintf(rope, sizeof rope, "%g%s", r->rope_theta, r->yarn ? "+y" : "");
        char ex[16];
        snprintf(ex, sizeof ex, "%d/%d", r->num_experts_per_tok, r->n_routed_experts);
        printf("  %-7s %-5d %-4s %-6s %-6s %-9s %-5s %-6s %-9s %-8s %s%s\n", name, r->compress_ratio, kv, tk, keys,
               cand, r->has_engram ? "yes" : "-", r->is_dspark_target ? "target" : "-", rope, ex,
               tide_layer_role_describe(r, summ, sizeof summ),
               (!r->is_dspark && i >= c->present_layers) ? " [not written]" : "");
    }
}

/* Lists up to `limit` manifest problems (the verify status names only the first). */
static void print_problems(const tide_manifest *m, const tide_st *ck, int limit) {
    int shown = 0;
    for (size_t i = 0; i < m->n && shown < limit; i++) {
        const tide_manifest_entry *e = &m->e[i];
        const tide_tensor *t = tide_st_find(ck, e->name);
        char a[64], b[64];
        if (!t) {
            fprintf(stderr, "  missing: %s (%s %s)\n", e->name, tide_dtype_name(e->dtype),
                    tide_shape_str(e->ndim, e->shape, a, sizeof a));
            shown++;
        } else if (t->dtype != e->dtype || t->ndim != e->ndim || t->shape[0] != e->shape[0] ||
                   (e->ndim > 1 && t->shape[1] != e->shape[1])) {
            fprintf(stderr, "  wrong: %s in %s is %s %s, expected %s %s\n", e->name, t->file, tide_dtype_name(t->dtype),
                    tide_shape_str(t->ndim, t->shape, a, sizeof a), tide_dtype_name(e->dtype),
                    tide_shape_str(e->ndim, e->shape, b, sizeof b));
            shown++;
        }
    }
}

static void print_tensors(const tide_st *ck, const tide_manifest *m, int list) {
    uint64_t bytes[TIDE_DT_COUNT] = {0};
    size_t count[TIDE_DT_COUNT] = {0}, extra = 0, vision = 0;
    char sh[64];
    for (size_t i = 0; i < tide_st_count(ck); i++) {
        const tide_tensor *t = tide_st_at(ck, i);
        bytes[t->dtype] += t->nbytes;
        count[t->dtype]++;
        if (!tide_manifest_find(m, t->name)) {
            extra++;
            if (tide_manifest_is_vision(t->name)) vision++;
        }
        if (list)
            printf("  %-60s %-8s %-20s %s\n", t->name, tide_dtype_name(t->dtype),
                   tide_shape_str(t->ndim, t->shape, sh, sizeof sh), t->file);
    }
    printf("\ntensors: %zu in %zu files, %" PRIu64 " bytes (%.2f GiB)\n", tide_st_count(ck), tide_st_nfiles(ck),
           tide_st_total_bytes(ck), gib(tide_st_total_bytes(ck)));
    for (int d = 0; d < TIDE_DT_COUNT; d++)
        if (count[d])
            printf("  %-8s %8zu tensors %16" PRIu64 " bytes (%.2f GiB)\n", tide_dtype_name((tide_dtype)d), count[d],
                   bytes[d], gib(bytes[d]));
    if (extra)
        printf("  %zu tensors not in the manifest (%zu of them vision tower, unused by tide)\n", extra, vision);
}

int tide_cmd_inspect(int argc, char **argv) {
    const char *dir = NULL;
    int config_only = 0, list = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return TIDE_EXIT_OK;
        } else if (!strcmp(argv[i], "--config-only")) config_only = 1;
        else if (!strcmp(argv[i], "--tensors")) list = 1;
        else if (argv[i][0] == '-' || dir) {
            fprintf(stderr, "tide inspect: unexpected argument '%s'\n\n", argv[i]);
            usage(stderr);
            return TIDE_EXIT_USAGE;
        } else dir = argv[i];
    }
    if (!dir) {
        usage(stderr);
        return TIDE_EXIT_USAGE;
    }
    tide_status st = {0};
    tide_config *cfg = malloc(sizeof *cfg);
    if (!cfg) return TIDE_EXIT_FAIL;
    int rc = TIDE_EXIT_FAIL;
    tide_st *ck = NULL;
    tide_manifest m = {0};
    /* The checks of model/checkpoint.h, in tide_model_load's order. */
    if ((!config_only && tide_ckpt_check_dir(dir, &st)) || tide_config_load(dir, cfg, &st)) {
        fprintf(stderr, "tide inspect: %s\n", st.msg);
        goto out;
    }
    print_config(cfg);
    print_roles(cfg);
    if (config_only) {
        rc = TIDE_EXIT_OK;
        goto out;
    }
    fflush(stdout);
    if (tide_manifest_build(cfg, &m, &st) || tide_st_open(dir, &ck, &st)) {
        fprintf(stderr, "tide inspect: %s\n", st.msg);
        goto out;
    }
    print_tensors(ck, &m, list);
    size_t miss, wrong, extra;
    fflush(stdout);
    if (tide_manifest_verify(&m, ck, &miss, &wrong, &extra, &st)) {
        fprintf(stderr, "tide inspect: %s: %s\n", dir, st.msg);
        print_problems(&m, ck, 10);
        goto out;
    }
    tide_engram_tables tables;
    int has_tables;
    tide_tokmap_source src;
    if (tide_ckpt_engram(dir, cfg, &tables, &has_tables, &src, &st)) {
        fprintf(stderr, "tide inspect: %s\n", st.msg);
        goto out;
    }
    if (has_tables) tide_engram_tables_free(&tables);
    char tokpath[4096];
    struct stat sb;
    snprintf(tokpath, sizeof tokpath, "%s/tokenizer.json", dir);
    printf("\nverified: all %zu tensors the config requires are present with the right dtype and shape%s\n", m.n,
           stat(tokpath, &sb) == 0 ? "; tokenizer.json present" : "; no tokenizer.json");
    if (src == TIDE_TOKMAP_SYNTHETIC)
        printf("engram token map: tide's synthetic stand-in (recorded by tide synth, which wrote no tokenizer): "
               "generations differ from the same weights hashed through a real tokenizer\n");
    else if (src == TIDE_TOKMAP_TOKENIZER)
        printf("engram token map: from tokenizer.json\n");
    if (cfg->present_layers < cfg->text.num_hidden_layers) printf("PARTIAL: verified, but it cannot run\n");
    rc = TIDE_EXIT_OK;
out:
    tide_st_close(ck);
    tide_manifest_free(&m);
    free(cfg);
    return rc;
}
