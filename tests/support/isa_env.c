#include "isa_env.h"

#include <stdio.h>
#include <stdlib.h>

#include "ember/core.h"

int test_isa_env_check(const char *test) {
    const char *env = getenv("EMBER_ISA");
    if (!env || !*env) return 0;
    ember_isa isa;
    if (ember_isa_parse(env, &isa) != EMBER_OK) {
        printf("%s: skipped: EMBER_ISA='%s' names no variant\n", test, env);
        return TEST_SKIP;
    }
    char why[160];
    if (!ember_isa_supported(isa, why, sizeof why)) {
        printf("%s: skipped: %s: %s\n", test, env, why);
        return TEST_SKIP;
    }
    printf("%s: kernel variant %s\n", test, env);
    return 0;
}
