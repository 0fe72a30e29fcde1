#define _DEFAULT_SOURCE // mkdtemp
#include "tmpdir.h"

#include <stdio.h>
#include <stdlib.h>

char test_tmpdir[64];

int test_tmpdir_make(void **state) {
    (void)state;
    snprintf(test_tmpdir, sizeof test_tmpdir, "/tmp/ember_test_XXXXXX");
    return mkdtemp(test_tmpdir) ? 0 : -1;
}

int test_tmpdir_remove(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}
