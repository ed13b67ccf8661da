/* Placeholder: replaced by the owner of this subcommand. */
#include <stdio.h>

#include "cli/cli.h"

int tide_cmd_run(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "tide run: not implemented yet\n");
    return TIDE_EXIT_FAIL;
}
