/* bench_replay.h - `tide bench replay`: accuracy study of bounded SWA replay.
 *
 * On a prefix-cache hit the engine rebuilds each sequence's window rings by
 * recomputing only the last R tokens before the hit against the shared global
 * KV (see docs/replay.md). That is an approximation of a full prefill; this
 * study measures how far the logits and greedy tokens move, for several R and
 * for the "decoder" variant (layers above the last KV source run only on the
 * prompt's tail). cmd_bench.c dispatches `tide bench replay ARGS...` here. */
#ifndef TIDE_CLI_BENCH_REPLAY_H
#define TIDE_CLI_BENCH_REPLAY_H

/* argv[0] is the first argument after "tide bench replay" (argc may be 0).
 * Prints a table on stdout, errors on stderr. Returns a process exit code:
 * 0 ok, 1 runtime failure, 2 bad usage. --help prints usage and returns 0. */
int tide_bench_replay(int argc, char **argv);

#endif
