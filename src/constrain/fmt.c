/* Formats as regular expressions (fmt.h). Written from the RFCs the JSON
 * Schema specification cites: RFC 3339 date-time / date / time (seconds up
 * to 60 for leap seconds; days per month, February 29 in leap years only),
 * RFC 4122 uuid (hex 8-4-4-4-12), RFC 5321 email simplified to
 * dot-atoms, RFC 791 ipv4 (dotted quad, no leading zeros), RFC 4291 ipv6
 * (every "::" compression form, optional embedded ipv4), RFC 3986 uri
 * (scheme ":" then URI characters or percent escapes), RFC 1123 hostname
 * (labels of 1-63 letters, digits, hyphens, not starting or ending with a
 * hyphen). docs/structured.md lists what each one leaves out. */
#include "constrain/fmt.h"

#include <string.h>

#define DEC_OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
#define IPV4 DEC_OCTET "\\." DEC_OCTET "\\." DEC_OCTET "\\." DEC_OCTET
#define H16 "[0-9a-fA-F]{1,4}"
#define LS32 "(?:" H16 ":" H16 "|" IPV4 ")"
#define IPV6 \
    "(?:(?:" H16 ":){6}" LS32 \
    "|::(?:" H16 ":){5}" LS32 \
    "|(?:" H16 ")?::(?:" H16 ":){4}" LS32 \
    "|(?:(?:" H16 ":){0,1}" H16 ")?::(?:" H16 ":){3}" LS32 \
    "|(?:(?:" H16 ":){0,2}" H16 ")?::(?:" H16 ":){2}" LS32 \
    "|(?:(?:" H16 ":){0,3}" H16 ")?::" H16 ":" LS32 \
    "|(?:(?:" H16 ":){0,4}" H16 ")?::" LS32 \
    "|(?:(?:" H16 ":){0,5}" H16 ")?::" H16 \
    "|(?:(?:" H16 ":){0,6}" H16 ")?::)"
/* days per month; 02-29 in leap years only (divisible by 4, and by 400
 * when by 100), as ajv-formats checks */
#define LEAP "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
#define DATE \
    "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)" \
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))|" LEAP "-02-29)"
#define TIME "(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.[0-9]+)?(?:[zZ]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"

static const struct {
    const char *name, *re;
} FORMATS[] = {
    {"date-time", DATE "[tT]" TIME},
    {"date", DATE},
    {"time", TIME},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"email", "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@" LABEL "(?:\\." LABEL ")*"},
    {"ipv4", IPV4},
    {"ipv6", IPV6},
    {"uri", "[A-Za-z][A-Za-z0-9+.-]*:(?:[A-Za-z0-9\\-._~!$&'()*+,;=:@/?#\\[\\]]|%[0-9A-Fa-f]{2})*"},
    {"hostname", LABEL "(?:\\." LABEL ")*"},
};

const char *tide_format_regex(const char *name) {
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
        if (!strcmp(FORMATS[i].name, name)) return FORMATS[i].re;
    return NULL;
}
