// Tests registered once per kernel variant (tests/isa.cmake) run with EMBER_ISA set: a variant
// the host cannot run is skipped with its reason printed, never silently.
#ifndef EMBER_TEST_ISA_ENV_H
#define EMBER_TEST_ISA_ENV_H

#include "ember/core.h"

// The ctest skip code (SKIP_RETURN_CODE of every test).
#define TEST_SKIP 77

// 0 when $EMBER_ISA is unset or names a variant this build and CPU run; otherwise prints
// "<test>: skipped: <variant>: <reason>" and returns TEST_SKIP.
int test_isa_env_check(const char *test);

// One context (1 thread) per kernel variant this build and host run, generic first, into
// ctxs[EMBER_ISA_COUNT]; prints "<test>: <variant>: skipped on this host: <reason>" for the others.
// Returns how many, or -1 when a context cannot be created.
int test_isa_contexts(const char *test, ember_ctx **ctxs);

#endif
