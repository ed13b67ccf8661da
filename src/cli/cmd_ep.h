/* The EP launcher shared by `tide run --ep` and `tide bench ep`
 * (cmd_ep_run.c; docs/ep.md). */
#ifndef TIDE_CLI_CMD_EP_H
#define TIDE_CLI_CMD_EP_H

#include <stdint.h>

#include "dist/ep.h"
#include "engine/request_jsonl.h"

typedef struct tide_ep_run_opts {
    const char *model, *input, *output, *ids_s;
    int64_t ranks, max_tokens, threads, redundant, window, timeout_ms, max_seqs, step_tokens;
    int64_t kill_rank, kill_round; /* tests: rank kill_rank SIGKILLs itself at that exchange round */
    int kill_stop;                 /* tests: SIGSTOP instead (a hung rank) */
    int ignore_eos;
    int no_model_dir; /* the engine reads no generation_config.json (a synth: model) */
} tide_ep_run_opts;

typedef struct tide_ep_lines {
    tide_jsonl_request *lines;
    int64_t n;
} tide_ep_lines;
void tide_ep_lines_free(tide_ep_lines *L);

typedef struct tide_ep_result {
    char **got;           /* [n lines] each line's result (JSON) */
    int64_t n_got, dup;   /* results kept; repeats dropped */
    int lost;             /* ranks killed */
    int world_end;        /* ranks left at the end */
    int n_stats;          /* ranks that reported their statistics (the survivors) */
    double seconds;       /* fork to the last rank's exit */
    double recovery_s;    /* the slowest survivor's time from a failure seen to its engine restarted */
    tide_ep_stats stats;  /* summed over the ranks (balancedness, rebalances, recoveries: the group's) */
} tide_ep_result;
void tide_ep_result_free(tide_ep_result *r, int64_t n_lines);

/* Forks o->ranks rank processes over m (loaded, mmap shared) and runs the
 * lines; fails when a line has no result. */
int tide_ep_launch(const tide_ep_run_opts *o, const tide_ep_lines *L, tide_model *m, tide_ep_result *res,
                   tide_status *st);

#endif
