// ember/dtype.h — the element types of ember's tensors, and what the library knows of each.
//
// One enum for every tensor the API reads or writes: table weights (fp32, fp16, bf16: the
// storage dtypes), optimizer state (fp32), a hashed table's id map (int64), the LFQ module's
// parameters and activations (fp32 or fp64), the wire precision of the sharded collection's
// exchanges (fp32, fp16, bf16). Each function below is the one place its fact is kept: a
// dtype's size, name and class.
#ifndef EMBER_DTYPE_H
#define EMBER_DTYPE_H

#include <stddef.h>

#include "ember/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ember_dtype {
    EMBER_DTYPE_F32 = 0,  // IEEE binary32
    EMBER_DTYPE_F16 = 1,  // IEEE binary16
    EMBER_DTYPE_BF16 = 2, // bfloat16 (binary32's upper half)
    EMBER_DTYPE_I64 = 3,  // int64 (a hashed table's "ids" and "candidates" tensors)
    EMBER_DTYPE_F64 = 4,  // IEEE binary64 (the LFQ module)
} ember_dtype;
#define EMBER_DTYPE_COUNT 5

// Bytes of one element (0 outside the enum). Local.
EMBER_API size_t ember_dtype_size(ember_dtype dt);
// "fp32", "fp16", "bf16", "int64", "fp64" ("unknown" outside the enum); parse is its inverse:
// EMBER_OK and *out set, or EMBER_ERR_INVALID_ARG (*out unchanged). Local.
EMBER_API const char *ember_dtype_name(ember_dtype dt);
EMBER_API ember_status ember_dtype_parse(const char *name, ember_dtype *out);
// 1 for the 16-bit floats (fp16, bf16), 0 otherwise. Local.
EMBER_API int ember_dtype_is_16bit(ember_dtype dt);
// 1 for the dtypes a table's weights can be stored in (fp32, fp16, bf16), 0 otherwise. Local.
EMBER_API int ember_dtype_is_storage(ember_dtype dt);

#ifdef __cplusplus
}
#endif
#endif
