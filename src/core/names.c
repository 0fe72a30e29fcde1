// The lookups behind every enum's _name / _parse pair (EMBER__ENUM_NAMES).
#include <string.h>

#include "core/internal.h"

const char *ember__enum_name(const char *const *names, int n, int v) {
    return v >= 0 && v < n ? names[v] : "unknown";
}

ember_status ember__enum_parse(const char *const *names, int n, const char *name, int *out) {
    if (!name || !out) return EMBER_ERR_INVALID_ARG;
    for (int i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = i;
            return EMBER_OK;
        }
    return EMBER_ERR_INVALID_ARG;
}
