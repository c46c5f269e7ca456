/* databus.sidecar.produce._router_speedups: the sidecar's placement loop in C.
 *
 * ``place_run`` is router.place_frame's inner loop for a run of plain keyless messages that
 * all go to the group the previous one went to (the pure-Python twin is the loop in
 * router.py, used when this extension is not built or DATABUS_PURE_PYTHON is set).
 * tests/sidecar/test_router_speedups.py holds the two together with hypothesis.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyDoc_STRVAR(place_run_doc,
"place_run(messages, sizes, after, hint, stream, small, now_ms, ids, group_sizes, records)\n"
"-> (next, taken, own_timestamps)\n\n"
"router.place_frame's loop for a run of messages that all go to the group the previous one\n"
"went to: from the message after ``after`` (a message of ``messages`` itself, looked for from\n"
"index ``hint`` on), while a message is (id, ``stream`` itself, value, no key, no headers,\n"
"no partition, timestamp) of at most ``small`` bytes, its id, size and record (timestamp or\n"
"now_ms, None, value, None) are appended to the three lists.  ``next``: the index of the\n"
"first message not taken; ``taken``: how many were; ``own_timestamps``: one taken had its\n"
"timestamp.");

static PyObject *
py_place_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) ||
        !PyLong_CheckExact(args[3]) || !PyList_CheckExact(args[7]) ||
        !PyList_CheckExact(args[8]) || !PyList_CheckExact(args[9])) {
        PyErr_SetString(PyExc_TypeError,
                        "place_run(messages: list, sizes: list, after, hint: int, stream, "
                        "small: int, now_ms, ids: list, group_sizes: list, records: list)");
        return NULL;
    }
    PyObject *messages = args[0], *sizes = args[1], *after = args[2], *stream = args[4];
    PyObject *now_ms = args[6], *ids = args[7], *group_sizes = args[8], *records = args[9];
    Py_ssize_t k = PyLong_AsSsize_t(args[3]);
    long long small = PyLong_AsLongLong(args[5]);
    if ((k == -1 || small == -1) && PyErr_Occurred())
        return NULL;
    if (k < 0)
        k = 0;
    /* the caller's loop counts no index (an int made per message): find ``after`` from the
     * hint (the previous run's end) on, so the searches of a frame pass each message once */
    while (k < PyList_GET_SIZE(messages) && PyList_GET_ITEM(messages, k) != after)
        k++;
    if (k == PyList_GET_SIZE(messages)) {
        PyErr_SetString(PyExc_ValueError, "place_run: after is not in messages from hint on");
        return NULL;
    }
    Py_ssize_t first = ++k;
    int own = 0;
    /* Only reads of the lists and appends: no Python code runs (exact types throughout) */
    for (; k < PyList_GET_SIZE(messages) && k < PyList_GET_SIZE(sizes); k++) {
        PyObject *m = PyList_GET_ITEM(messages, k), *size = PyList_GET_ITEM(sizes, k);
        if (!PyTuple_CheckExact(m) || PyTuple_GET_SIZE(m) != 7)
            break;
        PyObject **f = &PyTuple_GET_ITEM(m, 0);
        if (f[1] != stream || f[3] != Py_None || f[4] != Py_None || f[5] != Py_None)
            break;
        int overflow;
        if (!PyLong_CheckExact(size) || PyLong_AsLongLongAndOverflow(size, &overflow) > small ||
            overflow)
            break;
        PyObject *timestamp = f[6] == Py_None ? now_ms : f[6];
        PyObject *record = PyTuple_Pack(4, timestamp, Py_None, f[2], Py_None);
        if (record == NULL)
            return NULL;
        int rc = PyList_Append(records, record);
        Py_DECREF(record);
        if (rc < 0 || PyList_Append(ids, f[0]) < 0 || PyList_Append(group_sizes, size) < 0)
            return NULL;
        own |= f[6] != Py_None;
    }
    return Py_BuildValue("(nnO)", k, k - first, own ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"place_run", (PyCFunction)(void (*)(void))py_place_run, METH_FASTCALL, place_run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "databus.sidecar.produce._router_speedups",
    "The sidecar's placement loop in C (the pure-Python twin is in router.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__router_speedups(void)
{
    return PyModule_Create(&module);
}
