/* Typed streams' batch path (databus/schemas/serde.py, ``Codec.encode_many``): many msgpack
 * values checked against one Avro schema and written in Confluent's wire format, straight
 * from msgpack to Avro's binary encoding, without a Python object per field.
 *
 * The schema comes as a "program" built once per schema by serde.py (``_avro_program``):
 * nested tuples, each (kind, a, b, c):
 *   (NULL|BOOLEAN|INT|LONG|FLOAT|DOUBLE|STRING|BYTES,)
 *   (RECORD, names: tuple[bytes], types: tuple[node], defaults: tuple[bytes | None])
 *   (ENUM, symbols: tuple[bytes])        (ARRAY, items)      (MAP, values)
 *   (FIXED, size)                        (UNION, branches: tuple[node])
 * A default is the field's default already in Avro's encoding (fastavro wrote it).
 *
 * The rule: this code takes a value only where serde.py's checker takes it AND writes the
 * bytes fastavro would; anything else (a refusal, JSON text, an ext type, a duplicate key, a
 * union it cannot decide as fastavro does -- serde.py does not give it those) answers None
 * for that value, and serde.py's per-record path decides: it encodes it, or refuses it
 * naming the field and the rule.  So refusals keep their messages and the batch path never
 * takes what the checker refuses. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { K_NULL, K_BOOLEAN, K_INT, K_LONG, K_FLOAT, K_DOUBLE, K_STRING, K_BYTES,
       K_RECORD, K_ENUM, K_ARRAY, K_MAP, K_FIXED, K_UNION };

#define MAX_DEPTH 64
#define MAX_FIELDS 256
#define FLOAT_MAX 3.4028234663852886e38

typedef struct {
    unsigned char *data;
    Py_ssize_t len, cap;
} Out;

static int out_reserve(Out *o, Py_ssize_t more) {
    if (o->len + more <= o->cap) return 0;
    Py_ssize_t cap = o->cap ? o->cap : 256;
    while (cap < o->len + more) cap *= 2;
    unsigned char *d = PyMem_Realloc(o->data, cap);
    if (!d) return -1;
    o->data = d;
    o->cap = cap;
    return 0;
}

static int out_bytes(Out *o, const void *p, Py_ssize_t n) {
    if (out_reserve(o, n) < 0) return -1;
    memcpy(o->data + o->len, p, n);
    o->len += n;
    return 0;
}

static int out_long(Out *o, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    if (out_reserve(o, 10) < 0) return -1;
    while (z >= 0x80) {
        o->data[o->len++] = (unsigned char)(z | 0x80);
        z >>= 7;
    }
    o->data[o->len++] = (unsigned char)z;
    return 0;
}

static int out_le(Out *o, uint64_t bits, int n) {
    if (out_reserve(o, n) < 0) return -1;
    for (int i = 0; i < n; i++) o->data[o->len++] = (unsigned char)(bits >> (8 * i));
    return 0;
}

/* -- msgpack reading ---------------------------------------------------------------------- */

typedef struct {
    const unsigned char *p, *end;
} In;

/* Results: 1 taken, 0 not taken here (serde.py decides), -1 a Python error (memory). */
#define NOPE 0

static inline int need(In *in, Py_ssize_t n) { return in->end - in->p >= n; }

static uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* A numeric value: kind 0 none, 1 signed integer (i), 2 unsigned above INT64_MAX, 3 float. */
typedef struct {
    int kind;
    int64_t i;
    double d;
} Num;

static int read_num(In *in, Num *n) {
    if (!need(in, 1)) return 0;
    unsigned char c = *in->p;
    if (c <= 0x7f) { n->kind = 1; n->i = c; in->p += 1; return 1; }
    if (c >= 0xe0) { n->kind = 1; n->i = (int8_t)c; in->p += 1; return 1; }
    int size;
    switch (c) {
    case 0xcc: size = 1; break;
    case 0xcd: size = 2; break;
    case 0xce: size = 4; break;
    case 0xcf: size = 8; break;
    case 0xd0: size = 1; break;
    case 0xd1: size = 2; break;
    case 0xd2: size = 4; break;
    case 0xd3: size = 8; break;
    case 0xca: size = 4; break;
    case 0xcb: size = 8; break;
    default: return 0;
    }
    if (!need(in, 1 + size)) return 0;
    uint64_t raw = be(in->p + 1, size);
    in->p += 1 + size;
    if (c == 0xca) {
        uint32_t b32 = (uint32_t)raw;
        float f;
        memcpy(&f, &b32, 4);
        n->kind = 3; n->d = (double)f;
    } else if (c == 0xcb) {
        memcpy(&n->d, &raw, 8);
        n->kind = 3;
    } else if (c <= 0xcf) {
        if (raw > (uint64_t)INT64_MAX) { n->kind = 2; return 1; }
        n->kind = 1; n->i = (int64_t)raw;
    } else {
        n->kind = 1;
        switch (size) {
        case 1: n->i = (int8_t)raw; break;
        case 2: n->i = (int16_t)raw; break;
        case 4: n->i = (int32_t)raw; break;
        default: n->i = (int64_t)raw;
        }
    }
    return 1;
}

/* A str (is_str 1) or bin (0): its bytes. */
static int read_raw(In *in, int *is_str, const unsigned char **p, Py_ssize_t *n) {
    if (!need(in, 1)) return 0;
    unsigned char c = *in->p;
    int hdr;
    uint64_t size;
    if (c >= 0xa0 && c <= 0xbf) { *is_str = 1; hdr = 1; size = c & 0x1f; }
    else if (c == 0xd9 || c == 0xc4) { *is_str = c == 0xd9; hdr = 2; if (!need(in, 2)) return 0; size = in->p[1]; }
    else if (c == 0xda || c == 0xc5) { *is_str = c == 0xda; hdr = 3; if (!need(in, 3)) return 0; size = be(in->p + 1, 2); }
    else if (c == 0xdb || c == 0xc6) { *is_str = c == 0xdb; hdr = 5; if (!need(in, 5)) return 0; size = be(in->p + 1, 4); }
    else return 0;
    if ((uint64_t)(in->end - in->p - hdr) < size) return 0;
    *p = in->p + hdr;
    *n = (Py_ssize_t)size;
    in->p += hdr + size;
    return 1;
}

/* msgpack's str is UTF-8 that Python's strict decoder takes (what msgpack.unpackb does). */
static int valid_utf8(const unsigned char *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] >= 0x80) {
            PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
            if (!s) { PyErr_Clear(); return 0; }
            Py_DECREF(s);
            return 1;
        }
    }
    return 1;
}

static int read_str(In *in, const unsigned char **p, Py_ssize_t *n) {
    int is_str;
    if (!read_raw(in, &is_str, p, n) || !is_str) return 0;
    return valid_utf8(*p, *n);
}

/* A container's header: map (want_map 1) or array; its entry count. */
static int read_container(In *in, int want_map, Py_ssize_t *count) {
    if (!need(in, 1)) return 0;
    unsigned char c = *in->p;
    if (want_map) {
        if (c >= 0x80 && c <= 0x8f) { *count = c & 0x0f; in->p += 1; return 1; }
        if (c == 0xde && need(in, 3)) { *count = (Py_ssize_t)be(in->p + 1, 2); in->p += 3; return 1; }
        if (c == 0xdf && need(in, 5)) { *count = (Py_ssize_t)be(in->p + 1, 4); in->p += 5; return 1; }
    } else {
        if (c >= 0x90 && c <= 0x9f) { *count = c & 0x0f; in->p += 1; return 1; }
        if (c == 0xdc && need(in, 3)) { *count = (Py_ssize_t)be(in->p + 1, 2); in->p += 3; return 1; }
        if (c == 0xdd && need(in, 5)) { *count = (Py_ssize_t)be(in->p + 1, 4); in->p += 5; return 1; }
    }
    return 0;
}

/* -- the transcoder ----------------------------------------------------------------------- */

static int write_value(In *in, PyObject *node, Out *o, int depth);

static long node_kind(PyObject *node) { return PyLong_AsLong(PyTuple_GET_ITEM(node, 0)); }

static int write_primitive(In *in, long kind, Out *o) {
    Num n;
    const unsigned char *p;
    Py_ssize_t len;
    int is_str;
    if (!need(in, 1)) return 0;
    unsigned char c = *in->p;
    switch (kind) {
    case K_NULL:
        if (c != 0xc0) return 0;
        in->p++;
        return 1;
    case K_BOOLEAN:
        if (c != 0xc2 && c != 0xc3) return 0;
        in->p++;
        return out_bytes(o, c == 0xc3 ? "\x01" : "\x00", 1) < 0 ? -1 : 1;
    case K_INT:
    case K_LONG:
        if (!read_num(in, &n) || n.kind != 1) return 0;
        if (kind == K_INT && (n.i < INT32_MIN || n.i > INT32_MAX)) return 0;
        return out_long(o, n.i) < 0 ? -1 : 1;
    case K_FLOAT: {
        if (!read_num(in, &n) || n.kind == 0 || n.kind == 2) return 0;
        double d = n.kind == 1 ? (double)n.i : n.d;
        if (n.kind == 3 && !(d != d) && d - d == 0 && (d > FLOAT_MAX || d < -FLOAT_MAX))
            return 0;
        float f = (float)d;
        uint32_t b;
        memcpy(&b, &f, 4);
        return out_le(o, b, 4) < 0 ? -1 : 1;
    }
    case K_DOUBLE: {
        if (!read_num(in, &n) || n.kind == 0 || n.kind == 2) return 0;
        double d = n.kind == 1 ? (double)n.i : n.d;
        uint64_t b;
        memcpy(&b, &d, 8);
        return out_le(o, b, 8) < 0 ? -1 : 1;
    }
    case K_STRING:
        if (!read_str(in, &p, &len)) return 0;
        if (out_long(o, len) < 0 || out_bytes(o, p, len) < 0) return -1;
        return 1;
    case K_BYTES:
        if (!read_raw(in, &is_str, &p, &len) || is_str) return 0;
        if (out_long(o, len) < 0 || out_bytes(o, p, len) < 0) return -1;
        return 1;
    }
    return 0;
}

/* The fields of a record in one pass when the map's keys come in the schema's order (the
 * common case); else 0 and write_record takes the slow way. */
static int record_in_order(In *in, PyObject *node, Out *o, int depth, Py_ssize_t count) {
    PyObject *names = PyTuple_GET_ITEM(node, 1), *types = PyTuple_GET_ITEM(node, 2),
             *defaults = PyTuple_GET_ITEM(node, 3);
    Py_ssize_t nfields = PyTuple_GET_SIZE(names), f = 0;
    for (Py_ssize_t k = 0; k < count; k++) {
        const unsigned char *key;
        Py_ssize_t klen;
        if (!read_str(in, &key, &klen)) return 0;
        for (;; f++) {  /* fields the map skips take their defaults */
            if (f >= nfields) return 0;  /* an unknown or repeated key, or out of order */
            PyObject *name = PyTuple_GET_ITEM(names, f);
            if (PyBytes_GET_SIZE(name) == klen && memcmp(PyBytes_AS_STRING(name), key, klen) == 0)
                break;
            PyObject *dflt = PyTuple_GET_ITEM(defaults, f);
            if (dflt == Py_None) return 0;
            if (out_bytes(o, PyBytes_AS_STRING(dflt), PyBytes_GET_SIZE(dflt)) < 0) return -1;
        }
        int r = write_value(in, PyTuple_GET_ITEM(types, f), o, depth + 1);
        if (r != 1) return r;
        f++;
    }
    for (; f < nfields; f++) {
        PyObject *dflt = PyTuple_GET_ITEM(defaults, f);
        if (dflt == Py_None) return 0;
        if (out_bytes(o, PyBytes_AS_STRING(dflt), PyBytes_GET_SIZE(dflt)) < 0) return -1;
    }
    return 1;
}

static int skip_value(In *in, int depth);

static int skip_n(In *in, Py_ssize_t n, int depth) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (!skip_value(in, depth + 1)) return 0;
    return 1;
}

static int skip_value(In *in, int depth) {
    Num n;
    const unsigned char *p;
    Py_ssize_t len;
    int is_str;
    if (depth > MAX_DEPTH || !need(in, 1)) return 0;
    unsigned char c = *in->p;
    if (c == 0xc0 || c == 0xc2 || c == 0xc3) { in->p++; return 1; }
    if ((c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf) {
        if (!read_container(in, 1, &len)) return 0;
        return skip_n(in, 2 * len, depth);
    }
    if ((c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd) {
        if (!read_container(in, 0, &len)) return 0;
        return skip_n(in, len, depth);
    }
    if (read_raw(in, &is_str, &p, &len)) return 1;
    return read_num(in, &n);
}

static int write_record(In *in, PyObject *node, Out *o, int depth) {
    Py_ssize_t count;
    if (!read_container(in, 1, &count)) return 0;
    In start = *in;
    Py_ssize_t mark = o->len;
    int r = record_in_order(in, node, o, depth, count);
    if (r != 0) return r;
    /* keys out of the schema's order: find each field's value, then write them in order */
    *in = start;
    o->len = mark;
    PyObject *names = PyTuple_GET_ITEM(node, 1), *types = PyTuple_GET_ITEM(node, 2),
             *defaults = PyTuple_GET_ITEM(node, 3);
    Py_ssize_t nfields = PyTuple_GET_SIZE(names);
    if (nfields > MAX_FIELDS) return 0;
    const unsigned char *at[MAX_FIELDS];
    for (Py_ssize_t f = 0; f < nfields; f++) at[f] = NULL;
    for (Py_ssize_t k = 0; k < count; k++) {
        const unsigned char *key;
        Py_ssize_t klen, f;
        if (!read_str(in, &key, &klen)) return 0;
        for (f = 0; f < nfields; f++) {
            PyObject *name = PyTuple_GET_ITEM(names, f);
            if (PyBytes_GET_SIZE(name) == klen && memcmp(PyBytes_AS_STRING(name), key, klen) == 0)
                break;
        }
        if (f == nfields || at[f] != NULL) return 0;  /* unknown or repeated */
        at[f] = in->p;
        if (!skip_value(in, depth + 1)) return 0;
    }
    const unsigned char *after = in->p;
    for (Py_ssize_t f = 0; f < nfields; f++) {
        if (at[f] == NULL) {
            PyObject *dflt = PyTuple_GET_ITEM(defaults, f);
            if (dflt == Py_None) return 0;
            if (out_bytes(o, PyBytes_AS_STRING(dflt), PyBytes_GET_SIZE(dflt)) < 0) return -1;
            continue;
        }
        In sub = {at[f], in->end};
        int w = write_value(&sub, PyTuple_GET_ITEM(types, f), o, depth + 1);
        if (w != 1) return w;
    }
    in->p = after;
    return 1;
}

static int write_value(In *in, PyObject *node, Out *o, int depth) {
    if (depth > MAX_DEPTH) return 0;
    long kind = node_kind(node);
    Py_ssize_t count;
    switch (kind) {
    case K_RECORD:
        return write_record(in, node, o, depth);
    case K_ENUM: {
        const unsigned char *p;
        Py_ssize_t len;
        if (!read_str(in, &p, &len)) return 0;
        PyObject *symbols = PyTuple_GET_ITEM(node, 1);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(symbols); i++) {
            PyObject *s = PyTuple_GET_ITEM(symbols, i);
            if (PyBytes_GET_SIZE(s) == len && memcmp(PyBytes_AS_STRING(s), p, len) == 0)
                return out_long(o, i) < 0 ? -1 : 1;
        }
        return 0;
    }
    case K_ARRAY: {
        if (!read_container(in, 0, &count)) return 0;
        if (count > 0) {
            if (out_long(o, count) < 0) return -1;
            PyObject *items = PyTuple_GET_ITEM(node, 1);
            for (Py_ssize_t i = 0; i < count; i++) {
                int r = write_value(in, items, o, depth + 1);
                if (r != 1) return r;
            }
        }
        return out_long(o, 0) < 0 ? -1 : 1;
    }
    case K_MAP: {
        if (!read_container(in, 1, &count)) return 0;
        if (count > 0) {
            if (count > 64) return 0;  /* (the repeated-key check below is quadratic) */
            const unsigned char *keys[64];
            Py_ssize_t klens[64];
            if (out_long(o, count) < 0) return -1;
            PyObject *values = PyTuple_GET_ITEM(node, 1);
            for (Py_ssize_t i = 0; i < count; i++) {
                const unsigned char *key;
                Py_ssize_t klen;
                if (!read_str(in, &key, &klen)) return 0;
                for (Py_ssize_t j = 0; j < i; j++)  /* a dict keeps one: serde.py decides */
                    if (klens[j] == klen && memcmp(keys[j], key, klen) == 0) return 0;
                keys[i] = key;
                klens[i] = klen;
                if (out_long(o, klen) < 0 || out_bytes(o, key, klen) < 0) return -1;
                int r = write_value(in, values, o, depth + 1);
                if (r != 1) return r;
            }
        }
        return out_long(o, 0) < 0 ? -1 : 1;
    }
    case K_FIXED: {
        const unsigned char *p;
        Py_ssize_t len;
        int is_str;
        if (!read_raw(in, &is_str, &p, &len) || is_str) return 0;
        if (len != PyLong_AsSsize_t(PyTuple_GET_ITEM(node, 1))) return 0;
        return out_bytes(o, p, len) < 0 ? -1 : 1;
    }
    case K_UNION: {
        /* the first branch that takes the value, as fastavro picks (serde.py gives this
         * only unions where that is fastavro's choice) */
        PyObject *branches = PyTuple_GET_ITEM(node, 1);
        In start = *in;
        Py_ssize_t mark = o->len;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(branches); i++) {
            *in = start;
            o->len = mark;
            if (out_long(o, i) < 0) return -1;
            int r = write_value(in, PyTuple_GET_ITEM(branches, i), o, depth + 1);
            if (r != 0) return r;
        }
        return 0;
    }
    default:
        return write_primitive(in, kind, o);
    }
}

/* One value: a new reference to its wire-format bytes, Py_None (new reference) where
 * serde.py must decide, or NULL with a Python error. */
static PyObject *encode_one(PyObject *program, Py_buffer *prefix, int automatic, PyObject *v,
                            Out *o) {
    unsigned char first = PyBytes_Check(v) && PyBytes_GET_SIZE(v) ? *PyBytes_AS_STRING(v) : 0;
    if (PyBytes_Check(v) && (!automatic || (first >= 0x80 && first <= 0x9f) ||
                             (first >= 0xdc && first <= 0xdf))) {
        In in = {(const unsigned char *)PyBytes_AS_STRING(v),
                 (const unsigned char *)PyBytes_AS_STRING(v) + PyBytes_GET_SIZE(v)};
        o->len = 0;
        if (out_bytes(o, prefix->buf, prefix->len) < 0) return PyErr_NoMemory();
        int r = write_value(&in, program, o, 0);
        if (r < 0) return PyErr_Occurred() ? NULL : PyErr_NoMemory();
        if (r == 1 && in.p == in.end)  /* (trailing bytes: msgpack's ExtraData) */
            return PyBytes_FromStringAndSize((const char *)o->data, o->len);
    }
    return Py_NewRef(Py_None);
}

/* encode_many(program, prefix, values, auto) -> list: each value's wire-format bytes (prefix,
 * then the Avro body), or None where serde.py's per-record path must decide.  ``auto``: only
 * a value opening with a msgpack map or array is msgpack (parse_input's rule), others JSON. */
static PyObject *encode_many(PyObject *self, PyObject *args) {
    PyObject *program, *values;
    Py_buffer prefix;
    int automatic;
    if (!PyArg_ParseTuple(args, "O!y*O!p", &PyTuple_Type, &program, &prefix, &PyList_Type,
                          &values, &automatic))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(values);
    PyObject *result = PyList_New(n);
    Out o = {NULL, 0, 0};
    if (!result) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = encode_one(program, &prefix, automatic, PyList_GET_ITEM(values, i), &o);
        if (!item) goto fail;
        PyList_SET_ITEM(result, i, item);
    }
    PyMem_Free(o.data);
    PyBuffer_Release(&prefix);
    return result;
fail:
    PyMem_Free(o.data);
    PyBuffer_Release(&prefix);
    Py_XDECREF(result);
    return NULL;
}

/* encode_stream(messages, stream, program, prefix, auto, skip) -> list of indices: the
 * sidecar's frame (message tuples: id, stream, value, key, headers, ...) with the values of
 * ``stream``'s messages replaced, in place, by their wire-format bytes; the indices returned
 * are those of its messages left to serde.py's per-record path.  A message whose first
 * header's name is in ``skip`` carries no app value (router.py) and is left as it is. */
static PyObject *encode_stream(PyObject *self, PyObject *args) {
    PyObject *messages, *stream, *program, *skip;
    Py_buffer prefix;
    int automatic;
    if (!PyArg_ParseTuple(args, "O!OO!y*pO!", &PyList_Type, &messages, &stream, &PyTuple_Type,
                          &program, &prefix, &automatic, &PyTuple_Type, &skip))
        return NULL;
    PyObject *undone = PyList_New(0);
    Out o = {NULL, 0, 0};
    if (!undone) goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(messages); i++) {
        PyObject *m = PyList_GET_ITEM(messages, i);
        if (!PyTuple_Check(m) || PyTuple_GET_SIZE(m) < 5) {
            PyErr_SetString(PyExc_TypeError, "a message is a tuple (id, stream, value, key, "
                            "headers, ...)");
            goto fail;
        }
        PyObject *name = PyTuple_GET_ITEM(m, 1);
        if (name != stream) {
            int eq = PyObject_RichCompareBool(name, stream, Py_EQ);
            if (eq < 0) goto fail;
            if (!eq) continue;
        }
        PyObject *headers = PyTuple_GET_ITEM(m, 4);
        if (headers != Py_None && PySequence_Check(headers) && PySequence_Size(headers) > 0) {
            PyObject *h = PySequence_GetItem(headers, 0);
            if (!h) goto fail;
            PyObject *hname = PySequence_Check(h) ? PySequence_GetItem(h, 0) : NULL;
            Py_DECREF(h);
            if (!hname) { PyErr_Clear(); continue; }
            int in_skip = PySequence_Contains(skip, hname);
            Py_DECREF(hname);
            if (in_skip < 0) goto fail;
            if (in_skip) continue;
        }
        PyObject *done = encode_one(program, &prefix, automatic, PyTuple_GET_ITEM(m, 2), &o);
        if (!done) goto fail;
        if (done == Py_None) {
            Py_DECREF(done);
            PyObject *index = PyLong_FromSsize_t(i);
            if (!index || PyList_Append(undone, index) < 0) { Py_XDECREF(index); goto fail; }
            Py_DECREF(index);
            continue;
        }
        Py_ssize_t size = PyTuple_GET_SIZE(m);
        PyObject *copy = PyTuple_New(size);
        if (!copy) { Py_DECREF(done); goto fail; }
        for (Py_ssize_t k = 0; k < size; k++)
            PyTuple_SET_ITEM(copy, k, k == 2 ? done : Py_NewRef(PyTuple_GET_ITEM(m, k)));
        PyList_SetItem(messages, i, copy);  /* (steals copy, drops m) */
    }
    PyMem_Free(o.data);
    PyBuffer_Release(&prefix);
    return undone;
fail:
    PyMem_Free(o.data);
    PyBuffer_Release(&prefix);
    Py_XDECREF(undone);
    return NULL;
}

/* -- reading back: Avro's binary encoding to msgpack (what msgpack.packb(value,
 * use_bin_type=True) writes for the dict fastavro's reader makes), for subscribers -------- */

static int read_long(In *in, int64_t *v) {
    uint64_t z = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (!need(in, 1)) return 0;
        unsigned char b = *in->p++;
        z |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
            return 1;
        }
    }
    return 0;
}

static int out_be(Out *o, unsigned char tag, uint64_t v, int n) {
    if (out_reserve(o, 1 + n) < 0) return -1;
    o->data[o->len++] = tag;
    for (int i = n - 1; i >= 0; i--) o->data[o->len++] = (unsigned char)(v >> (8 * i));
    return 0;
}

static int pack_int(Out *o, int64_t v) {  /* msgpack-python's choice of the smallest form */
    if (v >= 0) {
        if (v < 128) { unsigned char c = (unsigned char)v; return out_bytes(o, &c, 1); }
        if (v <= 0xff) return out_be(o, 0xcc, v, 1);
        if (v <= 0xffff) return out_be(o, 0xcd, v, 2);
        if (v <= 0xffffffffLL) return out_be(o, 0xce, v, 4);
        return out_be(o, 0xcf, (uint64_t)v, 8);
    }
    if (v >= -32) { unsigned char c = (unsigned char)(int8_t)v; return out_bytes(o, &c, 1); }
    if (v >= -128) return out_be(o, 0xd0, (uint8_t)(int8_t)v, 1);
    if (v >= -32768) return out_be(o, 0xd1, (uint16_t)(int16_t)v, 2);
    if (v >= INT32_MIN) return out_be(o, 0xd2, (uint32_t)(int32_t)v, 4);
    return out_be(o, 0xd3, (uint64_t)v, 8);
}

static int pack_raw(Out *o, int is_str, const void *p, Py_ssize_t n) {
    int r;
    if (is_str && n < 32) { unsigned char c = 0xa0 | (unsigned char)n; r = out_bytes(o, &c, 1); }
    else if (n <= 0xff) r = out_be(o, is_str ? 0xd9 : 0xc4, n, 1);
    else if (n <= 0xffff) r = out_be(o, is_str ? 0xda : 0xc5, n, 2);
    else if ((uint64_t)n <= 0xffffffffULL) r = out_be(o, is_str ? 0xdb : 0xc6, n, 4);
    else return 0;
    if (r < 0 || out_bytes(o, p, n) < 0) return -1;
    return 1;
}

static int pack_container(Out *o, int map, Py_ssize_t n) {
    if (n < 16) { unsigned char c = (map ? 0x80 : 0x90) | (unsigned char)n; return out_bytes(o, &c, 1); }
    if (n <= 0xffff) return out_be(o, map ? 0xde : 0xdc, n, 2);
    return out_be(o, map ? 0xdf : 0xdd, n, 4);
}

static int pack_double(Out *o, double d) {
    uint64_t b;
    memcpy(&b, &d, 8);
    return out_be(o, 0xcb, b, 8);
}

static int read_value(In *in, PyObject *node, Out *o, int depth);

/* Avro's blocks (a count, negative when a byte size follows), into one msgpack array or map:
 * the items go to a scratch buffer first, since msgpack wants the total count in front. */
static int read_blocks(In *in, PyObject *node, Out *o, int depth, int map) {
    Out items = {NULL, 0, 0};
    Py_ssize_t total = 0;
    int r = 0;  /* what goes back: 0 (not read here) unless the end is reached */
    PyObject *inner = PyTuple_GET_ITEM(node, 1);
    for (;;) {
        int64_t count, size, klen;
        if (!read_long(in, &count)) { r = 0; goto done; }
        if (count == 0) break;
        if (count < 0) {
            if (!read_long(in, &size) || count == INT64_MIN) { r = 0; goto done; }
            count = -count;
        }
        for (int64_t i = 0; i < count; i++) {
            if (map) {
                if (!read_long(in, &klen) || klen < 0 || !need(in, klen) ||
                    !valid_utf8(in->p, klen)) { r = 0; goto done; }
                if ((r = pack_raw(&items, 1, in->p, klen)) != 1) goto done;
                in->p += klen;
            }
            if ((r = read_value(in, inner, &items, depth + 1)) != 1) goto done;
            total++;
        }
    }
    r = (pack_container(o, map, total) < 0 ||
         (items.len && out_bytes(o, items.data, items.len) < 0)) ? -1 : 1;
done:
    PyMem_Free(items.data);
    return r;
}

static int read_value(In *in, PyObject *node, Out *o, int depth) {
    if (depth > MAX_DEPTH) return 0;
    long kind = node_kind(node);
    int64_t n;
    switch (kind) {
    case K_NULL: { unsigned char c = 0xc0; return out_bytes(o, &c, 1) < 0 ? -1 : 1; }
    case K_BOOLEAN: {
        if (!need(in, 1) || *in->p > 1) return 0;
        unsigned char c = *in->p++ ? 0xc3 : 0xc2;
        return out_bytes(o, &c, 1) < 0 ? -1 : 1;
    }
    case K_INT:
    case K_LONG:
        if (!read_long(in, &n)) return 0;
        if (kind == K_INT && (n < INT32_MIN || n > INT32_MAX)) return 0;
        return pack_int(o, n) < 0 ? -1 : 1;
    case K_FLOAT: {
        if (!need(in, 4)) return 0;
        uint32_t b = (uint32_t)in->p[0] | (uint32_t)in->p[1] << 8 | (uint32_t)in->p[2] << 16 |
                     (uint32_t)in->p[3] << 24;
        in->p += 4;
        float f;
        memcpy(&f, &b, 4);
        return pack_double(o, (double)f) < 0 ? -1 : 1;
    }
    case K_DOUBLE: {
        if (!need(in, 8)) return 0;
        uint64_t b = 0;
        for (int i = 7; i >= 0; i--) b = (b << 8) | in->p[i];
        in->p += 8;
        double d;
        memcpy(&d, &b, 8);
        return pack_double(o, d) < 0 ? -1 : 1;
    }
    case K_STRING:
    case K_BYTES:
        if (!read_long(in, &n) || n < 0 || !need(in, n)) return 0;
        if (kind == K_STRING && !valid_utf8(in->p, n)) return 0;
        {
            int r = pack_raw(o, kind == K_STRING, in->p, n);
            in->p += n;
            return r;
        }
    case K_RECORD: {
        PyObject *names = PyTuple_GET_ITEM(node, 1), *types = PyTuple_GET_ITEM(node, 2);
        Py_ssize_t nfields = PyTuple_GET_SIZE(names);
        if (pack_container(o, 1, nfields) < 0) return -1;
        for (Py_ssize_t f = 0; f < nfields; f++) {
            PyObject *name = PyTuple_GET_ITEM(names, f);
            int r = pack_raw(o, 1, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name));
            if (r != 1) return r;
            r = read_value(in, PyTuple_GET_ITEM(types, f), o, depth + 1);
            if (r != 1) return r;
        }
        return 1;
    }
    case K_ENUM: {
        PyObject *symbols = PyTuple_GET_ITEM(node, 1);
        if (!read_long(in, &n) || n < 0 || n >= PyTuple_GET_SIZE(symbols)) return 0;
        PyObject *s = PyTuple_GET_ITEM(symbols, n);
        return pack_raw(o, 1, PyBytes_AS_STRING(s), PyBytes_GET_SIZE(s));
    }
    case K_ARRAY:
        return read_blocks(in, node, o, depth, 0);
    case K_MAP:
        return read_blocks(in, node, o, depth, 1);
    case K_FIXED: {
        Py_ssize_t size = PyLong_AsSsize_t(PyTuple_GET_ITEM(node, 1));
        if (!need(in, size)) return 0;
        int r = pack_raw(o, 0, in->p, size);
        in->p += size;
        return r;
    }
    case K_UNION: {
        PyObject *branches = PyTuple_GET_ITEM(node, 1);
        if (!read_long(in, &n) || n < 0 || n >= PyTuple_GET_SIZE(branches)) return 0;
        return read_value(in, PyTuple_GET_ITEM(branches, n), o, depth + 1);
    }
    }
    return 0;
}

/* decode_msgpack(program, data) -> the Avro body ``data`` (no wire-format header) as msgpack
 * bytes, or None where serde.py must decode it (damaged, or what this does not read). */
static PyObject *decode_msgpack(PyObject *self, PyObject *args) {
    PyObject *program;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "O!y*", &PyTuple_Type, &program, &data)) return NULL;
    In in = {data.buf, (const unsigned char *)data.buf + data.len};
    Out o = {NULL, 0, 0};
    int r = read_value(&in, program, &o, 0);
    PyObject *result;
    if (r < 0) result = PyErr_Occurred() ? NULL : PyErr_NoMemory();
    else if (r == 1 && in.p == in.end) result = PyBytes_FromStringAndSize((const char *)o.data, o.len);
    else result = Py_NewRef(Py_None);
    PyMem_Free(o.data);
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_many", encode_many, METH_VARARGS,
     "encode_many(program, prefix, values, auto) -> list of wire-format bytes or None"},
    {"decode_msgpack", decode_msgpack, METH_VARARGS,
     "decode_msgpack(program, avro_body) -> msgpack bytes or None"},
    {"encode_stream", encode_stream, METH_VARARGS,
     "encode_stream(messages, stream, program, prefix, auto, skip) -> indices left undone"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "databus.schemas._avro_speedups", NULL, -1, methods};

PyMODINIT_FUNC PyInit__avro_speedups(void) { return PyModule_Create(&module); }
