/* databus.protocol._sidecar_speedups: the sidecar wire format's per-frame kernels in C.
 *
 * ``parse_produce(body)`` takes the body of one frame (msgpack, without its length prefix)
 * and, when it is a produce frame of the shape the SDK sends, returns what
 * ``sidecar_wire.parse_produce(decode_body(body))`` returns: (messages, sizes), message
 * tuples in Message's field order and each one's payload size.  It reads the msgpack
 * straight into those tuples: no frame dict, no message lists, one str object per run of
 * messages for the same stream (an app sends runs of one stream; the router then compares
 * streams by identity first).
 *
 * Anything else — another frame type, a map with other keys, a field of a type or value
 * the protocol refuses, a msgpack form the shape does not use, invalid UTF-8, bytes after
 * the map — returns None, and the caller decodes the frame in Python.  So every frame the
 * protocol refuses is refused by the Python code, with its error code and message: the
 * rules of what is malformed live only there, and the C code never has to agree with
 * msgpack's own error messages.  tests/protocol/test_sidecar_speedups.py checks with
 * hypothesis that whatever this returns equals the Python result, and that it returns
 * None wherever the Python code raises (random and mutated bytes included).
 *
 * Every read is bounds-checked against the body's length: the body comes from an app.
 *
 * ``encode_produce`` and ``encode_reports`` write the produce and reports frames, byte for
 * byte what msgpack writes.  Only the wire format lives here: the code of the parts that
 * use it (the SDK's outbox, the sidecar's placement loop) is in their own extensions
 * (databus/sdk/_outbox_speedups.c, databus/sidecar/produce/_router_speedups.c).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>
#include <descrobject.h>

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} Reader;

/* Status of a read: OK, NO (not the shape taken here: the Python code decides), or ERR (a
 * Python exception is set: out of memory). */
enum { OK = 0, NO = 1, ERR = -1 };

static int
need(Reader *r, Py_ssize_t n)
{
    return (r->end - r->p) >= n ? OK : NO;
}

static uint32_t
be16(const unsigned char *p)
{
    return ((uint32_t)p[0] << 8) | p[1];
}

static uint32_t
be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t
be64(const unsigned char *p)
{
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

/* An array header: its length. */
static int
read_array(Reader *r, Py_ssize_t *len)
{
    if (need(r, 1))
        return NO;
    unsigned char b = *r->p;
    if (b >= 0x90 && b <= 0x9f) {
        *len = b & 0x0f;
        r->p += 1;
    } else if (b == 0xdc) {
        if (need(r, 3))
            return NO;
        *len = be16(r->p + 1);
        r->p += 3;
    } else if (b == 0xdd) {
        if (need(r, 5))
            return NO;
        *len = be32(r->p + 1);
        r->p += 5;
    } else {
        return NO;
    }
    return OK;
}

/* The head and length of a str or bin with an 8-, 16- or 32-bit length: marker ``m8`` and
   the two after it (msgpack's str 8/16/32 are 0xd9-0xdb, bin 8/16/32 0xc4-0xc6); NO for
   another marker or a value that runs past the frame. */
static int
read_sized(Reader *r, unsigned char b, unsigned char m8, Py_ssize_t *head, Py_ssize_t *n)
{
    if (b == m8) {
        if (need(r, 2))
            return NO;
        *head = 2;
        *n = r->p[1];
    } else if (b == m8 + 1) {
        if (need(r, 3))
            return NO;
        *head = 3;
        *n = be16(r->p + 1);
    } else if (b == m8 + 2) {
        if (need(r, 5))
            return NO;
        *head = 5;
        *n = be32(r->p + 1);
    } else {
        return NO;
    }
    return need(r, *head + *n) ? NO : OK;
}

/* A str: where its UTF-8 bytes are and how many. */
static int
read_str(Reader *r, const unsigned char **s, Py_ssize_t *len)
{
    if (need(r, 1))
        return NO;
    unsigned char b = *r->p;
    Py_ssize_t head, n;
    if (b >= 0xa0 && b <= 0xbf) {
        head = 1;
        n = b & 0x1f;
        if (need(r, head + n))
            return NO;
    } else if (read_sized(r, b, 0xd9, &head, &n)) {  /* str 8/16/32 */
        return NO;
    }
    *s = r->p + head;
    *len = n;
    r->p += head + n;
    return OK;
}

/* A str as a new str object (NO for invalid UTF-8: msgpack refuses it, in Python). */
static int
read_str_object(Reader *r, PyObject **out)
{
    const unsigned char *s;
    Py_ssize_t n;
    if (read_str(r, &s, &n))
        return NO;
    *out = PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    if (*out == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return ERR;
        PyErr_Clear();
        return NO;
    }
    return OK;
}

/* bin or nil as bytes or None (a new reference); *size gets its length (0 for nil). */
static int
read_bin_or_nil(Reader *r, PyObject **out, Py_ssize_t *size)
{
    if (need(r, 1))
        return NO;
    unsigned char b = *r->p;
    Py_ssize_t head, n;
    if (b == 0xc0) {
        r->p += 1;
        *out = Py_NewRef(Py_None);
        *size = 0;
        return OK;
    }
    if (read_sized(r, b, 0xc4, &head, &n))  /* bin 8/16/32 */
        return NO;
    *out = PyBytes_FromStringAndSize((const char *)r->p + head, n);
    if (*out == NULL)
        return ERR;
    r->p += head + n;
    *size = n;
    return OK;
}

static int
is_nil(Reader *r)
{
    return r->p < r->end && *r->p == 0xc0;
}

/* An integer as a new int object; ``non_negative``: NO for a negative one. */
static int
read_int(Reader *r, PyObject **out, int non_negative)
{
    if (need(r, 1))
        return NO;
    unsigned char b = *r->p;
    int64_t v;
    if (b <= 0x7f) {
        r->p += 1;
        *out = PyLong_FromLong(b);
        return *out ? OK : ERR;
    }
    if (b >= 0xe0) {
        v = (int8_t)b;
        r->p += 1;
    } else {
        switch (b) {
        case 0xcc:
            if (need(r, 2))
                return NO;
            v = r->p[1];
            r->p += 2;
            break;
        case 0xcd:
            if (need(r, 3))
                return NO;
            v = be16(r->p + 1);
            r->p += 3;
            break;
        case 0xce:
            if (need(r, 5))
                return NO;
            v = be32(r->p + 1);
            r->p += 5;
            break;
        case 0xcf: {
            if (need(r, 9))
                return NO;
            uint64_t u = be64(r->p + 1);
            r->p += 9;
            *out = PyLong_FromUnsignedLongLong(u);
            return *out ? OK : ERR;
        }
        case 0xd0:
            if (need(r, 2))
                return NO;
            v = (int8_t)r->p[1];
            r->p += 2;
            break;
        case 0xd1:
            if (need(r, 3))
                return NO;
            v = (int16_t)be16(r->p + 1);
            r->p += 3;
            break;
        case 0xd2:
            if (need(r, 5))
                return NO;
            v = (int32_t)be32(r->p + 1);
            r->p += 5;
            break;
        case 0xd3:
            if (need(r, 9))
                return NO;
            v = (int64_t)be64(r->p + 1);
            r->p += 9;
            break;
        default:
            return NO;
        }
    }
    if (non_negative && v < 0)
        return NO;
    *out = PyLong_FromLongLong(v);
    return *out ? OK : ERR;
}

/* headers: nil (None) or an array of [str, bin|nil] pairs (a list of 2-tuples). */
static int
read_headers(Reader *r, PyObject **out, Py_ssize_t *size)
{
    if (is_nil(r)) {
        r->p += 1;
        *out = Py_NewRef(Py_None);
        return OK;
    }
    Py_ssize_t n;
    if (read_array(r, &n))
        return NO;
    if (n > r->end - r->p) /* each pair takes bytes: a hostile count costs nothing */
        return NO;
    PyObject *list = PyList_New(n);
    if (list == NULL)
        return ERR;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t pair_len, data_len;
        PyObject *name = NULL, *data = NULL;
        int rc = read_array(r, &pair_len);
        if (rc == OK && pair_len != 2)
            rc = NO;
        if (rc == OK)
            rc = read_str_object(r, &name);
        if (rc == OK) {
            rc = read_bin_or_nil(r, &data, &data_len);
            if (rc != OK)
                Py_DECREF(name);
        }
        if (rc != OK) {
            Py_DECREF(list);
            return rc;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(name);
            Py_DECREF(data);
            Py_DECREF(list);
            return ERR;
        }
        *size += PyUnicode_GET_LENGTH(name) + data_len;
        PyTuple_SET_ITEM(pair, 0, name);
        PyTuple_SET_ITEM(pair, 1, data);
        PyList_SET_ITEM(list, i, pair);
    }
    *out = list;
    return OK;
}

/* One message array: a new 7-tuple; *size gets its payload size.  ``stream`` caches the
 * last stream's str (and ``stream_bytes`` its UTF-8 bytes in the body). */
static int
read_message(Reader *r, PyObject **out, Py_ssize_t *size, PyObject **stream,
             const unsigned char **stream_bytes, Py_ssize_t *stream_len)
{
    Py_ssize_t fields;
    if (read_array(r, &fields) || fields < 3 || fields > 7)
        return NO;
    PyObject *item[7] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    Py_ssize_t value_len = 0, key_len = 0, headers_size = 0;
    int rc = read_int(r, &item[0], 1);
    if (rc == OK) {
        const unsigned char *s;
        Py_ssize_t n;
        rc = read_str(r, &s, &n);
        if (rc == OK) {
            if (*stream == NULL || n != *stream_len || memcmp(s, *stream_bytes, n) != 0) {
                PyObject *decoded = PyUnicode_DecodeUTF8((const char *)s, n, NULL);
                if (decoded == NULL) {
                    rc = PyErr_ExceptionMatches(PyExc_UnicodeDecodeError) ? NO : ERR;
                    if (rc == NO)
                        PyErr_Clear();
                } else {
                    Py_XSETREF(*stream, decoded);
                    *stream_bytes = s;
                    *stream_len = n;
                }
            }
            if (rc == OK)
                item[1] = Py_NewRef(*stream);
        }
    }
    if (rc == OK)
        rc = read_bin_or_nil(r, &item[2], &value_len);
    if (rc == OK && fields > 3)
        rc = read_bin_or_nil(r, &item[3], &key_len);
    if (rc == OK && fields > 4)
        rc = read_headers(r, &item[4], &headers_size);
    if (rc == OK && fields > 5) {
        if (is_nil(r)) {
            r->p += 1;
        } else {
            rc = read_int(r, &item[5], 1);
        }
    }
    if (rc == OK && fields > 6) {
        if (is_nil(r)) {
            r->p += 1;
        } else {
            rc = read_int(r, &item[6], 0);
        }
    }
    if (rc != OK) {
        for (int i = 0; i < 7; i++)
            Py_XDECREF(item[i]);
        return rc;
    }
    PyObject *tuple = PyTuple_New(7);
    if (tuple == NULL) {
        for (int i = 0; i < 7; i++)
            Py_XDECREF(item[i]);
        return ERR;
    }
    int has_container = item[4] != NULL && item[4] != Py_None;
    for (int i = 0; i < 7; i++)
        PyTuple_SET_ITEM(tuple, i, item[i] ? item[i] : Py_NewRef(Py_None));
    /* Only ints, str, bytes and None inside: it cannot be part of a cycle, so the
     * collector need not walk it (frames of thousands of messages would make it). */
    if (!has_container)
        PyObject_GC_UnTrack(tuple);
    *out = tuple;
    *size = value_len + key_len + headers_size;
    return OK;
}

/* Is the str at the reader ``text``? (advances past it when it is) */
static int
str_is(Reader *r, const char *text)
{
    Reader probe = *r;
    const unsigned char *s;
    Py_ssize_t n;
    size_t len = strlen(text);
    if (read_str(&probe, &s, &n) || (size_t)n != len || memcmp(s, text, len) != 0)
        return 0;
    *r = probe;
    return 1;
}

static int
parse_messages(Reader *r, PyObject **messages_out, PyObject **sizes_out)
{
    Py_ssize_t count;
    if (read_array(r, &count))
        return NO;
    if (count > r->end - r->p) /* each message takes bytes: a hostile count costs nothing */
        return NO;
    PyObject *messages = PyList_New(count);
    PyObject *sizes = PyList_New(count);
    PyObject *stream = NULL;
    const unsigned char *stream_bytes = NULL;
    Py_ssize_t stream_len = 0;
    int rc = (messages && sizes) ? OK : ERR;
    for (Py_ssize_t i = 0; rc == OK && i < count; i++) {
        PyObject *message, *size_obj;
        Py_ssize_t size;
        rc = read_message(r, &message, &size, &stream, &stream_bytes, &stream_len);
        if (rc != OK)
            break;
        PyList_SET_ITEM(messages, i, message);
        size_obj = PyLong_FromSsize_t(size);
        if (size_obj == NULL) {
            rc = ERR;
            break;
        }
        PyList_SET_ITEM(sizes, i, size_obj);
    }
    Py_XDECREF(stream);
    if (rc != OK) {
        Py_XDECREF(messages);
        Py_XDECREF(sizes);
        return rc;
    }
    *messages_out = messages;
    *sizes_out = sizes;
    return OK;
}

PyDoc_STRVAR(parse_produce_doc,
"parse_produce(body) -> (messages, sizes) or None\n\n"
"A produce frame's body read straight into sidecar_wire.parse_produce's result; None for\n"
"any body not of that shape (the caller decodes it in Python, which also refuses what is\n"
"malformed).");

static PyObject *
py_parse_produce(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Reader r = {(const unsigned char *)view.buf, (const unsigned char *)view.buf + view.len};
    PyObject *messages = NULL, *sizes = NULL, *result = NULL;
    int rc = NO;
    /* A map of exactly {"type": "produce", "messages": [...]}, in either order (a map with
     * other or repeated keys is the Python code's to read). */
    if (r.p < r.end && *r.p == 0x82) {
        r.p += 1;
        int seen_type = 0;
        rc = OK;
        for (int k = 0; k < 2 && rc == OK; k++) {
            if (!seen_type && str_is(&r, "type")) {
                seen_type = 1;
                rc = str_is(&r, "produce") ? OK : NO;
            } else if (messages == NULL && str_is(&r, "messages")) {
                rc = parse_messages(&r, &messages, &sizes);
            } else {
                rc = NO;
            }
        }
        if (rc == OK && (!seen_type || messages == NULL || r.p != r.end))
            rc = NO; /* bytes after the map: msgpack's ExtraData, in Python */
    }
    PyBuffer_Release(&view);
    if (rc == OK)
        result = PyTuple_Pack(2, messages, sizes);
    Py_XDECREF(messages);
    Py_XDECREF(sizes);
    if (rc == ERR)
        return NULL;
    if (rc == NO)
        Py_RETURN_NONE;
    return result;
}

/* ---- encoding: the SDK's produce frames ------------------------------------------------ */

/* Where encoding writes: a buffer of its own (ba NULL), or the end of a bytearray (the
 * SDK's output buffer: no bytes object made and copied again), whose size is kept at cap
 * while writing (put* run no Python code: nobody sees the unwritten tail) and set to len at
 * the end. */
typedef struct {
    char *buf;
    Py_ssize_t len, cap;
    PyObject *ba;
} Out;

static int
grow(Out *o, Py_ssize_t n)
{
    if (o->len + n <= o->cap)
        return OK;
    if (o->ba != NULL) {
        /* doubled (64 KiB at least): amortised, and the final shrink to len stays in
         * the bytearray's allocation (it reallocates only below half of it) */
        Py_ssize_t cap = o->cap < 32768 ? 65536 : o->cap * 2;
        if (cap < o->len + n)
            cap = o->len + n;
        if (PyByteArray_Resize(o->ba, cap) < 0)
            return ERR;
        o->buf = PyByteArray_AS_STRING(o->ba);
        o->cap = cap;
        return OK;
    }
    Py_ssize_t cap = o->cap ? o->cap : 65536;
    while (cap < o->len + n) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return ERR;
        }
        cap *= 2;
    }
    char *buf = PyMem_Realloc(o->buf, cap);
    if (buf == NULL) {
        PyErr_NoMemory();
        return ERR;
    }
    o->buf = buf;
    o->cap = cap;
    return OK;
}

static void
put(Out *o, const void *data, Py_ssize_t n)
{
    memcpy(o->buf + o->len, data, n);
    o->len += n;
}

static void
put_byte(Out *o, unsigned char b)
{
    o->buf[o->len++] = (char)b;
}

static void
put_be16(Out *o, uint32_t v)
{
    put_byte(o, (unsigned char)(v >> 8));
    put_byte(o, (unsigned char)v);
}

static void
put_be32(Out *o, uint32_t v)
{
    put_be16(o, v >> 16);
    put_be16(o, v & 0xffff);
}

static void
put_be64(Out *o, uint64_t v)
{
    put_be32(o, (uint32_t)(v >> 32));
    put_be32(o, (uint32_t)v);
}

/* A length header of a str/bin/array in msgpack's smallest form, as msgpack-python's
 * Packer writes it (``fix``: the fix form's first byte and its limit, 0 if none). */
static int
put_header(Out *o, Py_ssize_t n, unsigned char fix, Py_ssize_t fix_limit, unsigned char b8,
           unsigned char b16, unsigned char b32)
{
    if (grow(o, 5))
        return ERR;
    if (n < fix_limit)
        put_byte(o, fix | (unsigned char)n);
    else if (b8 && n < 256) {
        put_byte(o, b8);
        put_byte(o, (unsigned char)n);
    } else if (n < 65536) {
        put_byte(o, b16);
        put_be16(o, (uint32_t)n);
    } else if ((uint64_t)n <= 0xffffffffu) {
        put_byte(o, b32);
        put_be32(o, (uint32_t)n);
    } else {
        return NO;
    }
    return OK;
}

static int
put_int(Out *o, PyObject *obj)
{
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred())
        return ERR;
    if (grow(o, 9))
        return ERR;
    if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(obj);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                return ERR;
            PyErr_Clear();
            return NO; /* beyond 64 bits: msgpack's own error, in Python */
        }
        put_byte(o, 0xcf);
        put_be64(o, u);
    } else if (overflow < 0) {
        return NO;
    } else if (v >= 0) {
        if (v < 128)
            put_byte(o, (unsigned char)v);
        else if (v < 256) {
            put_byte(o, 0xcc);
            put_byte(o, (unsigned char)v);
        } else if (v < 65536) {
            put_byte(o, 0xcd);
            put_be16(o, (uint32_t)v);
        } else if (v <= 0xffffffffLL) {
            put_byte(o, 0xce);
            put_be32(o, (uint32_t)v);
        } else {
            put_byte(o, 0xcf);
            put_be64(o, (uint64_t)v);
        }
    } else {
        if (v >= -32)
            put_byte(o, (unsigned char)(int8_t)v);
        else if (v >= -128) {
            put_byte(o, 0xd0);
            put_byte(o, (unsigned char)(int8_t)v);
        } else if (v >= -32768) {
            put_byte(o, 0xd1);
            put_be16(o, (uint16_t)(int16_t)v);
        } else if (v >= INT32_MIN) {
            put_byte(o, 0xd2);
            put_be32(o, (uint32_t)(int32_t)v);
        } else {
            put_byte(o, 0xd3);
            put_be64(o, (uint64_t)v);
        }
    }
    return OK;
}

static int
put_str(Out *o, PyObject *obj)
{
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(obj, &n);
    if (s == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return ERR;
        PyErr_Clear();
        return NO; /* a lone surrogate: msgpack's own error, in Python */
    }
    int rc = put_header(o, n, 0xa0, 32, 0xd9, 0xda, 0xdb);
    if (rc)
        return rc;
    if (grow(o, n))
        return ERR;
    put(o, s, n);
    return OK;
}

static int
put_bin(Out *o, PyObject *obj)
{
    Py_ssize_t n = PyBytes_GET_SIZE(obj);
    int rc = put_header(o, n, 0, 0, 0xc4, 0xc5, 0xc6);
    if (rc)
        return rc;
    if (grow(o, n))
        return ERR;
    put(o, PyBytes_AS_STRING(obj), n);
    return OK;
}

/* The types a queued message holds (ints, str, bytes, None, tuples and lists of them);
 * any other is NO: the frames are then packed by msgpack, in Python. */
static int
put_object(Out *o, PyObject *obj, int depth)
{
    if (obj == Py_None) {
        if (grow(o, 1))
            return ERR;
        put_byte(o, 0xc0);
        return OK;
    }
    if (PyBytes_CheckExact(obj))
        return put_bin(o, obj);
    if (PyUnicode_CheckExact(obj))
        return put_str(o, obj);
    if (PyLong_CheckExact(obj))
        return put_int(o, obj);
    if ((PyTuple_CheckExact(obj) || PyList_CheckExact(obj)) && depth < 3) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
        int rc = put_header(o, n, 0x90, 16, 0, 0xdc, 0xdd);
        if (rc)
            return rc;
        PyObject **items = PySequence_Fast_ITEMS(obj);
        for (Py_ssize_t i = 0; i < n; i++) {
            rc = put_object(o, items[i], depth + 1);
            if (rc)
                return rc;
        }
        return OK;
    }
    return NO;
}

static Py_ssize_t
py_len(PyObject *obj)
{
    if (PyBytes_CheckExact(obj))
        return PyBytes_GET_SIZE(obj);
    if (PyUnicode_CheckExact(obj))
        return PyUnicode_GET_LENGTH(obj);
    return -1;
}

/* sidecar_wire.message_estimate(item), or -1 when the item is not of the shapes it
 * reads (the caller packs in Python then). */
static Py_ssize_t
estimate(PyObject *item, Py_ssize_t overhead)
{
    if (!PyTuple_CheckExact(item) && !PyList_CheckExact(item))
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(item);
    PyObject **f = PySequence_Fast_ITEMS(item);
    if (n < 3)
        return -1;
    Py_ssize_t size = overhead, len;
    if ((len = py_len(f[1])) < 0)
        return -1;
    size += len;
    for (int i = 2; i < 4 && i < n; i++) {
        if (f[i] == Py_None)
            continue;
        if (!PyBytes_CheckExact(f[i]))
            return -1;
        size += PyBytes_GET_SIZE(f[i]);
    }
    if (n > 4 && f[4] != Py_None) {
        PyObject *headers = f[4];
        if (!PyList_CheckExact(headers) && !PyTuple_CheckExact(headers))
            return -1;
        Py_ssize_t count = PySequence_Fast_GET_SIZE(headers);
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *pair = PySequence_Fast_ITEMS(headers)[i];
            if ((!PyList_CheckExact(pair) && !PyTuple_CheckExact(pair)) ||
                PySequence_Fast_GET_SIZE(pair) != 2)
                return -1;
            PyObject *name = PySequence_Fast_ITEMS(pair)[0];
            PyObject *value = PySequence_Fast_ITEMS(pair)[1];
            if ((len = py_len(name)) < 0)
                return -1;
            size += len + 8;
            if (value != Py_None) {
                if ((len = py_len(value)) < 0)
                    return -1;
                size += len;
            }
        }
    }
    return size;
}

/* The start of a produce frame's map, {"type": "produce", "messages": ...}, and of a
 * reports frame's, {"type": "reports", "reports": ...}, as msgpack packs these dicts. */
static const char PRODUCE_HEAD[] = "\x82\xa4type\xa7produce\xa8messages";
static const char REPORTS_HEAD[] = "\x82\xa4type\xa7reports\xa7reports";

/* One frame of items[first:end]: prefix, the map's start ``head``, the array of items. */
static int
put_frame(Out *o, const char *head, Py_ssize_t head_len, PyObject **items, Py_ssize_t first,
          Py_ssize_t end)
{
    Py_ssize_t start = o->len;
    if (grow(o, 4 + head_len))
        return ERR;
    o->len += 4; /* the length prefix, written below */
    put(o, head, head_len);
    int rc = put_header(o, end - first, 0x90, 16, 0, 0xdc, 0xdd);
    for (Py_ssize_t i = first; rc == OK && i < end; i++)
        rc = put_object(o, items[i], 0);
    if (rc)
        return rc;
    uint64_t body = (uint64_t)(o->len - start - 4);
    if (body > 0xffffffffu)
        return NO;
    unsigned char *p = (unsigned char *)o->buf + start;
    p[0] = (unsigned char)(body >> 24);
    p[1] = (unsigned char)(body >> 16);
    p[2] = (unsigned char)(body >> 8);
    p[3] = (unsigned char)body;
    return OK;
}

PyDoc_STRVAR(encode_produce_doc,
"encode_produce(queue, start, end, max_messages, limit, overhead, out=None) -> bytes, int\n"
"or None\n\n"
"sidecar_wire.encode_produce's twin: queue[start:end] (message tuples) as produce frames\n"
"of at most max_messages each and, when limit >= 0, cut before a message whose estimate\n"
"would take the frame's past limit.  With ``out`` (a bytearray) the frames are appended to\n"
"it and their length returned.  None when an item holds what this does not pack (``out``\n"
"unchanged; the caller packs in Python then).");

static PyObject *
py_encode_produce(PyObject *self, PyObject *args)
{
    PyObject *queue, *into = Py_None;
    Py_ssize_t start, end, max_messages, limit, overhead;
    if (!PyArg_ParseTuple(args, "O!nnnnn|O", &PyList_Type, &queue, &start, &end, &max_messages,
                          &limit, &overhead, &into))
        return NULL;
    if (start < 0 || end > PyList_GET_SIZE(queue) || max_messages < 1) {
        PyErr_SetString(PyExc_ValueError, "encode_produce: bad range or max_messages");
        return NULL;
    }
    if (into != Py_None && !PyByteArray_CheckExact(into)) {
        PyErr_SetString(PyExc_TypeError, "encode_produce: out must be a bytearray");
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(queue);
    Out o = {NULL, 0, 0, NULL};
    Py_ssize_t base = 0;
    if (into != Py_None) {
        o.ba = into;
        base = o.len = o.cap = PyByteArray_GET_SIZE(into);
        o.buf = PyByteArray_AS_STRING(into);
    }
    int rc = OK;
    Py_ssize_t first = start, size = 0;
    for (Py_ssize_t i = start; rc == OK && i < end; i++) {
        Py_ssize_t item_size = 0;
        if (limit >= 0) {
            item_size = estimate(items[i], overhead);
            if (item_size < 0) {
                rc = NO;
                break;
            }
        }
        if (i > first && ((limit >= 0 && size + item_size > limit) || i - first >= max_messages)) {
            rc = put_frame(&o, PRODUCE_HEAD, sizeof(PRODUCE_HEAD) - 1, items, first, i);
            first = i;
            size = 0;
        }
        size += item_size;
    }
    if (rc == OK && first < end)
        rc = put_frame(&o, PRODUCE_HEAD, sizeof(PRODUCE_HEAD) - 1, items, first, end);
    if (o.ba != NULL) {
        /* what was written stays (OK), or out is as it was */
        if (PyByteArray_Resize(into, rc == OK ? o.len : base) < 0)
            return NULL;
        if (rc == ERR)
            return NULL;
        if (rc == NO)
            Py_RETURN_NONE;
        return PyLong_FromSsize_t(o.len - base);
    }
    PyObject *result = NULL;
    if (rc == OK)
        result = PyBytes_FromStringAndSize(o.buf ? o.buf : "", o.len);
    PyMem_Free(o.buf);
    if (rc == NO)
        Py_RETURN_NONE;
    return result;
}

PyDoc_STRVAR(encode_reports_doc,
"encode_reports(items) -> bytes or None\n\n"
"sidecar_wire.encode_reports' twin: one reports frame answering items (a list of single\n"
"or group report items), the same bytes msgpack writes.  None when an item holds what this\n"
"does not pack (the caller packs in Python then, and msgpack raises its own errors).");

static PyObject *
py_encode_reports(PyObject *self, PyObject *items)
{
    if (!PyList_CheckExact(items))
        Py_RETURN_NONE;
    Out o = {NULL, 0, 0, NULL};
    /* items is only read here: put_object runs no Python code, so it cannot change */
    int rc = put_frame(&o, REPORTS_HEAD, sizeof(REPORTS_HEAD) - 1, PySequence_Fast_ITEMS(items),
                       0, PyList_GET_SIZE(items));
    PyObject *result = NULL;
    if (rc == OK)
        result = PyBytes_FromStringAndSize(o.buf, o.len);
    PyMem_Free(o.buf);
    if (rc == NO)
        Py_RETURN_NONE;
    return result;
}
/* A consumed message's fields, read off MemberCore's Entry (delivery_id, attempt, rec) and
 * its record (partition, offset, timestamp, value, key, headers). */
static PyObject *S_DELIVERY_ID, *S_ATTEMPT, *S_REC, *S_PARTITION, *S_OFFSET, *S_TIMESTAMP,
    *S_VALUE, *S_KEY, *S_HEADERS;

/* Entry.wire(), packed: [delivery_id, partition, offset, timestamp, attempt, value] then
 * key and headers as far as needed (trailing nils dropped, headers as [name, value] arrays,
 * which is how msgpack packs the tuples they are). */
static int
put_entry(Out *o, PyObject *entry)
{
    PyObject *rec = NULL, *f[8] = {NULL};
    int rc = ERR;
    if ((f[0] = PyObject_GetAttr(entry, S_DELIVERY_ID)) == NULL ||
        (f[4] = PyObject_GetAttr(entry, S_ATTEMPT)) == NULL ||
        (rec = PyObject_GetAttr(entry, S_REC)) == NULL ||
        (f[1] = PyObject_GetAttr(rec, S_PARTITION)) == NULL ||
        (f[2] = PyObject_GetAttr(rec, S_OFFSET)) == NULL ||
        (f[3] = PyObject_GetAttr(rec, S_TIMESTAMP)) == NULL ||
        (f[5] = PyObject_GetAttr(rec, S_VALUE)) == NULL ||
        (f[6] = PyObject_GetAttr(rec, S_KEY)) == NULL ||
        (f[7] = PyObject_GetAttr(rec, S_HEADERS)) == NULL)
        goto done;
    int truthy = PyObject_IsTrue(f[7]);
    if (truthy < 0)
        goto done;
    Py_ssize_t n = truthy ? 8 : (f[6] != Py_None ? 7 : 6);
    rc = put_header(o, n, 0x90, 16, 0, 0xdc, 0xdd);
    for (Py_ssize_t i = 0; rc == OK && i < n; i++)
        rc = put_object(o, f[i], i == 7 ? 1 : 2); /* headers: an array of pairs */
done:
    Py_XDECREF(rec);
    for (int i = 0; i < 8; i++)
        Py_XDECREF(f[i]);
    return rc;
}

static const char MESSAGES_HEAD[] = "\x83\xa4type\xa8messages\xa2id";
static const char MESSAGES_KEY[] = "\xa8messages";

PyDoc_STRVAR(encode_messages_doc,
"encode_messages(sub_id, entries) -> bytes or None\n\n"
"sidecar_wire.encode_messages' twin: the messages frame answering a fetch of subscription\n"
"sub_id with entries (consume/core.py's Entry), the same bytes msgpack writes for\n"
"messages(sub_id, [e.wire() for e in entries]), without a list per message.  None when a\n"
"field holds what this does not pack (the caller packs in Python then).");

static PyObject *
py_encode_messages(PyObject *self, PyObject *args)
{
    PyObject *sub_id, *entries;
    if (!PyArg_ParseTuple(args, "O!O!", &PyLong_Type, &sub_id, &PyList_Type, &entries))
        return NULL;
    Out o = {NULL, 0, 0, NULL};
    int rc = grow(&o, 4 + sizeof(MESSAGES_HEAD));
    if (rc == OK) {
        o.len = 4;
        put(&o, MESSAGES_HEAD, sizeof(MESSAGES_HEAD) - 1);
        rc = put_int(&o, sub_id);
    }
    if (rc == OK)
        rc = grow(&o, sizeof(MESSAGES_KEY));
    if (rc == OK) {
        put(&o, MESSAGES_KEY, sizeof(MESSAGES_KEY) - 1);
        rc = put_header(&o, PyList_GET_SIZE(entries), 0x90, 16, 0, 0xdc, 0xdd);
    }
    Py_ssize_t count = PyList_GET_SIZE(entries);
    /* (reading an attribute may run Python code: the list is re-read each time, and a
     * list that changed size meanwhile is packed in Python instead) */
    for (Py_ssize_t i = 0; rc == OK && i < count; i++) {
        if (PyList_GET_SIZE(entries) != count) {
            rc = NO;
            break;
        }
        PyObject *entry = PyList_GET_ITEM(entries, i);
        Py_INCREF(entry);
        rc = put_entry(&o, entry);
        Py_DECREF(entry);
    }
    if (rc == OK && PyList_GET_SIZE(entries) != count)
        rc = NO;
    if (rc == OK) {
        uint64_t body = (uint64_t)(o.len - 4);
        if (body > 0xffffffffu)
            rc = NO;
        else {
            unsigned char *p = (unsigned char *)o.buf;
            p[0] = (unsigned char)(body >> 24);
            p[1] = (unsigned char)(body >> 16);
            p[2] = (unsigned char)(body >> 8);
            p[3] = (unsigned char)body;
        }
    }
    PyObject *result = NULL;
    if (rc == OK)
        result = PyBytes_FromStringAndSize(o.buf, o.len);
    PyMem_Free(o.buf);
    if (rc == NO)
        Py_RETURN_NONE;
    return result;
}

static PyMethodDef methods[] = {
    {"parse_produce", py_parse_produce, METH_O, parse_produce_doc},
    {"encode_produce", py_encode_produce, METH_VARARGS, encode_produce_doc},
    {"encode_reports", py_encode_reports, METH_O, encode_reports_doc},
    {"encode_messages", py_encode_messages, METH_VARARGS, encode_messages_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "databus.protocol._sidecar_speedups",
    "The sidecar wire format's per-frame kernels in C (pure-Python twins in sidecar_wire.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__sidecar_speedups(void)
{
#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return NULL;
    INTERN(S_DELIVERY_ID, "delivery_id")
    INTERN(S_ATTEMPT, "attempt")
    INTERN(S_REC, "rec")
    INTERN(S_PARTITION, "partition")
    INTERN(S_OFFSET, "offset")
    INTERN(S_TIMESTAMP, "timestamp")
    INTERN(S_VALUE, "value")
    INTERN(S_KEY, "key")
    INTERN(S_HEADERS, "headers")
#undef INTERN
    return PyModule_Create(&module);
}
