// The gather limit for the avx512 kernel variant (see limit.h), compiled with its target flags.
#define LIMIT_VW 16
#include "limit/impl.h"

const gather_limit_fn bench_gather_limit_avx512 = gather_limit;
