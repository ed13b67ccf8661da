/* The start and end of a `tide run` batch (the ids batch in cmd_run.c, the
 * text batch in run_text.c): one rule for the files, the stop signals, what
 * happens to the results file and what the exit status says. */
#ifndef TIDE_CLI_BATCH_END_H
#define TIDE_CLI_BATCH_END_H

#include <signal.h>
#include <stdio.h>

#include "base/status.h"
#include "cli/out_file.h"

/* Opens the results file (output; NULL or "-" = stdout; the input file
 * itself is refused), blocks SIGINT / SIGTERM (*old_mask: the previous
 * mask; before any engine thread starts, so they inherit it) and opens the
 * input ('-' = stdin). On failure says why on stderr and returns -1 with
 * everything undone. */
int tide_batch_open(tide_out_file *out, FILE **in, sigset_t *old_mask, const char *output, const char *input);
/* Closes the input and restores the signal mask (after tide_batch_finish). */
void tide_batch_close(FILE *in, const sigset_t *old_mask);

typedef struct tide_batch_end {
    int ok;                /* the run itself succeeded (every line read, no engine failure) */
    int sig;               /* the stop signal that ended it early, or 0 */
    int write_failed;      /* a result could not be written: wst says why */
    const tide_status *wst;
    long long n_finished, n_lines, n_errors;
} tide_batch_end;

/* Commits the results file when everything was written (every request, or
 * those finished before the stop signal), else removes it (an existing
 * file stays as it was); says on stderr why. Returns the exit status: 1 on
 * a failure, 128 + sig after a stop, 1 when some lines failed, else 0. */
int tide_batch_finish(tide_out_file *o, const tide_batch_end *e);

#endif
