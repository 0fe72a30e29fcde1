// The gather limit for the generic kernel variant (see limit.h), compiled with its target flags.
#define LIMIT_VW 4
#include "limit/impl.h"

const gather_limit_fn bench_gather_limit_generic = gather_limit;
