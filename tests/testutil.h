/* Helpers shared by the cmocka test programs. */
#ifndef TIDE_TESTS_TESTUTIL_H
#define TIDE_TESTS_TESTUTIL_H

#include <setjmp.h> /* cmocka needs these before cmocka.h */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* A fresh seed per run (printed, and overridable with TIDE_TEST_SEED) so that
 * numeric tests see new random inputs each time and a failure can be replayed. */
uint64_t tu_seed(void);
/* splitmix64-based generator. */
typedef struct { uint64_t s; } tu_rng;
uint64_t tu_next(tu_rng *r);
double tu_uniform(tu_rng *r);        /* [0, 1) */
double tu_normal(tu_rng *r);         /* N(0, 1) */

/* A new empty directory under $TMPDIR (removed by tu_rmtree). Caller frees. */
char *tu_mkdtemp(const char *tag);
void tu_rmtree(const char *dir);
/* Runs a shell command, returns its exit status (or -1). Output captured into
 * *out (malloc'd, may be NULL) when out is non-NULL. */
int tu_system(const char *cmd, char **out);

/* Oracle dependencies (the stand-in tokenizer under .deps/, the npm
 * tokenizers under tools/npm/node_modules). They are looked up under
 * $TIDE_TEST_DEPS_ROOT when set (sh_oracle_ci.sh points it at an empty
 * directory), else under the source tree: buf gets ROOT/rel. */
const char *tu_dep_path(char *buf, size_t cap, const char *rel);
/* Whether this run is CI's: CI set, and not to "", "0" or "false". */
int tu_under_ci(void);
/* Says on stderr that `what` is missing (and how to get it: hint) and
 * whether that skips the test or, under CI, fails it; returns 1 when it
 * must fail. */
int tu_missing_dep(const char *what, const char *hint);
/* In a cmocka test: skip (fail under CI) unless ok, so that a missing setup
 * step cannot hide an oracle test in CI. */
#define TU_NEED_DEP(ok, what, hint)                  \
    do {                                             \
        if (!(ok)) {                                 \
            if (tu_missing_dep((what), (hint))) fail(); \
            else skip();                             \
        }                                            \
    } while (0)

#endif
