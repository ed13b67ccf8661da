/* The JSON Schema "format" values tide enforces, as regular expressions
 * (fmt.c; full-match, ECMAScript syntax). */
#ifndef TIDE_CONSTRAIN_FMT_H
#define TIDE_CONSTRAIN_FMT_H

/* The regex for a format name, or NULL when the format is not supported. */
const char *tide_format_regex(const char *name);

#endif
