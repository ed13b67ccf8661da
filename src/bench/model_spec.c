/* --model DIR | synth:SHAPE for the benchmarks (model_spec.h). */
#include "bench/model_spec.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "model/synth.h"

const char *tide_bench_synth_shape(const char *spec) {
    return spec && !strncmp(spec, "synth:", 6) ? spec + 6 : NULL;
}

/* Removes the files synth wrote (it writes no subdirectories) and the directory. */
static void remove_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[PATH_MAX];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path) unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

static int load_synth(const char *shape, int threads, tide_model **out, tide_status *st) {
    tide_config cfg;
    if (tide_config_preset(shape, &cfg, st) != 0) return tide_fail_ctx(st, "--model synth:%s", shape);
    const char *tmp = getenv("TMPDIR");
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/tide-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp") >= (int)sizeof dir)
        return tide_fail(st, TIDE_ERR_INVALID, "TMPDIR is too long");
    tide_synth_opts o = {.shape = shape, .seed = 1, .threads = threads, .dry_run = 1};
    tide_synth_report rep;
    if (tide_synth_write(&cfg, &o, &rep, st) != 0) return -1;
    if (!mkdtemp(dir)) return tide_fail(st, TIDE_ERR_IO, "cannot create a temporary directory %s: %s", dir, strerror(errno));
    struct statvfs vf;
    if (statvfs(dir, &vf) == 0 && (double)vf.f_bavail * (double)vf.f_frsize < 1.05 * (double)rep.total_bytes) {
        rmdir(dir);
        return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                         "synth:%s needs %.1f GiB but %s has %.1f GiB free (use --model DIR with a written checkpoint)",
                         shape, (double)rep.total_bytes / 1073741824.0, dir,
                         (double)vf.f_bavail * (double)vf.f_frsize / 1073741824.0);
    }
    o.dry_run = 0;
    o.out_dir = dir;
    int rc = tide_synth_write(&cfg, &o, NULL, st);
    if (rc == 0) rc = tide_model_load(dir, out, st);
    remove_flat_dir(dir); /* the model keeps its files mapped */
    return rc;
}

int tide_bench_load_model(const char *spec, int threads, tide_model **out, tide_status *st) {
    *out = NULL;
    if (!spec || !*spec) return tide_fail(st, TIDE_ERR_INVALID, "no model given (--model DIR or synth:SHAPE)");
    const char *shape = tide_bench_synth_shape(spec);
    if (shape) return load_synth(shape, threads, out, st);
    return tide_model_load(spec, out, st);
}
