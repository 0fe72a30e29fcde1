// The gather limit for the avx2 kernel variant (see limit.h), compiled with its target flags.
#define LIMIT_VW 8
#include "limit/impl.h"

const gather_limit_fn bench_gather_limit_avx2 = gather_limit;
