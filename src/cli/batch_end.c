/* A tide run JSONL batch; see batch_end.h. */
#include "cli/batch_end.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/stop_signal.h"
#include "engine/request_jsonl.h"

int tide_batch_open(tide_batch *b, const char *output, const char *input) {
    tide_status st = {0};
    memset(b, 0, sizeof *b);
    b->input = input;
    if (tide_out_open(&b->out, output, input, &st) != 0) {
        fprintf(stderr, "tide run: %s\n", st.msg);
        return -1;
    }
    tide_stop_signals_block(&b->old_mask);
    b->in = !strcmp(input, "-") ? stdin : fopen(input, "r");
    if (!b->in) {
        fprintf(stderr, "tide run: cannot open %s: %s\n", input, strerror(errno));
        tide_out_abort(&b->out);
        tide_stop_signals_restore(&b->old_mask);
        return -1;
    }
    return 0;
}

void tide_batch_close(tide_batch *b) {
    if (b->in && b->in != stdin) fclose(b->in);
    b->in = NULL;
    tide_stop_signals_restore(&b->old_mask);
}

void tide_batch_write(tide_batch *b, json_t *o, int error) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (!b->write_failed && !s) tide_fail(&b->wst, TIDE_ERR_NOMEM, "writing %s: out of memory", tide_out_name(&b->out));
    if (!b->write_failed && (!s || tide_out_line(&b->out, s, strlen(s), &b->wst) != 0)) b->write_failed = 1;
    free(s);
    json_decref(o);
    b->n_finished++;
    if (error) b->n_errors++;
}

int tide_batch_drive(tide_batch *b, const tide_batch_ops *ops, void *ctx) {
    char *line = NULL;
    size_t cap = 0, len;
    int64_t lineno = 0;
    int r;
    while ((r = tide_jsonl_next_line(b->in, &line, &cap, &len, &lineno)) > 0) {
        b->n_lines++;
        ops->submit(ctx, line, len, lineno);
    }
    free(line);
    if (r < 0) {
        fprintf(stderr, "tide run: reading %s failed\n", b->input);
        return -1;
    }
    tide_status st = {0};
    while (ops->busy(ctx) && !b->write_failed) {
        int sig = tide_stop_signal_taken();
        if (sig) return sig;
        if (ops->step(ctx, &st) != 0) {
            fprintf(stderr, "tide run: %s\n", st.msg);
            return -1;
        }
    }
    return 0;
}

int tide_batch_finish(tide_batch *b, int ok, int sig) {
    tide_out_file *o = &b->out;
    if (b->write_failed) {
        fprintf(stderr, "tide run: %s\n", b->wst.msg[0] ? b->wst.msg : "writing the results failed");
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
    if (sig) {
        fprintf(stderr, "tide run: stopped by %s: %lld of %lld requests finished (complete lines in %s), %lld not run\n",
                tide_stop_signal_name(sig), b->n_finished, b->n_lines, name, b->n_lines - b->n_finished);
        return 128 + sig;
    }
    return b->n_errors ? TIDE_EXIT_FAIL : TIDE_EXIT_OK;
}
