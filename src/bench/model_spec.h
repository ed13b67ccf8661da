/* The benchmark's --model argument: a checkpoint directory, or synth:SHAPE
 * for a synthetic checkpoint of a named shape (tiny, small, flash,
 * flash-ep8; model/synth.h). On the CPU a synthetic checkpoint is written
 * to a fresh temporary directory ($TMPDIR, else /tmp), loaded, and the
 * directory deleted right after the load: the weights stay mapped (an
 * unlinked file lives on while it is mapped), and nothing is left behind
 * even if the benchmark is killed later. Writing a shape whose size exceeds
 * the free space there fails before anything is written. Generating the
 * weights in device memory instead is the CUDA backend's later job. */
#ifndef TIDE_BENCH_MODEL_SPEC_H
#define TIDE_BENCH_MODEL_SPEC_H

#include "base/status.h"
#include "model/model.h"

/* spec: "DIR" or "synth:SHAPE"; threads: synth's writer threads. */
int tide_bench_load_model(const char *spec, int threads, tide_model **out, tide_status *st);

/* The shape of a "synth:SHAPE" spec (NULL for a directory). */
const char *tide_bench_synth_shape(const char *spec);

#endif
