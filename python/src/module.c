// python/src/module.c — the registrar of the extension module ember._ember: its method table
// (the module-level functions, defined in the files binding.h names) and its init, which
// registers each concept's types and functions. Nothing else lives here.
#include "binding.h"

static PyMethodDef module_methods[] = {
    {"version", ember_py_version, METH_NOARGS, "ember_version(): the library's version \"MAJOR.MINOR.PATCH\"."},
    {"build_info", ember_py_build_info, METH_NOARGS, "ember_build_info(): compiler and flags of the library."},
    {"cpu", ember_py_cpu, METH_NOARGS, "(ember_cpu_name(), ember_cpu_features())."},
    {"isa_best", ember_py_isa_best, METH_NOARGS, "The best kernel variant this build and CPU run (ember_isa_best)."},
    {"world_rank", ember_py_world_rank_fn, METH_NOARGS, "Rank in MPI_COMM_WORLD when MPI is initialised, else 0."},
    {"bytes_outstanding", ember_py_bytes_outstanding_fn, METH_NOARGS,
     "Bytes the contexts of every ember object of this process hold through the library (0: all closed)."},
    {"statuses", ember_py_statuses, METH_NOARGS, "[(name, code, description)] of every ember_status."},
    {"enum_names", ember_py_enum_names, METH_O, "enum_names(type) -> the library's names of ember_<type>, by value."},
    {"dtype_is_wire", ember_py_dtype_is_wire, METH_O, "dtype_is_wire(code) -> ember_dtype_is_wire."},
    {"enum_parse", ember_py_enum_parse, METH_VARARGS,
     "enum_parse(type, name) -> the value ember_<type>_parse gives the name, or None when it refuses it."},
    {"table_tensors", ember_py_table_tensors, METH_O, "table_tensors(table_tuple) -> [(name, rows, cols, dtype)]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "ember._ember",
    "The C extension under the ember package: thin objects over the library (use `ember`).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ember(void);
PyMODINIT_FUNC PyInit__ember(void) {
    if (ember_py_errors_init() != 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (ember_py_ebc_add(m) != 0 || ember_py_comm_add(m) != 0 || ember_py_sebc_add(m) != 0 ||
        ember_py_plan_add(m) != 0 || ember_py_checkpoint_add(m) != 0 || ember_py_lfq_add(m) != 0 ||
        ember_py_quant_add(m) != 0 || ember_py_dense_add(m) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
