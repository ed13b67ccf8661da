/* The tide command is only a client of libtide: each subcommand lives in its
 * own cmd_*.c file and is registered in main.c's table. */
#ifndef TIDE_CLI_CLI_H
#define TIDE_CLI_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

int tide_cmd_synth(int argc, char **argv);
int tide_cmd_inspect(int argc, char **argv);
int tide_cmd_run(int argc, char **argv);
int tide_cmd_tokenize(int argc, char **argv);
int tide_cmd_detokenize(int argc, char **argv);
int tide_cmd_bench(int argc, char **argv);
int tide_cmd_kv(int argc, char **argv); /* cmd_kv.c */
int tide_cmd_serve(int argc, char **argv);
int tide_cmd_route(int argc, char **argv); /* cmd_route.c */
int tide_cmd_render(int argc, char **argv); /* cmd_render.c */
int tide_cmd_eval(int argc, char **argv);   /* cmd_eval.c */
int tide_cmd_ep_run(int argc, char **argv); /* cmd_ep_run.c: tide run --ep N */

/* An integer option's value: all of s a decimal integer in [lo, hi];
 * 0, or -1 (nothing written). */
int tide_cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out); /* cmd_bench.c */

/* --effort's value: a reasoning effort 1..100, or a name (low, high, max:
 * text/conv.h); 0, or -1 with the reason in st. */
int tide_cli_parse_effort(const char *v, int *effort, tide_status *st); /* cmd_render.c */

/* The whole of path ('-' = stdin), NUL-terminated (malloc'd; *len without
 * the NUL); NULL with the reason in st. */
char *tide_cli_read_file(const char *path, size_t *len, tide_status *st); /* cmd_eval.c */

/* Exit codes shared by all subcommands. */
enum { TIDE_EXIT_OK = 0, TIDE_EXIT_FAIL = 1, TIDE_EXIT_USAGE = 2 };

#endif
