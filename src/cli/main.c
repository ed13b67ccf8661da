#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cli/cli.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"synth", tide_cmd_synth, "write a synthetic checkpoint in the release format"},
    {"inspect", tide_cmd_inspect, "summarise a checkpoint: config, layer roles, tensors"},
    {"run", tide_cmd_run, "offline generation from a checkpoint"},
    {"render", tide_cmd_render, "request bodies (JSONL) -> the V4.1 prompt / training text"},
    {"tokenize", tide_cmd_tokenize, "text on stdin -> token ids, one line per input line"},
    {"detokenize", tide_cmd_detokenize, "token ids on stdin -> text"},
    {"eval", tide_cmd_eval, "perplexity and top-1 accuracy of a text through the forward pass"},
    {"bench", tide_cmd_bench, "performance: throughput, latency, step times next to their roofline"},
    {"kv", tide_cmd_kv, "inspect and maintain a persistent KV cache store: stat, ls, verify, gc"},
    {"serve", tide_cmd_serve, "OpenAI / Anthropic compatible HTTP server"},
    {"route", tide_cmd_route, "load balancer over tide serve replicas (prefill / decode disaggregation)"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: tide COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-11s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'tide COMMAND --help' describes each command.\n"
                 "Environment: TIDE_LOG=error|warn|info|debug sets how much goes to stderr.\n");
}

int main(int argc, char **argv) {
    const char *lvl = getenv("TIDE_LOG");
    if (lvl) {
        if (!strcmp(lvl, "error")) tide_log_set_level(TIDE_LOG_ERROR);
        else if (!strcmp(lvl, "warn")) tide_log_set_level(TIDE_LOG_WARN);
        else if (!strcmp(lvl, "debug")) tide_log_set_level(TIDE_LOG_DEBUG);
    }
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? TIDE_EXIT_USAGE : TIDE_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "tide: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return TIDE_EXIT_USAGE;
}
