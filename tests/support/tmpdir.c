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

int test_remove_tree(const char *path) {
    char cmd[600];
    if (snprintf(cmd, sizeof cmd, "rm -rf '%s'", path) >= (int)sizeof cmd) return -1;
    return system(cmd) == 0 ? 0 : -1;
}

int test_tmpdir_remove(void **state) {
    (void)state;
    return test_remove_tree(test_tmpdir);
}
