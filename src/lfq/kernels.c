// The LFQ kernels for float and double: kernels_impl.h written once, instantiated twice.
#include <string.h>
#include <tgmath.h>

#include "lfq/internal.h"

#define real float
#define SFX f32
#define ALLREDUCE ember_comm_allreduce_sum_f32
#include "lfq/kernels_impl.h"
#undef ALLREDUCE
#undef SFX
#undef real

#define real double
#define SFX f64
#define ALLREDUCE ember_comm_allreduce_sum_f64
#include "lfq/kernels_impl.h"
#undef ALLREDUCE
#undef SFX
#undef real
