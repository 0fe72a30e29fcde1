// Helpers shared by the subcommands.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_launcher_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

bool cli_parse_i64(const char *flag, const char *text, int64_t min, int64_t max, int64_t *out, char *err,
                   size_t cap) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || errno == ERANGE) {
        snprintf(err, cap, "%s '%s': not an integer", flag, text);
        return false;
    }
    if (v < min || v > max) {
        snprintf(err, cap, "%s %lld: expected %lld..%lld", flag, v, (long long)min, (long long)max);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_double(const char *flag, const char *text, double *out, char *err, size_t cap) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (*text == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v)) {
        snprintf(err, cap, "%s '%s': not a finite number", flag, text);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_i64_list(const char *flag, const char *text, int64_t min, int64_t max, int64_t *items, int cap_items,
                        int *n, char *err, size_t cap) {
    char item[64];
    *n = 0;
    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (*n == cap_items) {
            snprintf(err, cap, "%s '%s': more than %d values", flag, text, cap_items);
            return false;
        }
        if (len == 0 || len >= sizeof item) {
            snprintf(err, cap, "%s '%s': expected comma-separated integers", flag, text);
            return false;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (!cli_parse_i64(flag, item, min, max, &items[(*n)++], err, cap)) return false;
        if (!comma) return true;
        p = comma + 1;
    }
}
