/* Result files that lose nothing: the writer behind `tide run`'s outputs.
 *
 *   tide_out_file o;
 *   if (tide_out_open(&o, output_path, input_path, &st) != 0) ...  // NULL or "-" = stdout
 *   ... tide_out_line(&o, s, strlen(s), &st) per finished result ...
 *   if (tide_out_commit(&o, &st) != 0) ...   // or tide_out_abort(&o) on failure
 *
 * A named output is written to a temporary file in the same directory
 * (".NAME.XXXXXX") and renamed over NAME only by tide_out_commit, so a run
 * that fails (bad model, bad input, a failed write) leaves an existing NAME
 * exactly as it was, and the output may not be the input file (same inode:
 * refused before anything is written). Each line goes out with write(2) as a
 * whole, immediately: what was written before an interruption is complete
 * lines in the temporary file, which tide_out_commit renames into place.
 * Every write, the fsync and the close are checked; a failure is an error
 * naming the file and the OS reason (a full disk, /dev/full on stdout). */
#ifndef TIDE_CLI_OUT_FILE_H
#define TIDE_CLI_OUT_FILE_H

#include <stddef.h>

#include "base/status.h"

typedef struct tide_out_file {
    int fd;          /* -1 when closed */
    char *path;      /* the final name; NULL for stdout */
    char *tmp;       /* the temporary name; NULL for stdout */
    char *buf;       /* one line and its newline */
    size_t cap;
    long long lines; /* lines written */
} tide_out_file;

/* Opens path for writing (NULL or "-": stdout). input (may be NULL or "-")
 * is the file the run reads: an output that is the same file is refused. */
int tide_out_open(tide_out_file *o, const char *path, const char *input, tide_status *st);
/* Writes s[0..n) as it is (no newline added). */
int tide_out_write(tide_out_file *o, const char *s, size_t n, tide_status *st);
/* Writes s[0..n) and a newline in one write. */
int tide_out_line(tide_out_file *o, const char *s, size_t n, tide_status *st);
/* Finishes: a named output is synced, closed and renamed into place; stdout
 * is checked (a write error there is reported here at the latest). Frees o. */
int tide_out_commit(tide_out_file *o, tide_status *st);
/* Gives up: a named output's temporary file is removed (the existing file
 * stays as it was). Frees o; safe on a zeroed or already finished o. */
void tide_out_abort(tide_out_file *o);
/* The name to show in messages: the path, or "stdout". */
const char *tide_out_name(const tide_out_file *o);

#endif
