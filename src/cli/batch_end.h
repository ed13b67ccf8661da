/* A `tide run` JSONL batch (the ids batch in cmd_run.c, the text batch in
 * run_text.c): one driver for the files, the reading, the stepping, the
 * stop signals, the results lines, what happens to the results file and
 * what the exit status says. A runner supplies how a line is submitted and
 * how its engine steps:
 *
 *     tide_batch b;
 *     if (tide_batch_open(&b, output, input) != 0) return TIDE_EXIT_FAIL;
 *     ... create the engine (its callbacks write with tide_batch_write) ...
 *     int r = tide_batch_drive(&b, &ops, ctx, &st);   // 0, a signal, or < 0
 *     int rc = tide_batch_finish(&b, r >= 0, r > 0 ? r : 0);
 *     ... destroy the engine ...
 *     tide_batch_close(&b); */
#ifndef TIDE_CLI_BATCH_END_H
#define TIDE_CLI_BATCH_END_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "base/status.h"
#include "cli/out_file.h"

typedef struct tide_batch {
    tide_out_file out;
    FILE *in;
    const char *input;
    sigset_t old_mask;
    tide_status wst;       /* the first write failure */
    int write_failed;      /* nothing more is written */
    long long n_lines, n_finished, n_errors;
} tide_batch;

/* Opens the results file (output; NULL or "-" = stdout; the input file
 * itself is refused), blocks SIGINT / SIGTERM (before any engine thread
 * starts, so they inherit it) and opens the input ('-' = stdin). On failure
 * says why on stderr and returns -1 with everything undone. */
int tide_batch_open(tide_batch *b, const char *output, const char *input);
/* Closes the input and restores the signal mask (after tide_batch_finish). */
void tide_batch_close(tide_batch *b);

/* One result line: writes o (and drops the reference), counts a finished
 * request, and an error when error. After a write failure nothing is
 * written (wst says why). */
void tide_batch_write(tide_batch *b, json_t *o, int error);

typedef struct tide_batch_ops {
    /* Submits one input line; a line that cannot be submitted writes its
     * error result itself. */
    void (*submit)(void *ctx, const char *line, size_t len, int64_t lineno);
    int (*busy)(void *ctx);
    int (*step)(void *ctx, tide_status *st); /* one engine step; -1 on a failure (st) */
} tide_batch_ops;

/* Submits every input line, then steps until nothing is left, a result
 * could not be written, or SIGINT / SIGTERM arrives. Returns 0, the stop
 * signal, or -1 (reading the input or the engine failed; stderr says
 * which). */
int tide_batch_drive(tide_batch *b, const tide_batch_ops *ops, void *ctx);

/* Commits the results file when everything was written (every request, or
 * those finished before the stop signal sig), else removes it (an existing
 * file stays as it was); says on stderr why. ok: the run itself succeeded.
 * Returns the exit status: 1 on a failure, 128 + sig after a stop, 1 when
 * some lines failed, else 0. */
int tide_batch_finish(tide_batch *b, int ok, int sig);

#endif
