/* databus.sdk._outbox_speedups: the SDK's outbox in C.
 *
 * ``Outbox`` is databus/sdk/outbox.py's PyOutbox (the pure-Python twin, used when this
 * extension is not built or DATABUS_PURE_PYTHON is set); ``track`` / ``untrack`` tell the
 * cyclic collector about the futures it makes.  The frames it queues are written by the
 * wire format's own kernels (databus/protocol/_sidecar_speedups.c).
 * tests/sidecar/test_outbox_speedups.py holds the two outboxes together with hypothesis.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>
#include <descrobject.h>

/* What databus/sdk/outbox.py's PyOutbox does under its lock, done here in single calls:
 * the interpreter runs no other thread during a call of a C function that runs no Python
 * code and does not release the GIL, so each method is atomic without a lock (the lock was
 * a third of send()'s cost).  Allocations that may start the collector (which may run
 * Python code: finalizers) come first in each method, before any state changes. */

typedef struct {
    PyObject_HEAD
    PyObject *queue;   /* message tuples and markers, in order */
    PyObject *futures; /* message id -> its future */
    PyObject *future_type; /* the futures add() makes: a class with FUTURE_SLOTS */
    PyObject *client;      /* each future's _client */
    Py_ssize_t slot[7];    /* FUTURE_SLOTS' offsets in a future */
    long long last_id;
    Py_ssize_t buffered;
    Py_ssize_t unencoded;
    Py_ssize_t max_messages;
    char armed;
    char poked; /* arm() was called since the last take() */
    char refusing;
    /* send()'s (bind_send): the Python Client.send that takes what send() does not, the
     * client's max_buffer_bytes and max_frame_bytes, the framing estimate per message, and
     * time.sleep (a frame's worth queued: let the I/O thread run) */
    PyObject *slow_send;
    PyObject *sleep;
    Py_ssize_t max_buffer;
    Py_ssize_t max_frame_bytes;
    Py_ssize_t overhead;
} Outbox;

enum { QUEUED = 0, WAKE = 1, YIELD = 2, REFUSED = 3 };

/* A future is made as DeliveryFuture.__init__ makes it, without running it (a Python
 * __init__ was a sixth of send()'s cost): allocated, then the first six slots stored.
 * resolve() stores _report, _index and _done as Client._resolve does. */
static const char *FUTURE_SLOTS[7] = {"_client", "delay_id", "_done", "_report", "_exc",
                                      "_callbacks", "_index"};
enum { S_DONE = 2, S_REPORT = 3, S_CALLBACKS = 5, S_INDEX = 6 };

static int
outbox_init(Outbox *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"max_messages", "future_type", "client", NULL};
    Py_ssize_t max_messages;
    PyObject *future_type, *client;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nO!O", names, &max_messages,
                                     &PyType_Type, &future_type, &client))
        return -1;
    if (max_messages < 1) {
        PyErr_SetString(PyExc_ValueError, "max_messages must be positive");
        return -1;
    }
    for (int i = 0; i < 7; i++) {
        PyObject *d = PyObject_GetAttrString(future_type, FUTURE_SLOTS[i]);
        if (d == NULL)
            return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok)
            self->slot[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "future_type.%s must be a __slots__ member",
                         FUTURE_SLOTS[i]);
            return -1;
        }
    }
    Py_XSETREF(self->future_type, Py_NewRef(future_type));
    Py_XSETREF(self->client, Py_NewRef(client));
    PyObject *queue = PyList_New(0), *futures = PyDict_New();
    if (queue == NULL || futures == NULL) {
        Py_XDECREF(queue);
        Py_XDECREF(futures);
        return -1;
    }
    Py_XSETREF(self->queue, queue);
    Py_XSETREF(self->futures, futures);
    self->max_messages = max_messages;
    self->last_id = 0;
    self->buffered = self->unencoded = 0;
    self->armed = self->poked = self->refusing = 0;
    return 0;
}

static int
outbox_traverse(Outbox *self, visitproc visit, void *arg)
{
    Py_VISIT(self->queue);
    Py_VISIT(self->futures);
    Py_VISIT(self->future_type);
    Py_VISIT(self->client);
    Py_VISIT(self->slow_send);
    Py_VISIT(self->sleep);
    return 0;
}

static int
outbox_clear(Outbox *self)
{
    Py_CLEAR(self->queue);
    Py_CLEAR(self->futures);
    Py_CLEAR(self->future_type);
    Py_CLEAR(self->client);
    Py_CLEAR(self->slow_send);
    Py_CLEAR(self->sleep);
    return 0;
}

static void
outbox_dealloc(Outbox *self)
{
    PyObject_GC_UnTrack(self);
    outbox_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
outbox_ready(Outbox *self)
{
    if (self->queue == NULL || self->futures == NULL || self->future_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Outbox not initialised");
        return -1;
    }
    return 0;
}

static PyObject *
new_future(Outbox *self)
{
    PyTypeObject *type = (PyTypeObject *)self->future_type;
    PyObject *future = type->tp_alloc(type, 0);
    if (future == NULL)
        return NULL;
    PyObject *values[6] = {self->client, Py_None, Py_False, Py_None, Py_None, Py_None};
    for (int i = 0; i < 6; i++)
        *(PyObject **)((char *)future + self->slot[i]) = Py_NewRef(values[i]);
    /* Not tracked by the cyclic collector: a future in flight survives the young
     * collections and counts toward the app's next full one (a pause over its whole heap,
     * the latency tail at 50k msg/s).  Its slots hold no cycle that outlives it: _client's
     * cycle (client -> outbox -> futures -> future) ends when the future is answered or
     * the client fails it, callbacks are taken off its list (untracked too) when it is
     * done, and a stored exception (whose traceback may reach the future) makes
     * DeliveryFuture._set track it again (track() below). */
    PyObject_GC_UnTrack(future);
    return future;
}

/* Queue message (id, *fields[0:n]) of ``size`` payload bytes with a new future: what to
 * do next (QUEUED, WAKE, YIELD or REFUSED) and, unless REFUSED, the future (a new
 * reference) in *future_out; -1 with an exception set.  add() and send() share it. */
static int
enqueue(Outbox *self, PyObject *const *fields, Py_ssize_t n, Py_ssize_t size,
        PyObject **future_out)
{
    *future_out = NULL;
    /* The allocations first: they may start the collector. */
    PyObject *item = PyTuple_New(n + 1);
    PyObject *future = item ? new_future(self) : NULL;
    PyObject *id = future ? PyLong_FromLongLong(self->last_id + 1) : NULL;
    if (id == NULL) {
        Py_XDECREF(item);
        Py_XDECREF(future);
        return -1;
    }
    if (self->refusing) {
        Py_DECREF(item);
        Py_DECREF(future);
        Py_DECREF(id);
        return REFUSED;
    }
    PyTuple_SET_ITEM(item, 0, id);
    int atomic = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(item, i + 1, Py_NewRef(fields[i]));
        atomic &= !PyObject_IS_GC(fields[i]);
    }
    /* A message of str, bytes, ints and None can be in no cycle: untracked, the app's
     * collector does not walk it while it waits in the queue (its first collection would
     * untrack it anyway, after walking it). */
    if (atomic)
        PyObject_GC_UnTrack(item);
    if (PyDict_SetItem(self->futures, id, future) < 0)
        goto error;
    if (PyList_Append(self->queue, item) < 0) {
        PyDict_DelItem(self->futures, id);
        goto error;
    }
    Py_DECREF(item);
    self->last_id += 1;
    self->buffered += size;
    self->unencoded += size;
    *future_out = future;
    if (self->armed)
        return PyList_GET_SIZE(self->queue) % self->max_messages ? QUEUED : YIELD;
    self->armed = 1;
    return WAKE;
error:
    Py_DECREF(item);
    Py_DECREF(future);
    return -1;
}

/* add(size, fields) -> (QUEUED, WAKE, YIELD or REFUSED; the message's future or None) */
static PyObject *
outbox_add(Outbox *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyTuple_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "add(size, fields: tuple)");
        return NULL;
    }
    if (outbox_ready(self))
        return NULL;
    Py_ssize_t size = PyLong_AsSsize_t(args[0]);
    if (size == -1 && PyErr_Occurred())
        return NULL;
    PyObject *result = PyTuple_New(2);
    if (result == NULL)
        return NULL;
    PyObject *future;
    int then = enqueue(self, &PyTuple_GET_ITEM(args[1], 0), PyTuple_GET_SIZE(args[1]), size,
                       &future);
    if (then < 0) {
        Py_DECREF(result);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, PyLong_FromLong(then)); /* small ints: never allocated */
    PyTuple_SET_ITEM(result, 1, future ? future : Py_NewRef(Py_None));
    return result;
}

/* send(stream, value, key=None) -> DeliveryFuture: Client.send's common case, a str stream,
 * a bytes value and a bytes or no key, with nothing else given, whole in one C call: no
 * Python frame for send()'s eleven parameters, no fields tuple, no (then, future) pair.
 * (The Python send() was ~3/4 of the app's instructions per message.)  Anything else —
 * other arguments, other types, a message over max_frame_bytes, a full buffer, a refusing
 * outbox — goes to the Python Client.send with the same arguments, which decides, waits or
 * raises: the rules live there only.  Bound by bind_send(). */
static PyObject *
outbox_send(Outbox *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (self->slow_send == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Outbox.send before bind_send");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int fast = 0;
    if (kwnames == NULL)
        fast = nargs == 2 || nargs == 3;
    else if (nargs == 2 && PyTuple_GET_SIZE(kwnames) == 1)
        fast = PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "key") == 0;
    Py_ssize_t size = 0;
    if (fast) {
        /* (stream, value) without a key, (stream, value, key) with one: the queued tuple's
         * shape after its id, as the Python send() builds it */
        Py_ssize_t n = (nargs == 3 || kwnames != NULL) && args[2] != Py_None ? 3 : 2;
        PyObject *stream = args[0], *value = args[1];
        fast = PyUnicode_CheckExact(stream) && PyBytes_CheckExact(value) &&
               (n == 2 || PyBytes_CheckExact(args[2])) && !self->refusing;
        if (fast) {
            size = 24 + PyBytes_GET_SIZE(value) + (n == 3 ? PyBytes_GET_SIZE(args[2]) : 0);
            fast = size + PyUnicode_GET_LENGTH(stream) + self->overhead <= self->max_frame_bytes &&
                   self->buffered + size <= self->max_buffer;
        }
        if (fast) {
            if (outbox_ready(self))
                return NULL;
            PyObject *future;
            int then = enqueue(self, args, n, size, &future);
            if (then == WAKE || then == YIELD) {
                PyObject *zero = NULL, *done = NULL;
                if (then == WAKE)
                    done = PyObject_CallMethod(self->client, "_wake", NULL);
                else if ((zero = PyLong_FromLong(0)) != NULL)
                    done = PyObject_CallOneArg(self->sleep, zero);
                Py_XDECREF(zero);
                if (done == NULL) {
                    Py_DECREF(future);
                    return NULL;
                }
                Py_DECREF(done);
            }
            if (then != REFUSED) /* (refusing was looked at above: not here) */
                return then < 0 ? NULL : future;
        }
    }
    /* slow_send(client, *args, **kwargs) */
    PyObject *small[8], **call = small;
    Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    if (total + 1 > 8 && (call = PyMem_New(PyObject *, total + 1)) == NULL)
        return PyErr_NoMemory();
    call[0] = self->client;
    memcpy(call + 1, args, total * sizeof(PyObject *));
    PyObject *result = PyObject_Vectorcall(self->slow_send, call, nargs + 1, kwnames);
    if (call != small)
        PyMem_Free(call);
    return result;
}

/* bind_send(slow_send, max_buffer, overhead, sleep) -> send: sets what send() needs */
static PyObject *
outbox_bind_send(Outbox *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t max_buffer, overhead;
    if (nargs != 4 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[3]) ||
        (max_buffer = PyLong_AsSsize_t(args[1])) < 0 ||
        (overhead = PyLong_AsSsize_t(args[2])) < 0) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError,
                            "bind_send(slow_send, max_buffer: int >= 0, overhead: int >= 0, "
                            "sleep)");
        }
        return NULL;
    }
    Py_XSETREF(self->slow_send, Py_NewRef(args[0]));
    Py_XSETREF(self->sleep, Py_NewRef(args[3]));
    self->max_buffer = max_buffer;
    self->overhead = overhead;
    return PyObject_GetAttrString((PyObject *)self, "send");
}

static PyObject *
outbox_next_id(Outbox *self, PyObject *unused)
{
    self->last_id += 1;
    return PyLong_FromLongLong(self->last_id);
}

static PyObject *
outbox_add_marker(Outbox *self, PyObject *marker)
{
    if (outbox_ready(self) || PyList_Append(self->queue, marker) < 0)
        return NULL;
    int wake = !self->armed;
    self->armed = 1;
    return PyBool_FromLong(wake);
}

static PyObject *
outbox_arm(Outbox *self, PyObject *unused)
{
    int wake = !self->armed;
    self->armed = 1;
    self->poked = 1;
    return PyBool_FromLong(wake);
}

static PyObject *
outbox_idle(Outbox *self, PyObject *unused)
{
    if (outbox_ready(self))
        return NULL;
    if (PyList_GET_SIZE(self->queue) || self->poked)
        Py_RETURN_FALSE;
    self->armed = 0;
    Py_RETURN_TRUE;
}

static PyObject *
outbox_take(Outbox *self, PyObject *unused)
{
    if (outbox_ready(self))
        return NULL;
    PyObject *fresh = PyList_New(0);
    PyObject *unencoded = PyLong_FromSsize_t(self->unencoded);
    PyObject *result = (fresh && unencoded) ? PyTuple_Pack(2, self->queue, unencoded) : NULL;
    Py_XDECREF(unencoded);
    if (result == NULL) {
        Py_XDECREF(fresh);
        return NULL;
    }
    Py_SETREF(self->queue, fresh);
    self->unencoded = 0;
    self->poked = 0;
    return result;
}

static PyObject *
outbox_release(Outbox *self, PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    self->buffered -= n;
    Py_RETURN_NONE;
}

static PyObject *
outbox_fail(Outbox *self, PyObject *unused)
{
    if (outbox_ready(self))
        return NULL;
    PyObject *queue = PyList_New(0), *futures = PyDict_New();
    if (queue == NULL || futures == NULL) {
        Py_XDECREF(queue);
        Py_XDECREF(futures);
        return NULL;
    }
    PyObject *old = self->futures;
    self->futures = futures;
    Py_SETREF(self->queue, queue);
    self->refusing = 1;
    self->unencoded = self->buffered = 0;
    self->armed = self->poked = 0;
    return old;
}

static PyObject *
outbox_get_refusing(Outbox *self, void *closure)
{
    return PyBool_FromLong(self->refusing);
}

static int
outbox_set_refusing(Outbox *self, PyObject *value, void *closure)
{
    int truth = value ? PyObject_IsTrue(value) : -1;
    if (truth < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "cannot delete refusing");
        return -1;
    }
    self->refusing = (char)truth;
    return 0;
}

static PyObject *
outbox_get_armed(Outbox *self, void *closure)
{
    return PyBool_FromLong(self->armed);
}

static PyObject *
outbox_get_futures(Outbox *self, void *closure)
{
    if (outbox_ready(self))
        return NULL;
    return Py_NewRef(self->futures);
}

static PyGetSetDef outbox_getset[] = {
    {"refusing", (getter)outbox_get_refusing, (setter)outbox_set_refusing,
     "add() refuses (the client is closed or failed)", NULL},
    {"armed", (getter)outbox_get_armed, NULL, "a wake-up is in flight to the I/O thread", NULL},
    {"futures", (getter)outbox_get_futures, NULL, "message id -> future, not answered yet",
     NULL},
    {NULL},
};

static PyMemberDef outbox_members[] = {
    {"buffered", T_PYSSIZET, offsetof(Outbox, buffered), READONLY,
     "payload bytes queued or not yet written"},
    {"unencoded", T_PYSSIZET, offsetof(Outbox, unencoded), READONLY,
     "payload bytes of the queued messages"},
    {"last_id", T_LONGLONG, offsetof(Outbox, last_id), READONLY, "the last id given out"},
    {"max_messages", T_PYSSIZET, offsetof(Outbox, max_messages), READONLY, NULL},
    {"max_frame_bytes", T_PYSSIZET, offsetof(Outbox, max_frame_bytes), 0,
     "the sidecar's max_frame_bytes (send() leaves bigger messages to the Python code)"},
    {NULL},
};

/* Store ``value`` (a new reference) in a future's slot, dropping the old value (None, False
 * or unset for a future still waiting: no Python code runs). */
static void
set_slot(PyObject *future, Py_ssize_t offset, PyObject *value)
{
    PyObject **p = (PyObject **)((char *)future + offset);
    PyObject *old = *p;
    *p = value;
    Py_XDECREF(old);
}

/* The message ids of a delivered report item (exact ints: hashing and comparing them runs
 * no Python code), or 0 when the item is not of the form resolve() answers. */
static int
delivered_ids(PyObject *item, PyObject ***ids, Py_ssize_t *count, Py_ssize_t *index)
{
    if (!PyList_CheckExact(item) || PyList_GET_SIZE(item) < 2)
        return 0;
    PyObject *code = PyList_GET_ITEM(item, 1);
    int overflow;
    if (!PyLong_CheckExact(code) || PyLong_AsLongAndOverflow(code, &overflow) != 0 || overflow)
        return 0;
    PyObject **first = &PyList_GET_ITEM(item, 0);
    if (PyLong_CheckExact(*first)) {
        *ids = first;
        *count = 1;
        *index = -1;
        return 1;
    }
    if (!PyList_CheckExact(*first))
        return 0;
    *ids = PySequence_Fast_ITEMS(*first);
    *count = PyList_GET_SIZE(*first);
    for (Py_ssize_t i = 0; i < *count; i++)
        if (!PyLong_CheckExact((*ids)[i]))
            return 0;
    *index = 0;
    return 1;
}

/* resolve(items, start, with_callbacks) -> (next, delivered): Client._resolve's loop for
 * the delivered report items from items[start] on (the futures their ids name popped,
 * _report, _index and _done stored, those with callbacks appended to with_callbacks),
 * stopping at the first item of another form (an error, anything malformed): items[next],
 * which the Python code answers, errors included.  ``delivered``: the messages the items
 * done here answered. */
static PyObject *
outbox_resolve(Outbox *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) ||
        !PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "resolve(items: list, start: int, with_callbacks: list)");
        return NULL;
    }
    if (outbox_ready(self))
        return NULL;
    PyObject *items = args[0], *with_callbacks = args[2];
    Py_ssize_t i = PyLong_AsSsize_t(args[1]), delivered = 0;
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0)
        i = 0;
    for (; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i), **ids;
        Py_ssize_t count, index;
        if (!delivered_ids(item, &ids, &count, &index))
            break;
        delivered += count;
        for (Py_ssize_t k = 0; k < count; k++, index++) {
            PyObject *future = PyDict_GetItemWithError(self->futures, ids[k]);
            if (future == NULL) {
                if (PyErr_Occurred())
                    return NULL;
                continue;
            }
            /* add() made every future here; anything else would not have these slots */
            if (Py_TYPE(future) != (PyTypeObject *)self->future_type) {
                PyErr_SetString(PyExc_TypeError, "Outbox.futures holds a foreign object");
                return NULL;
            }
            PyObject *index_obj = PyLong_FromSsize_t(index);
            if (index_obj == NULL)
                return NULL;
            Py_INCREF(future);
            if (PyDict_DelItem(self->futures, ids[k]) < 0) {
                Py_DECREF(future);
                Py_DECREF(index_obj);
                return NULL;
            }
            set_slot(future, self->slot[S_REPORT], Py_NewRef(item));
            set_slot(future, self->slot[S_INDEX], index_obj);
            set_slot(future, self->slot[S_DONE], Py_NewRef(Py_True));
            PyObject *callbacks = *(PyObject **)((char *)future + self->slot[S_CALLBACKS]);
            int rc = 0;
            if (callbacks != NULL && callbacks != Py_None)
                rc = PyList_Append(with_callbacks, future);
            Py_DECREF(future);
            if (rc < 0)
                return NULL;
        }
    }
    return Py_BuildValue("(nn)", i, delivered);
}

static PyMethodDef outbox_methods[] = {
    {"add", (PyCFunction)(void (*)(void))outbox_add, METH_FASTCALL,
     "add(size, fields): queue message (id, *fields) with a new future; (QUEUED, WAKE, YIELD "
     "or REFUSED, the future)"},
    {"send", (PyCFunction)(void (*)(void))outbox_send, METH_FASTCALL | METH_KEYWORDS,
     "send(stream, value, key=None, ...): Client.send, its common case in C (bind_send)"},
    {"bind_send", (PyCFunction)(void (*)(void))outbox_bind_send, METH_FASTCALL,
     "bind_send(slow_send, max_buffer, overhead, sleep) -> send"},
    {"next_id", (PyCFunction)outbox_next_id, METH_NOARGS, "a new id (flushes, subscriptions)"},
    {"add_marker", (PyCFunction)outbox_add_marker, METH_O,
     "queue a marker; True if the I/O thread must be woken"},
    {"arm", (PyCFunction)outbox_arm, METH_NOARGS, "True if the I/O thread must be woken"},
    {"take", (PyCFunction)outbox_take, METH_NOARGS, "(queue, unencoded bytes), emptied"},
    {"idle", (PyCFunction)outbox_idle, METH_NOARGS,
     "True (disarmed: the next add wakes the I/O thread) if nothing is queued or asked for"},
    {"release", (PyCFunction)outbox_release, METH_O, "n payload bytes left the process"},
    {"resolve", (PyCFunction)(void (*)(void))outbox_resolve, METH_FASTCALL,
     "resolve(items, start, with_callbacks) -> (next, delivered): the delivered report items "
     "from items[start] on, up to the first of another form"},
    {"fail", (PyCFunction)outbox_fail, METH_NOARGS,
     "refuse from now on, drop what is queued; returns the futures not answered"},
    {NULL},
};

static PyTypeObject OutboxType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "databus.sdk._outbox_speedups.Outbox",
    .tp_basicsize = sizeof(Outbox),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The SDK's queue of messages and markers (databus/sdk/outbox.py's PyOutbox).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)outbox_init,
    .tp_traverse = (traverseproc)outbox_traverse,
    .tp_clear = (inquiry)outbox_clear,
    .tp_dealloc = (destructor)outbox_dealloc,
    .tp_methods = outbox_methods,
    .tp_members = outbox_members,
    .tp_getset = outbox_getset,
};

/* track(obj): make a collector-aware object tracked again (no-op when it is). */
static PyObject *
py_track(PyObject *unused, PyObject *obj)
{
    if (PyObject_IS_GC(obj) && !PyObject_GC_IsTracked(obj))
        PyObject_GC_Track(obj);
    Py_RETURN_NONE;
}

/* untrack(obj): the collector stops tracking obj (an untracked future's callback list). */
static PyObject *
py_untrack(PyObject *unused, PyObject *obj)
{
    if (PyObject_IS_GC(obj) && PyObject_GC_IsTracked(obj))
        PyObject_GC_UnTrack(obj);
    Py_RETURN_NONE;
}

/* wrap_messages(cls, sub, epoch, items): [cls(sub, epoch, item) for item in items] without
 * running cls.__init__ (consume.py's Message, whose __init__ only stores its three slots):
 * a messages frame's arrays become the app's messages at a few stores each. */
static const char *MESSAGE_SLOTS[3] = {"_sub", "_epoch", "_item"};

static PyObject *
py_wrap_messages(PyObject *unused, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyType_Check(args[0]) || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "wrap_messages(cls, sub, epoch, items: list)");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    PyObject *values[2] = {args[1], args[2]}, *items = args[3];
    Py_ssize_t off[3];
    for (int i = 0; i < 3; i++) {
        PyObject *d = PyObject_GetAttrString(args[0], MESSAGE_SLOTS[i]);
        if (d == NULL)
            return NULL;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok)
            off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "cls.%s must be a __slots__ member", MESSAGE_SLOTS[i]);
            return NULL;
        }
    }
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* (tp_alloc zeroes the slots and starts GC tracking; nothing here runs Python code,
         * so items keeps its size) */
        PyObject *obj = cls->tp_alloc(cls, 0);
        if (obj == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        *(PyObject **)((char *)obj + off[0]) = Py_NewRef(values[0]);
        *(PyObject **)((char *)obj + off[1]) = Py_NewRef(values[1]);
        *(PyObject **)((char *)obj + off[2]) = Py_NewRef(PyList_GET_ITEM(items, i));
        PyList_SET_ITEM(out, i, obj);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"wrap_messages", (PyCFunction)(void (*)(void))py_wrap_messages, METH_FASTCALL,
     "wrap_messages(cls, sub, epoch, items): [cls(sub, epoch, item) for item in items], "
     "without running cls.__init__"},
    {"track", py_track, METH_O, "track(obj): the cyclic collector tracks obj again"},
    {"untrack", py_untrack, METH_O, "untrack(obj): the cyclic collector stops tracking obj"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "databus.sdk._outbox_speedups",
    "The SDK's outbox in C (the pure-Python twin is outbox.py's PyOutbox).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__outbox_speedups(void)
{
    if (PyType_Ready(&OutboxType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Outbox", (PyObject *)&OutboxType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
