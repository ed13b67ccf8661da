/* Small file-system helpers shared by the writers. */
#ifndef TIDE_BASE_FS_H
#define TIDE_BASE_FS_H

#include <stdio.h>

#include "base/status.h"

/* Creates dir and any missing parents (like `mkdir -p`). An existing
 * directory is fine; an existing non-directory is an error naming it. */
int tide_mkdir_p(const char *dir, tide_status *st);

/* Opens path read-only if it is a regular file and returns the descriptor
 * (close it), else -1 with a message naming the path and what it is
 * ("a FIFO", "a directory", ...). The open itself is non-blocking, so a FIFO
 * or device named as config.json or a shard is refused at once instead of
 * blocking the reader forever; the returned descriptor is blocking again. */
int tide_open_regular(const char *path, tide_status *st);
/* The same as a stdio stream ("rb"); NULL with the message on failure. */
FILE *tide_fopen_regular(const char *path, tide_status *st);

/* Reads a whole regular file of at most `max` bytes into *out (malloc'd,
 * NUL-terminated; *len excludes the NUL). */
int tide_read_file(const char *path, size_t max, char **out, size_t *len, tide_status *st);

#endif
