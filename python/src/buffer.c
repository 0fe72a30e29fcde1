// python/src/buffer.c — arrays through the buffer protocol: a C-contiguous buffer of the items a
// call needs, aligned to them, refused by name otherwise, and the buffer format of each ember_dtype.
#include "binding.h"

#include <stdint.h>
#include <string.h>

// The kind of a struct-module format character: 'i' signed integer, 'u' unsigned, 'f' floating,
// 0 for anything else (booleans, characters, structures).
static char format_kind(char c) {
    if (strchr("bhilqn", c)) return 'i';
    if (strchr("BHILQN", c)) return 'u';
    if (strchr("efd", c)) return 'f';
    return 0;
}

// Bytes of an item of one of the formats ember_py_buffer takes (0 for any other).
static Py_ssize_t format_size(char c) {
    switch (c) {
    case 'q': case 'd': return 8;
    case 'i': case 'f': return 4;
    case 'H': case 'e': return 2;
    case 'B': return 1;
    default: return 0;
    }
}

static const char *format_name(char kind, Py_ssize_t size) {
    switch (kind) {
    case 'i': return size == 8 ? "int64" : size == 4 ? "int32" : size == 2 ? "int16" : "int8";
    case 'u': return size == 8 ? "uint64" : size == 4 ? "uint32" : size == 2 ? "uint16" : "uint8";
    case 'f': return size == 8 ? "float64" : size == 4 ? "float32" : "float16";
    default: return "a non-numeric type";
    }
}

int ember_py_buffer(PyObject *obj, const char *what, const char *format, int writable, Py_buffer *view) {
    const char want_kind = format_kind(format[0]);
    const Py_ssize_t want_size = format_size(format[0]);
    const char *want = format_name(want_kind, want_size);
    const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) != 0) {
        PyErr_Clear();
        ember_py_invalid("%s: expected a C-contiguous%s array of %s, got %s", what, writable ? " writable" : "", want,
                         Py_TYPE(obj)->tp_name);
        return -1;
    }
    const char *f = view->format ? view->format : "B";
    // Native or little-endian order only ('@', '=', '<' on the little-endian targets ember builds for).
    while (*f == '@' || *f == '=' || *f == '<') f++;
    const char kind = f[0] && !f[1] ? format_kind(f[0]) : 0;
    if (kind != want_kind || view->itemsize != want_size) {
        ember_py_invalid("%s: expected %s items, got %s (format '%s')", what, want, format_name(kind, view->itemsize),
                         view->format ? view->format : "B");
        PyBuffer_Release(view);
        return -1;
    }
    // The library reads and writes the items through typed pointers: one off their alignment is
    // undefined behaviour (numpy's flags.aligned False: np.frombuffer at an odd offset, a packed
    // record's field). The Python layer copies such inputs; what reaches here is refused.
    if (view->len > 0 && (uintptr_t)view->buf % (uintptr_t)want_size != 0) {
        ember_py_invalid("%s: expected %s items aligned to %zd bytes, got an array at %p (numpy: flags.aligned False)",
                         what, want, want_size, view->buf);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

const char *ember_py_dtype_format(ember_dtype dt) {
    switch (dt) {
    case EMBER_DTYPE_F32: return "f";
    case EMBER_DTYPE_F16: return "e";
    case EMBER_DTYPE_BF16: return "H"; // numpy has no bfloat16: its raw bits
    case EMBER_DTYPE_I64: return "q";
    case EMBER_DTYPE_F64: return "d";
    default: return NULL; // the wire-only dtypes (int8, fp8) are no array's
    }
}
