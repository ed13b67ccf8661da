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

#endif
