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

int test_isa_contexts(const char *test, ember_ctx **ctxs) {
    int n = 0;
    for (int i = EMBER_ISA_GENERIC; i < EMBER_ISA_COUNT; i++) {
        char why[160];
        if (!ember_isa_supported((ember_isa)i, why, sizeof why)) {
            printf("%s: %s: skipped on this host: %s\n", test, ember_isa_name((ember_isa)i), why);
            continue;
        }
        ember_ctx_config cfg = EMBER_CTX_CONFIG_DEFAULT;
        cfg.isa = (ember_isa)i;
        cfg.num_threads = 1;
        if (ember_ctx_create(&cfg, &ctxs[n]) != EMBER_OK) return -1;
        n++;
    }
    return n;
}
