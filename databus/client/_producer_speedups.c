/* databus.client._producer_speedups: the base of the producer's per-record future in C.
 *
 * ``RecordHandle`` is producer.py's _RecordHandle (the pure-Python twin, used when this
 * extension is not built or DATABUS_PURE_PYTHON is set).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* client.producer.DeliveryFuture's fields (its batch's shared outcome, the record's index
 * in the batch, its CreateTime) in a C struct: Producer.send makes one per record, and a C
 * constructor costs a third of a Python __init__.  The methods are DeliveryFuture's, in
 * Python; producer.py's _RecordHandle is the pure-Python twin of this base. */
typedef struct {
    PyObject_HEAD
    PyObject *batch;
    Py_ssize_t index;
    PyObject *timestamp;
} RecordHandle;

static PyObject *
handle_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *batch, *timestamp = NULL;
    Py_ssize_t index;
    if (kwds == NULL && PyTuple_GET_SIZE(args) == 3) { /* the producer's call: no parsing */
        batch = PyTuple_GET_ITEM(args, 0);
        PyObject *i = PyTuple_GET_ITEM(args, 1);
        index = PyLong_AsSsize_t(i);
        if (index == -1 && PyErr_Occurred())
            return NULL;
        timestamp = PyTuple_GET_ITEM(args, 2);
    } else {
        static char *names[] = {"batch", "index", "timestamp", NULL};
        if (!PyArg_ParseTupleAndKeywords(args, kwds, "On|O:DeliveryFuture", names, &batch,
                                         &index, &timestamp))
            return NULL;
    }
    RecordHandle *self = (RecordHandle *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->batch = Py_NewRef(batch);
    self->index = index;
    self->timestamp = timestamp ? Py_NewRef(timestamp) : PyLong_FromLong(-1);
    if (self->timestamp == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
handle_traverse(RecordHandle *self, visitproc visit, void *arg)
{
    Py_VISIT(self->batch); /* (a Python subclass's type is visited by subtype_traverse) */
    Py_VISIT(self->timestamp);
    return 0;
}

static int
handle_clear(RecordHandle *self)
{
    Py_CLEAR(self->batch);
    Py_CLEAR(self->timestamp);
    return 0;
}

static void
handle_dealloc(RecordHandle *self)
{
    /* a static type: a Python subclass's subtype_dealloc releases its own type */
    PyObject_GC_UnTrack(self);
    handle_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef handle_members[] = {
    {"_batch", T_OBJECT_EX, offsetof(RecordHandle, batch), READONLY, NULL},
    {"_index", T_PYSSIZET, offsetof(RecordHandle, index), READONLY, NULL},
    {"timestamp", T_OBJECT_EX, offsetof(RecordHandle, timestamp), 0, NULL},
    {NULL},
};

static PyTypeObject RecordHandleType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "databus.client._producer_speedups.RecordHandle",
    .tp_basicsize = sizeof(RecordHandle),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "RecordHandle(batch, index, timestamp=-1): DeliveryFuture's fields.",
    .tp_new = handle_new,
    .tp_traverse = (traverseproc)handle_traverse,
    .tp_clear = (inquiry)handle_clear,
    .tp_dealloc = (destructor)handle_dealloc,
    .tp_members = handle_members,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "databus.client._producer_speedups",
    "The producer's per-record future base in C (the pure-Python twin is in producer.py).",
    -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__producer_speedups(void)
{
    if (PyType_Ready(&RecordHandleType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "RecordHandle", (PyObject *)&RecordHandleType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
