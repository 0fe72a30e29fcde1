// ember/dtype.h — the element types of ember's tensors, and what the library knows of each.
//
// One enum for every tensor the API reads or writes: table weights (fp32, fp16, bf16: the
// storage dtypes), optimizer state (fp32), a hashed table's id map (int64), the LFQ module's
// parameters and activations (fp32 or fp64), the wire precision of the sharded collection's
// exchanges (fp32, fp16, bf16, and the wire-only int8, fp8_e4m3, fp8_e5m2: ember/shard.h). Each
// function below is the one place its fact is kept: a dtype's size, name and class.
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
    // Wire precisions only (ember_sebc_set_wire_precision), never a tensor's dtype:
    EMBER_DTYPE_I8 = 5,       // row-wise int8: each row piece's uint8 values, fp32 scale and bias
    EMBER_DTYPE_FP8_E4M3 = 6, // OCP fp8 E4M3 (1.4.3, bias 7, largest finite 448, no infinity)
    EMBER_DTYPE_FP8_E5M2 = 7, // OCP fp8 E5M2 (1.5.2, bias 15, largest finite 57344)
} ember_dtype;
#define EMBER_DTYPE_COUNT 8

// Bytes of one element (0 outside the enum; 1 for int8 and the fp8s, whose values are 1 byte on
// the wire: int8 adds 8 bytes of scale and bias per row piece). Local.
EMBER_API size_t ember_dtype_size(ember_dtype dt);
// "fp32", "fp16", "bf16", "int64", "fp64", "int8", "fp8_e4m3", "fp8_e5m2" ("unknown" outside the
// enum); parse is its inverse: EMBER_OK and *out set, or EMBER_ERR_INVALID_ARG (*out unchanged).
// Local.
EMBER_API const char *ember_dtype_name(ember_dtype dt);
EMBER_API ember_status ember_dtype_parse(const char *name, ember_dtype *out);
// 1 for the 16-bit floats (fp16, bf16), 0 otherwise. Local.
EMBER_API int ember_dtype_is_16bit(ember_dtype dt);
// 1 for the dtypes a table's weights can be stored in (fp32, fp16, bf16), 0 otherwise. Local.
EMBER_API int ember_dtype_is_storage(ember_dtype dt);
// 1 for the wire precisions of the sharded collection (fp32, fp16, bf16, int8, fp8_e4m3,
// fp8_e5m2: ember_sebc_set_wire_precision), 0 otherwise. Local.
EMBER_API int ember_dtype_is_wire(ember_dtype dt);

#ifdef __cplusplus
}
#endif
#endif
