#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

uint64_t tu_seed(void) {
    static uint64_t seed;
    static int done;
    if (!done) {
        const char *env = getenv("TIDE_TEST_SEED");
        if (env) seed = strtoull(env, NULL, 0);
        else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
        }
        fprintf(stderr, "test seed: TIDE_TEST_SEED=%llu\n", (unsigned long long)seed);
        done = 1;
    }
    return seed;
}

uint64_t tu_next(tu_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double tu_uniform(tu_rng *r) { return (double)(tu_next(r) >> 11) * (1.0 / 9007199254740992.0); }

double tu_normal(tu_rng *r) {
    double u1 = tu_uniform(r), u2 = tu_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

char *tu_mkdtemp(const char *tag) {
    const char *tmp = getenv("TMPDIR");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/tide-%s-XXXXXX", tmp ? tmp : "/tmp", tag);
    if (!mkdtemp(buf)) return NULL;
    return strdup(buf);
}

void tu_rmtree(const char *dir) {
    if (!dir || !*dir || strstr(dir, "tide-") == NULL) return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
}

int tu_system(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) { pclose(p); return -1; }
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 2) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
    }
    buf[len] = 0;
    int rc = pclose(p);
    if (out) *out = buf; else free(buf);
    if (rc == -1) return -1;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

const char *tu_dep_path(char *buf, size_t cap, const char *rel) {
    const char *root = getenv("TIDE_TEST_DEPS_ROOT");
    snprintf(buf, cap, "%s/%s", root && *root ? root : TIDE_SOURCE_DIR, rel);
    return buf;
}

int tu_under_ci(void) {
    const char *ci = getenv("CI");
    return ci && *ci && strcmp(ci, "0") != 0 && strcmp(ci, "false") != 0;
}

int tu_missing_dep(const char *what, const char *hint) {
    int ci = tu_under_ci();
    fprintf(stderr, "%s is missing (%s): %s\n", what, hint, ci ? "FAILED, required under CI" : "skipping");
    return ci;
}
