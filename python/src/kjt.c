// python/src/kjt.c — KJTs over the buffers of the Python layer's arrays (binding.h: ember_py_kjt).
#include "binding.h"

#include <string.h>

void ember_py_kjt_release(ember_py_kjt *k) {
    for (int i = 0; i < 6; i++)
        if (k->held[i]) {
            PyBuffer_Release(&k->views[i]);
            k->held[i] = 0;
        }
}

int ember_py_kjt_get(PyObject *parts, ember_py_kjt *out) {
    memset(out, 0, sizeof *out);
    PyObject *values, *lengths, *offsets, *weights, *fbs, *inverse;
    long long F, B;
    if (!PyArg_ParseTuple(parts, "OOOOLLOO", &values, &lengths, &offsets, &weights, &F, &B, &fbs, &inverse))
        return -1;
    if (F < 0 || F > INT32_MAX || B < 0 || B > INT32_MAX) {
        ember_py_invalid("KJT: %lld features x batch size %lld outside [0, 2^31)", F, B);
        return -1;
    }
    static const char *what[6] = {"KJT values",  "KJT lengths", "KJT offsets", "KJT weights", "KJT feature_batch_sizes",
                                  "KJT inverse_indices"};
    static const char *fmt[6] = {"q", "i", "q", "f", "i", "i"};
    PyObject *obj[6] = {values, lengths, offsets, weights, fbs, inverse};
    for (int i = 0; i < 6; i++) {
        if (obj[i] == Py_None) continue;
        if (ember_py_buffer(obj[i], what[i], fmt[i], 0, &out->views[i]) != 0) {
            ember_py_kjt_release(out);
            return -1;
        }
        out->held[i] = 1;
    }
    if (!out->held[0]) {
        ember_py_invalid("KJT values: None (an int64 array of ids is needed, possibly empty)");
        goto fail;
    }
    // Bags: F * B, or with per-feature batch sizes their sum (each checked >= 0 by the library;
    // here only that the arrays hold as many entries as they claim).
    long long bags = F * B;
    if (out->held[4]) {
        if (out->views[4].len / 4 != F) {
            ember_py_invalid("KJT feature_batch_sizes: %lld entries for %lld features",
                             (long long)(out->views[4].len / 4), F);
            goto fail;
        }
        const int32_t *b = out->views[4].buf;
        bags = 0;
        for (long long f = 0; f < F; f++) bags += b[f] > 0 ? b[f] : 0;
    } else if (out->held[5]) {
        ember_py_invalid("KJT inverse_indices without feature_batch_sizes");
        goto fail;
    }
    if (out->held[5] && out->views[5].len / 4 != F * B) {
        ember_py_invalid("KJT inverse_indices: %lld entries for %lld features x batch size %lld",
                         (long long)(out->views[5].len / 4), F, B);
        goto fail;
    }
    const long long nnz = (long long)(out->views[0].len / 8);
    if (out->held[1] && out->views[1].len / 4 != bags) {
        ember_py_invalid("KJT lengths: %lld entries for %lld bags", (long long)(out->views[1].len / 4), bags);
        goto fail;
    }
    if (out->held[2] && out->views[2].len / 8 != bags + 1) {
        ember_py_invalid("KJT offsets: %lld entries for %lld bags (%lld needed)", (long long)(out->views[2].len / 8),
                         bags, bags + 1);
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
    out->kjt.feature_batch_sizes = out->held[4] ? out->views[4].buf : NULL;
    out->kjt.inverse_indices = out->held[5] ? out->views[5].buf : NULL;
    out->kjt.nnz = nnz;
    return 0;
fail:
    ember_py_kjt_release(out);
    return -1;
}
