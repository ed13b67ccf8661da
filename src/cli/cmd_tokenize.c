/* Placeholder: replaced by the owner of this subcommand. */
#include <stdio.h>

#include "cli/cli.h"

int tide_cmd_tokenize(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "tide tokenize: not implemented yet\n");
    return TIDE_EXIT_FAIL;
}

int tide_cmd_detokenize(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "tide detokenize: not implemented yet\n");
    return TIDE_EXIT_FAIL;
}
