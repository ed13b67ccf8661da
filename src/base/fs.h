/* Small file-system helpers shared by the writers. */
#ifndef TIDE_BASE_FS_H
#define TIDE_BASE_FS_H

#include "base/status.h"

/* Creates dir and any missing parents (like `mkdir -p`). An existing
 * directory is fine; an existing non-directory is an error naming it. */
int tide_mkdir_p(const char *dir, tide_status *st);

#endif
