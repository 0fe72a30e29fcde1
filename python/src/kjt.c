// python/src/kjt.c — KJTs over the buffers of the Python layer's arrays (binding.h: ember_py_kjt).
#include "binding.h"

#include <string.h>

void ember_py_kjt_release(ember_py_kjt *k) {
    for (int i = 0; i < 4; i++)
        if (k->held[i]) {
            PyBuffer_Release(&k->views[i]);
            k->held[i] = 0;
        }
}

int ember_py_kjt_get(PyObject *values, PyObject *lengths, PyObject *offsets, PyObject *weights, long long F,
                     long long B, ember_py_kjt *out) {
    memset(out, 0, sizeof *out);
    if (F < 0 || F > INT32_MAX || B < 0 || B > INT32_MAX) {
        ember_py_invalid("KJT: %lld features x batch size %lld outside [0, 2^31)", F, B);
        return -1;
    }
    const long long bags = F * B;
    static const char *what[4] = {"KJT values", "KJT lengths", "KJT offsets", "KJT weights"};
    static const char *fmt[4] = {"q", "i", "q", "f"};
    PyObject *obj[4] = {values, lengths, offsets, weights};
    for (int i = 0; i < 4; i++) {
        if (obj[i] == Py_None) continue;
        if (ember_py_buffer(obj[i], what[i], fmt[i], 0, &out->views[i]) != 0) {
            ember_py_kjt_release(out);
            return -1;
        }
        out->held[i] = 1;
    }
    if (!out->held[0]) {
        ember_py_invalid("KJT values: None (an int64 array of ids is needed, possibly empty)");
        return -1;
    }
    const long long nnz = (long long)(out->views[0].len / 8);
    if (out->held[1] && out->views[1].len / 4 != bags) {
        ember_py_invalid("KJT lengths: %lld entries for %lld features x batch size %lld = %lld bags",
                         (long long)(out->views[1].len / 4), F, B, bags);
        goto fail;
    }
    if (out->held[2] && out->views[2].len / 8 != bags + 1) {
        ember_py_invalid("KJT offsets: %lld entries for %lld bags (F*B + 1 = %lld needed)",
                         (long long)(out->views[2].len / 8), bags, bags + 1);
        goto fail;
    }
    if (!out->held[1] && !out->held[2]) {
        ember_py_invalid("KJT: neither lengths nor offsets given");
        goto fail;
    }
    if (out->held[3] && out->views[3].len / 4 != nnz) {
        ember_py_invalid("KJT weights: %lld entries for %lld values", (long long)(out->views[3].len / 4), nnz);
        goto fail;
    }
    out->kjt.num_features = (int32_t)F;
    out->kjt.batch_size = (int32_t)B;
    out->kjt.values = out->views[0].buf;
    out->kjt.lengths = out->held[1] ? out->views[1].buf : NULL;
    out->kjt.offsets = out->held[2] ? out->views[2].buf : NULL;
    out->kjt.weights = out->held[3] ? out->views[3].buf : NULL;
    out->kjt.nnz = nnz;
    return 0;
fail:
    ember_py_kjt_release(out);
    return -1;
}
