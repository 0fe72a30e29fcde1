// A scratch directory for tests that write files: cmocka group setup/teardown.
#ifndef EMBER_TEST_TMPDIR_H
#define EMBER_TEST_TMPDIR_H

// The directory made by test_tmpdir_make (valid between setup and teardown).
extern char test_tmpdir[64];
// Setup: mkdtemp("/tmp/ember_test_XXXXXX"). Teardown: removes it and everything in it.
int test_tmpdir_make(void **state);
int test_tmpdir_remove(void **state);
// Removes a file or directory tree (a checkpoint directory): 0 or -1.
int test_remove_tree(const char *path);

#endif
