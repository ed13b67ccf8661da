/* The end of a tide run batch; see batch_end.h. */
#include "cli/batch_end.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/stop_signal.h"

int tide_batch_open(tide_out_file *out, FILE **in, sigset_t *old_mask, const char *output, const char *input) {
    tide_status st = {0};
    *in = NULL;
    if (tide_out_open(out, output, input, &st) != 0) {
        fprintf(stderr, "tide run: %s\n", st.msg);
        return -1;
    }
    tide_stop_signals_block(old_mask);
    *in = !strcmp(input, "-") ? stdin : fopen(input, "r");
    if (!*in) {
        fprintf(stderr, "tide run: cannot open %s: %s\n", input, strerror(errno));
        tide_out_abort(out);
        tide_stop_signals_restore(old_mask);
        return -1;
    }
    return 0;
}

void tide_batch_close(FILE *in, const sigset_t *old_mask) {
    if (in && in != stdin) fclose(in);
    tide_stop_signals_restore(old_mask);
}

int tide_batch_finish(tide_out_file *o, const tide_batch_end *e) {
    int ok = e->ok;
    if (e->write_failed) {
        fprintf(stderr, "tide run: %s\n", e->wst ? e->wst->msg : "writing the results failed");
        ok = 0;
    }
    if (!ok) {
        tide_out_abort(o);
        return TIDE_EXIT_FAIL;
    }
    char name[512]; /* commit frees the path */
    snprintf(name, sizeof name, "%s", tide_out_name(o));
    tide_status st = {0};
    if (tide_out_commit(o, &st) != 0) {
        fprintf(stderr, "tide run: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    if (e->sig) {
        fprintf(stderr, "tide run: stopped by %s: %lld of %lld requests finished (complete lines in %s), %lld not run\n",
                tide_stop_signal_name(e->sig), e->n_finished, e->n_lines, name, e->n_lines - e->n_finished);
        return 128 + e->sig;
    }
    return e->n_errors ? TIDE_EXIT_FAIL : TIDE_EXIT_OK;
}
