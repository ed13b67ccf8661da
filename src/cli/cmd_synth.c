/* Placeholder: replaced by the owner of this subcommand. */
#include <stdio.h>

#include "cli/cli.h"

int tide_cmd_synth(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "tide synth: not implemented yet\n");
    return TIDE_EXIT_FAIL;
}
