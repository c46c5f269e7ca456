/* databus.protocol._speedups: the per-record kernels of the record format, in C.
 *
 * Each function here has a pure-Python twin that stays the reference (records.py,
 * varint.py, client/partitioners.py); tests/protocol/test_speedups.py checks with
 * hypothesis that both give byte-identical encodings, equal decoded objects and the same
 * error type and message on malformed input.  So the decoder below follows the Python
 * decoder's control flow step by step (the same reads in the same order), which is what
 * makes its errors the same: a read past the end raises IndexError (records.py turns it
 * into CorruptRecordError "a record runs past the end of the batch"), a bad varint
 * VarintError, a bad field CorruptRecordError with the Python message.
 *
 * Every read is bounds-checked against the buffer's length: the input is a Fetch
 * response from the network.  Positions are kept in 128-bit integers because a declared
 * length may be as large as a 64-bit varint allows and the Python code adds it to a
 * position before it fails (the failure message shows the sum).
 *
 * Where the encoder meets an input it does not handle (a timestamp outside int64, a key
 * that is not bytes, headers that are not (str, bytes|None) pairs...), it stops and says
 * so, and records.py carries on from that record in Python: rare inputs keep exactly the
 * Python behaviour without a second copy of its rules here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* PyMemberDef's T_OBJECT_EX: BatchBuilder's slots (append_record) */
#include <stdint.h>
#include <string.h>

typedef __int128 i128;

static PyObject *RecordType;      /* records.Record */
static PyObject *CorruptError;    /* records.CorruptRecordError */
static PyObject *VarintErrorType; /* varint.VarintError */

#define MAX_VARLONG_BYTES 10

/* ---- helpers -------------------------------------------------------------------------- */

static PyObject *
i128_to_py(i128 v)
{
    if (v >= INT64_MIN && v <= INT64_MAX)
        return PyLong_FromLongLong((long long)v);
    /* only in error messages and offsets past int64: (hi << 64) + lo */
    PyObject *hi = PyLong_FromLongLong((long long)(v >> 64));
    PyObject *lo = PyLong_FromUnsignedLongLong((unsigned long long)(uint64_t)v);
    PyObject *sixty_four = PyLong_FromLong(64);
    PyObject *out = NULL, *shifted = NULL;
    if (hi && lo && sixty_four) {
        shifted = PyNumber_Lshift(hi, sixty_four);
        if (shifted)
            out = PyNumber_Add(shifted, lo);
    }
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(sixty_four);
    Py_XDECREF(shifted);
    return out;
}

static int
index_error(void)
{
    PyErr_SetString(PyExc_IndexError, "index out of range");
    return -1;
}

/* A CorruptRecordError "batch at byte N: <detail>"; the detail is a PyUnicode_FromFormat. */
static int
corrupt(Py_ssize_t batch_pos, const char *format, ...)
{
    va_list vargs;
    va_start(vargs, format);
    PyObject *detail = PyUnicode_FromFormatV(format, vargs);
    va_end(vargs);
    if (detail == NULL)
        return -1;
    PyErr_Format(CorruptError, "batch at byte %zd: %U", batch_pos, detail);
    Py_DECREF(detail);
    return -1;
}

/* varint.decode_zigzag: value and new position; VarintError as the Python one words it. */
static int
decode_zigzag_slow(const uint8_t *buf, i128 end, i128 *pos, int64_t *out)
{
    i128 start = *pos, p = *pos;
    if (p >= end || p < 0) {
        PyObject *where = i128_to_py(p);
        if (where) {
            PyErr_Format(VarintErrorType, "varint at byte %S runs past the end of the buffer",
                         where);
            Py_DECREF(where);
        }
        return -1;
    }
    uint8_t b = buf[p];
    if (b < 0x80) {
        *out = (int64_t)((b >> 1) ^ -(int64_t)(b & 1));
        *pos = p + 1;
        return 0;
    }
    /* 128 bits hold the 10 groups of 7 bits before the 64-bit check */
    unsigned __int128 u = b & 0x7F;
    int shift = 7;
    p += 1;
    for (;;) {
        if (p >= end) {
            PyErr_Format(VarintErrorType, "varint at byte %lld runs past the end of the buffer",
                         (long long)start);
            return -1;
        }
        b = buf[p];
        p += 1;
        u |= (unsigned __int128)(b & 0x7F) << shift;
        if (b < 0x80)
            break;
        shift += 7;
        if (shift >= 7 * MAX_VARLONG_BYTES) {
            PyErr_Format(VarintErrorType, "varint at byte %lld is longer than %d bytes",
                         (long long)start, MAX_VARLONG_BYTES);
            return -1;
        }
    }
    if (u >> 64) {
        PyErr_Format(VarintErrorType, "varint at byte %lld exceeds 64 bits", (long long)start);
        return -1;
    }
    uint64_t v = (uint64_t)u;
    *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
    *pos = p;
    return 0;
}

/* The decoder's inlined varint read: one byte, two bytes, else decode_zigzag.  Reading
 * the first or second byte past the end is the Python code's IndexError. */
static inline int
read_varint(const uint8_t *buf, i128 end, i128 *pos, int64_t *out)
{
    i128 p = *pos;
    if (p >= end)
        return index_error();
    uint8_t b = buf[p];
    if (b < 0x80) {
        *out = (int64_t)((b >> 1) ^ -(int64_t)(b & 1));
        *pos = p + 1;
        return 0;
    }
    if (p + 1 >= end)
        return index_error();
    uint8_t b2 = buf[p + 1];
    if (b2 < 0x80) {
        uint32_t u = ((uint32_t)b2 << 7) | (b & 0x7F);
        *out = (int64_t)((u >> 1) ^ -(int64_t)(u & 1));
        *pos = p + 2;
        return 0;
    }
    return decode_zigzag_slow(buf, end, pos, out);
}

static inline size_t
zigzag_size(int64_t n)
{
    uint64_t u = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    size_t size = 1;
    while (u > 0x7F) {
        u >>= 7;
        size++;
    }
    return size;
}

static inline uint8_t *
write_zigzag(uint8_t *out, int64_t n)
{
    uint64_t u = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    while (u > 0x7F) {
        *out++ = (uint8_t)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *out++ = (uint8_t)u;
    return out;
}

/* ---- decode --------------------------------------------------------------------------- */

/* records._decode_headers: the headers tuple, or NULL with the Python error set. */
static PyObject *
decode_headers(const uint8_t *buf, i128 end, i128 *pos, Py_ssize_t batch_pos, Py_ssize_t index)
{
    int64_t count, n;
    if (decode_zigzag_slow(buf, end, pos, &count) < 0)
        return NULL;
    if (count < 0) {
        corrupt(batch_pos, "record %zd has header count %lld", index, (long long)count);
        return NULL;
    }
    PyObject *list = PyList_New(0);
    if (list == NULL)
        return NULL;
    for (int64_t i = 0; i < count; i++) {
        if (decode_zigzag_slow(buf, end, pos, &n) < 0)
            goto fail;
        if (n < 0) {
            corrupt(batch_pos, "record %zd has a header key of length %lld", index, (long long)n);
            goto fail;
        }
        if (*pos + n > end) {
            corrupt(batch_pos, "record %zd has a header key past the batch end", index);
            goto fail;
        }
        PyObject *name = PyUnicode_DecodeUTF8((const char *)buf + *pos, (Py_ssize_t)n, "strict");
        if (name == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                corrupt(batch_pos, "record %zd has a header key that is not UTF-8", index);
            }
            goto fail;
        }
        *pos += n;
        PyObject *hvalue;
        if (decode_zigzag_slow(buf, end, pos, &n) < 0) {
            Py_DECREF(name);
            goto fail;
        }
        if (n >= 0) {
            i128 stop = *pos + n > end ? end : *pos + n;
            i128 from = *pos > end ? end : *pos;
            hvalue = PyBytes_FromStringAndSize((const char *)buf + from, (Py_ssize_t)(stop - from));
            *pos += n;
        } else if (n == -1) {
            hvalue = Py_NewRef(Py_None);
        } else {
            Py_DECREF(name);
            corrupt(batch_pos, "record %zd has a header value of length %lld", index, (long long)n);
            goto fail;
        }
        if (hvalue == NULL) {
            Py_DECREF(name);
            goto fail;
        }
        PyObject *pair = PyTuple_Pack(2, name, hvalue);
        Py_DECREF(name);
        Py_DECREF(hvalue);
        if (pair == NULL || PyList_Append(list, pair) < 0) {
            Py_XDECREF(pair);
            goto fail;
        }
        PyObject_GC_UnTrack(pair); /* str and bytes: no cycle possible (see emit) */
        Py_DECREF(pair);
    }
    PyObject *out = PyList_AsTuple(list);
    Py_DECREF(list);
    if (out != NULL)
        PyObject_GC_UnTrack(out);
    return out;
fail:
    Py_DECREF(list);
    return NULL;
}

/* What to build from each record. */
enum { OUT_RECORDS, OUT_CONSUMER, OUT_COLUMNS };

typedef struct {
    int mode;
    PyObject *list;      /* OUT_RECORDS, OUT_CONSUMER: the list appended to */
    PyObject *cls;       /* OUT_CONSUMER: the tuple subclass */
    PyObject *topic;     /* OUT_CONSUMER */
    PyObject *partition; /* OUT_CONSUMER */
    PyObject *ts_type;   /* OUT_CONSUMER */
    PyObject *columns[5];/* OUT_COLUMNS: offsets, timestamps, keys, values, headers */
    i128 lo, hi;         /* OUT_CONSUMER, OUT_COLUMNS: keep lo <= offset < hi */
    int atomic_prefix;   /* topic, partition and ts_type are str/int: the tuple may be untracked */
} Sink;

static PyObject *
new_tuple_of(PyObject *cls, Py_ssize_t n)
{
    /* tuple.__new__(cls, ...) for a NamedTuple class: a tuple of that type (no __init__) */
    PyTypeObject *type = (PyTypeObject *)cls;
    if (type == &PyTuple_Type)
        return PyTuple_New(n);
    return type->tp_alloc(type, n);
}

/* Steals the five references. */
static int
emit(Sink *sink, i128 offset, PyObject *ts, PyObject *key, PyObject *value, PyObject *headers)
{
    PyObject *off = NULL, *item = NULL;
    int rc = -1;
    if (sink->mode != OUT_RECORDS && (offset < sink->lo || offset >= sink->hi)) {
        rc = 0;
        goto done;
    }
    off = i128_to_py(offset);
    if (off == NULL)
        goto done;
    if (sink->mode == OUT_COLUMNS) {
        PyObject *fields[5] = {off, ts, key, value, headers};
        for (int i = 0; i < 5; i++)
            if (PyList_Append(sink->columns[i], fields[i]) < 0)
                goto done;
        rc = 0;
        goto done;
    }
    if (sink->mode == OUT_RECORDS) {
        item = new_tuple_of(RecordType, 5);
        if (item == NULL)
            goto done;
        PyObject *fields[5] = {off, ts, key, value, headers};
        for (int i = 0; i < 5; i++)
            PyTuple_SET_ITEM(item, i, fields[i]);
    } else {
        item = new_tuple_of(sink->cls, 8);
        if (item == NULL)
            goto done;
        PyObject *fields[8] = {Py_NewRef(sink->topic), Py_NewRef(sink->partition), off, ts,
                               Py_NewRef(sink->ts_type), key, value, headers};
        for (int i = 0; i < 8; i++)
            PyTuple_SET_ITEM(item, i, fields[i]);
    }
    /* The tuple holds only ints, bytes, None, str and untracked header tuples, so it can
     * be in no reference cycle: untracked now, the cyclic GC never walks it (CPython
     * untracks such tuples itself, but only once a collection has walked them; a Fetch
     * of 100k records would otherwise trigger over a hundred collections walking them all). */
    if (sink->atomic_prefix)
        PyObject_GC_UnTrack(item);
    /* the tuple owns them now */
    off = ts = key = value = headers = NULL;
    rc = PyList_Append(sink->list, item);
done:
    Py_XDECREF(off);
    Py_XDECREF(ts);
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(headers);
    Py_XDECREF(item);
    return rc;
}

static PyObject *
slice_bytes(const uint8_t *buf, i128 end, i128 pos, int64_t n)
{
    i128 from = pos > end ? end : pos;
    i128 stop = pos + n > end ? end : pos + n;
    return PyBytes_FromStringAndSize((const char *)buf + from, (Py_ssize_t)(stop - from));
}

/* records._decode_payload's loop, step for step. */
static int
decode_payload(const uint8_t *buf, Py_ssize_t size, long long base_offset, long long base_ts,
               PyObject *log_append_ts, long long count, Py_ssize_t batch_pos, Sink *sink)
{
    i128 end = size, pos = 0;
    int64_t length, tsd, od, n;
    if (log_append_ts != Py_None && !PyLong_CheckExact(log_append_ts)) {
        PyErr_SetString(PyExc_TypeError, "log_append_ts must be an int or None");
        return -1;
    }
    for (long long index = 0; index < count; index++) {
        if (read_varint(buf, end, &pos, &length) < 0)
            return -1;
        i128 record_end = pos + length;
        if (length < 6 || record_end > end)
            return corrupt(batch_pos, "record %lld has invalid length %lld", index,
                           (long long)length);
        pos += 1; /* attributes: unused */
        if (read_varint(buf, end, &pos, &tsd) < 0 || read_varint(buf, end, &pos, &od) < 0)
            return -1;
        PyObject *key, *value, *headers;
        if (pos >= end)
            return index_error();
        if (buf[pos] == 1) {
            key = Py_NewRef(Py_None);
            pos += 1;
        } else {
            if (read_varint(buf, end, &pos, &n) < 0)
                return -1;
            if (n < 0)
                return corrupt(batch_pos, "record %lld has key length %lld", index, (long long)n);
            key = slice_bytes(buf, end, pos, n);
            if (key == NULL)
                return -1;
            pos += n;
        }
        if (pos >= end) {
            Py_DECREF(key);
            return index_error();
        }
        if (buf[pos] == 1) {
            value = Py_NewRef(Py_None);
            pos += 1;
        } else {
            if (read_varint(buf, end, &pos, &n) < 0) {
                Py_DECREF(key);
                return -1;
            }
            if (n < 0) {
                Py_DECREF(key);
                return corrupt(batch_pos, "record %lld has value length %lld", index,
                               (long long)n);
            }
            value = slice_bytes(buf, end, pos, n);
            if (value == NULL) {
                Py_DECREF(key);
                return -1;
            }
            pos += n;
        }
        if (pos >= end) {
            Py_DECREF(key);
            Py_DECREF(value);
            return index_error();
        }
        if (buf[pos] == 0) {
            headers = PyTuple_New(0);
            pos += 1;
        } else {
            headers = decode_headers(buf, end, &pos, batch_pos, (Py_ssize_t)index);
        }
        if (headers == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            return -1;
        }
        if (pos != record_end) {
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            PyObject *took = i128_to_py((i128)length + pos - record_end);
            if (took == NULL)
                return -1;
            corrupt(batch_pos, "record %lld declares %lld bytes but its fields take %S", index,
                    (long long)length, took);
            Py_DECREF(took);
            return -1;
        }
        PyObject *ts = log_append_ts == Py_None ? i128_to_py((i128)base_ts + tsd)
                                                : Py_NewRef(log_append_ts);
        if (ts == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            return -1;
        }
        if (emit(sink, (i128)base_offset + od, ts, key, value, headers) < 0)
            return -1;
    }
    if (pos != end)
        return corrupt(batch_pos, "%lld bytes left after its %lld records", (long long)(end - pos),
                       count);
    return 0;
}

static int
check_configured(void)
{
    if (RecordType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "databus.protocol._speedups.configure() not called");
        return -1;
    }
    return 0;
}

static int
parse_i128(PyObject *obj, i128 *out)
{
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (!overflow) {
        *out = v;
        return 0;
    }
    /* Offsets reach +-2**64 (two int64s added): bounds up to that range are exact, beyond
     * it any value compares the same as +-2**100. */
    PyObject *magnitude = overflow > 0 ? Py_NewRef(obj) : PyNumber_Negative(obj);
    if (magnitude == NULL)
        return -1;
    unsigned long long u = PyLong_AsUnsignedLongLong(magnitude);
    Py_DECREF(magnitude);
    i128 value;
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        value = (i128)1 << 100;
    } else {
        value = (i128)u;
    }
    *out = overflow > 0 ? value : -value;
    return 0;
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(data, base_offset, base_ts, log_append_ts, count, batch_pos) -> list[Record]\n\n"
"records._decode_payload: the records section of one (decompressed) batch.");

static PyObject *
py_decode_records(PyObject *self, PyObject *args)
{
    Py_buffer data;
    long long base_offset, base_ts, count;
    PyObject *log_append_ts;
    Py_ssize_t batch_pos;
    if (check_configured() < 0)
        return NULL;
    if (!PyArg_ParseTuple(args, "y*LLOLn", &data, &base_offset, &base_ts, &log_append_ts, &count,
                          &batch_pos))
        return NULL;
    Sink sink = {.mode = OUT_RECORDS, .atomic_prefix = 1};
    sink.list = PyList_New(0);
    if (sink.list == NULL ||
        decode_payload(data.buf, data.len, base_offset, base_ts, log_append_ts, count, batch_pos,
                       &sink) < 0) {
        Py_XDECREF(sink.list);
        sink.list = NULL;
    }
    PyBuffer_Release(&data);
    return sink.list;
}

PyDoc_STRVAR(decode_consumer_doc,
"decode_consumer(data, base_offset, base_ts, log_append_ts, count, batch_pos, cls, topic,\n"
"                partition, ts_type, min_offset) -> list\n\n"
"The records at or after min_offset (all of them when it is None) as cls(topic,\n"
"partition, offset, timestamp, ts_type, key, value, headers) tuples: the consumer's\n"
"records without the Record step.");

static PyObject *
py_decode_consumer(PyObject *self, PyObject *args)
{
    Py_buffer data;
    long long base_offset, base_ts, count;
    PyObject *log_append_ts, *min_offset;
    Py_ssize_t batch_pos;
    Sink sink = {.mode = OUT_CONSUMER};
    if (check_configured() < 0)
        return NULL;
    if (!PyArg_ParseTuple(args, "y*LLOLnO!OOOO", &data, &base_offset, &base_ts, &log_append_ts,
                          &count, &batch_pos, &PyType_Type, &sink.cls, &sink.topic,
                          &sink.partition, &sink.ts_type, &min_offset))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)sink.cls, &PyTuple_Type)) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_TypeError, "cls must be a tuple subclass");
        return NULL;
    }
    sink.hi = (i128)1 << 100;
    if (min_offset == Py_None) /* the whole batch, as the Python code takes it */
        sink.lo = -((i128)1 << 100);
    else if (parse_i128(min_offset, &sink.lo) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    sink.atomic_prefix = PyUnicode_CheckExact(sink.topic) && PyLong_CheckExact(sink.partition) &&
                         PyLong_CheckExact(sink.ts_type);
    sink.list = PyList_New(0);
    if (sink.list == NULL ||
        decode_payload(data.buf, data.len, base_offset, base_ts, log_append_ts, count, batch_pos,
                       &sink) < 0) {
        Py_XDECREF(sink.list);
        sink.list = NULL;
    }
    PyBuffer_Release(&data);
    return sink.list;
}

PyDoc_STRVAR(decode_columns_doc,
"decode_columns(data, base_offset, base_ts, log_append_ts, count, batch_pos, lo, hi,\n"
"               offsets, timestamps, keys, values, headers) -> None\n\n"
"Appends the fields of the records with lo <= offset < hi to the five lists.");

static PyObject *
py_decode_columns(PyObject *self, PyObject *args)
{
    Py_buffer data;
    long long base_offset, base_ts, count;
    PyObject *log_append_ts, *lo, *hi;
    Py_ssize_t batch_pos;
    Sink sink = {.mode = OUT_COLUMNS};
    if (check_configured() < 0)
        return NULL;
    if (!PyArg_ParseTuple(args, "y*LLOLnOOO!O!O!O!O!", &data, &base_offset, &base_ts,
                          &log_append_ts, &count, &batch_pos, &lo, &hi, &PyList_Type,
                          &sink.columns[0], &PyList_Type, &sink.columns[1], &PyList_Type,
                          &sink.columns[2], &PyList_Type, &sink.columns[3], &PyList_Type,
                          &sink.columns[4]))
        return NULL;
    int rc = parse_i128(lo, &sink.lo);
    if (rc == 0)
        rc = parse_i128(hi, &sink.hi);
    if (rc == 0)
        rc = decode_payload(data.buf, data.len, base_offset, base_ts, log_append_ts, count,
                            batch_pos, &sink);
    PyBuffer_Release(&data);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- decode into column buffers ------------------------------------------------------- */

/* The column buffers of columns.ColumnBuffers, in its order: bytearrays the decoder appends
 * to, no Python object per record.  Offsets arrays of the binary columns start with a 0. */
enum { B_OFFSET, B_TIMESTAMP, B_KEY_OFFSETS, B_KEY_DATA, B_KEY_VALID, B_VALUE_OFFSETS,
       B_VALUE_DATA, B_VALUE_VALID, B_HEADER_OFFSETS, B_HKEY_OFFSETS, B_HKEY_DATA,
       B_HVALUE_OFFSETS, B_HVALUE_DATA, B_HVALUE_VALID, B_COUNT };

static int
ba_append(PyObject *ba, const void *src, Py_ssize_t n)
{
    Py_ssize_t size = PyByteArray_GET_SIZE(ba);
    if (PyByteArray_Resize(ba, size + n) < 0)
        return -1;
    if (n)
        memcpy(PyByteArray_AS_STRING(ba) + size, src, (size_t)n);
    return 0;
}

/* Append the next end offset of a binary column: its data's length, as int32. */
static int
ba_append_end(PyObject *offsets, PyObject *data)
{
    Py_ssize_t len = PyByteArray_GET_SIZE(data);
    if (len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a column's data passed 2 GiB");
        return -1;
    }
    int32_t end = (int32_t)len;
    return ba_append(offsets, &end, 4);
}

/* Validity bit ``index`` of an Arrow bitmap (LSB first), growing it a byte at a time. */
static int
bitmap_append(PyObject *bitmap, Py_ssize_t index, int valid)
{
    if ((index & 7) == 0) {
        uint8_t zero = 0;
        if (ba_append(bitmap, &zero, 1) < 0)
            return -1;
    }
    if (valid)
        PyByteArray_AS_STRING(bitmap)[index >> 3] |= (char)(1 << (index & 7));
    return 0;
}

/* Strict UTF-8, as bytes.decode("utf-8"): no overlong forms, surrogates or > U+10FFFF. */
static int
valid_utf8(const uint8_t *s, int64_t n)
{
    int64_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int more;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            more = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + more >= n)
            return 0;
        for (int k = 1; k <= more; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((more == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (more == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += more + 1;
    }
    return 1;
}

/* One binary field (key or value) at *pos: null (-1) or bytes, clamped at the payload's end
 * as records._decode_payload's slice is. */
static int
append_binary(const uint8_t *buf, i128 end, i128 *pos, PyObject *offsets, PyObject *data,
              PyObject *valid, Py_ssize_t row, Py_ssize_t batch_pos, long long index,
              const char *what)
{
    int64_t n;
    if (*pos >= end)
        return index_error();
    if (buf[*pos] == 1) {
        *pos += 1;
        if (bitmap_append(valid, row, 0) < 0)
            return -1;
    } else {
        if (read_varint(buf, end, pos, &n) < 0)
            return -1;
        if (n < 0)
            return corrupt(batch_pos, "record %lld has %s length %lld", index, what, (long long)n);
        i128 from = *pos > end ? end : *pos;
        i128 stop = *pos + n > end ? end : *pos + n;
        if (ba_append(data, buf + from, (Py_ssize_t)(stop - from)) < 0 ||
            bitmap_append(valid, row, 1) < 0)
            return -1;
        *pos += n;
    }
    return ba_append_end(offsets, data);
}

/* Back to the sizes in ``saved``, the validity bits of rows >= ``row`` and header values >=
 * ``entry`` cleared (a bitmap's last byte is shared with the rows kept). */
static int
rollback(PyObject **b, const Py_ssize_t *saved, Py_ssize_t row, Py_ssize_t entry)
{
    for (int i = 0; i < B_COUNT; i++)
        if (PyByteArray_Resize(b[i], saved[i]) < 0)
            return -1;
    const int bitmaps[3] = {B_KEY_VALID, B_VALUE_VALID, B_HVALUE_VALID};
    for (int k = 0; k < 3; k++) {
        Py_ssize_t bit = bitmaps[k] == B_HVALUE_VALID ? entry : row;
        if ((bit & 7) && (bit >> 3) < saved[bitmaps[k]])
            PyByteArray_AS_STRING(b[bitmaps[k]])[bit >> 3] &= (char)((1 << (bit & 7)) - 1);
    }
    return 0;
}

PyDoc_STRVAR(decode_buffers_doc,
"decode_buffers(data, base_offset, base_ts, log_append_ts, count, batch_pos, lo, hi, buffers)\n"
"    -> int\n\n"
"Appends the records with lo <= offset < hi to the 14 column bytearrays of\n"
"columns.ColumnBuffers (no Python object per record); how many it appended.  The same\n"
"checks and errors as decode_records (every record is checked, wanted or not); after an\n"
"error the buffers hold a partial record (the caller restores them).");

static PyObject *
py_decode_buffers(PyObject *self, PyObject *args)
{
    Py_buffer data;
    long long base_offset, base_ts, count;
    PyObject *log_append_ts, *lo_obj, *hi_obj, *list;
    Py_ssize_t batch_pos;
    PyObject *b[B_COUNT];
    if (check_configured() < 0)
        return NULL;
    if (!PyArg_ParseTuple(args, "y*LLOLnOOO!", &data, &base_offset, &base_ts, &log_append_ts,
                          &count, &batch_pos, &lo_obj, &hi_obj, &PyList_Type, &list))
        return NULL;
    i128 lo, hi;
    long long appended = 0;
    int rc = -1;
    if (parse_i128(lo_obj, &lo) < 0 || parse_i128(hi_obj, &hi) < 0)
        goto done;
    if (PyList_GET_SIZE(list) != B_COUNT) {
        PyErr_SetString(PyExc_TypeError, "buffers must be a list of 14 bytearrays");
        goto done;
    }
    for (int i = 0; i < B_COUNT; i++) {
        b[i] = PyList_GET_ITEM(list, i);
        if (!PyByteArray_CheckExact(b[i])) {
            PyErr_SetString(PyExc_TypeError, "buffers must be a list of 14 bytearrays");
            goto done;
        }
    }
    if (log_append_ts != Py_None && !PyLong_CheckExact(log_append_ts)) {
        PyErr_SetString(PyExc_TypeError, "log_append_ts must be an int or None");
        goto done;
    }
    long long append_ts = 0;
    if (log_append_ts != Py_None) {
        append_ts = PyLong_AsLongLong(log_append_ts);
        if (append_ts == -1 && PyErr_Occurred())
            goto done;
    }
    const uint8_t *buf = data.buf;
    i128 end = data.len, pos = 0;
    int64_t length, tsd, od, n;
    for (long long index = 0; index < count; index++) {
        if (read_varint(buf, end, &pos, &length) < 0)
            goto done;
        i128 record_end = pos + length;
        if (length < 6 || record_end > end) {
            corrupt(batch_pos, "record %lld has invalid length %lld", index, (long long)length);
            goto done;
        }
        pos += 1; /* attributes: unused */
        if (read_varint(buf, end, &pos, &tsd) < 0 || read_varint(buf, end, &pos, &od) < 0)
            goto done;
        i128 offset = (i128)base_offset + od;
        /* A record out of [lo, hi) is decoded and checked all the same (the same errors as
         * decode_records), then taken back out of the buffers. */
        Py_ssize_t saved[B_COUNT];
        for (int i = 0; i < B_COUNT; i++)
            saved[i] = PyByteArray_GET_SIZE(b[i]);
        Py_ssize_t row = saved[B_OFFSET] / 8;
        if (append_binary(buf, end, &pos, b[B_KEY_OFFSETS], b[B_KEY_DATA], b[B_KEY_VALID], row,
                          batch_pos, index, "key") < 0 ||
            append_binary(buf, end, &pos, b[B_VALUE_OFFSETS], b[B_VALUE_DATA], b[B_VALUE_VALID],
                          row, batch_pos, index, "value") < 0)
            goto done;
        if (pos >= end) {
            index_error();
            goto done;
        }
        int64_t headers = 0;
        if (buf[pos] == 0) {
            pos += 1;
        } else {
            if (decode_zigzag_slow(buf, end, &pos, &headers) < 0)
                goto done;
            if (headers < 0) {
                corrupt(batch_pos, "record %lld has header count %lld", index, (long long)headers);
                goto done;
            }
        }
        for (int64_t i = 0; i < headers; i++) {
            if (decode_zigzag_slow(buf, end, &pos, &n) < 0)
                goto done;
            if (n < 0) {
                corrupt(batch_pos, "record %lld has a header key of length %lld", index,
                        (long long)n);
                goto done;
            }
            if (pos + n > end) {
                corrupt(batch_pos, "record %lld has a header key past the batch end", index);
                goto done;
            }
            if (!valid_utf8(buf + pos, n)) {
                corrupt(batch_pos, "record %lld has a header key that is not UTF-8", index);
                goto done;
            }
            if (ba_append(b[B_HKEY_DATA], buf + pos, (Py_ssize_t)n) < 0 ||
                ba_append_end(b[B_HKEY_OFFSETS], b[B_HKEY_DATA]) < 0)
                goto done;
            pos += n;
            if (decode_zigzag_slow(buf, end, &pos, &n) < 0)
                goto done;
            Py_ssize_t entry = PyByteArray_GET_SIZE(b[B_HVALUE_OFFSETS]) / 4 - 1;
            if (n >= 0) {
                i128 from = pos > end ? end : pos;
                i128 stop = pos + n > end ? end : pos + n;
                if (ba_append(b[B_HVALUE_DATA], buf + from, (Py_ssize_t)(stop - from)) < 0 ||
                    bitmap_append(b[B_HVALUE_VALID], entry, 1) < 0)
                    goto done;
                pos += n;
            } else if (n == -1) {
                if (bitmap_append(b[B_HVALUE_VALID], entry, 0) < 0)
                    goto done;
            } else {
                corrupt(batch_pos, "record %lld has a header value of length %lld", index,
                        (long long)n);
                goto done;
            }
            if (ba_append_end(b[B_HVALUE_OFFSETS], b[B_HVALUE_DATA]) < 0)
                goto done;
        }
        if (pos != record_end) {
            PyObject *took = i128_to_py((i128)length + pos - record_end);
            if (took != NULL) {
                corrupt(batch_pos, "record %lld declares %lld bytes but its fields take %S",
                        index, (long long)length, took);
                Py_DECREF(took);
            }
            goto done;
        }
        if (offset < lo || offset >= hi) {
            if (rollback(b, saved, row, saved[B_HVALUE_OFFSETS] / 4 - 1) < 0)
                goto done;
            continue;
        }
        if (offset > INT64_MAX || offset < INT64_MIN) {
            PyErr_SetString(PyExc_OverflowError, "offset does not fit 64 bits");
            goto done;
        }
        int64_t off64 = (int64_t)offset;
        i128 ts128 = log_append_ts == Py_None ? (i128)base_ts + tsd : (i128)append_ts;
        if (ts128 > INT64_MAX || ts128 < INT64_MIN) {
            PyErr_SetString(PyExc_OverflowError, "timestamp does not fit 64 bits");
            goto done;
        }
        int64_t ts64 = (int64_t)ts128;
        int32_t header_end = (int32_t)(PyByteArray_GET_SIZE(b[B_HKEY_OFFSETS]) / 4 - 1);
        if (ba_append(b[B_OFFSET], &off64, 8) < 0 || ba_append(b[B_TIMESTAMP], &ts64, 8) < 0 ||
            ba_append(b[B_HEADER_OFFSETS], &header_end, 4) < 0)
            goto done;
        appended++;
    }
    if (pos != end) {
        corrupt(batch_pos, "%lld bytes left after its %lld records", (long long)(end - pos),
                count);
        goto done;
    }
    rc = 0;
done:
    PyBuffer_Release(&data);
    if (rc < 0)
        return NULL;
    return PyLong_FromLongLong(appended);
}

/* ---- encode --------------------------------------------------------------------------- */

typedef struct {
    uint8_t *data;
    size_t len, cap;
} Buffer;

static int
buffer_reserve(Buffer *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    uint8_t *data = PyMem_Realloc(b->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

/* A payload the encoder takes as it is: None (-1) or exact bytes.  0 = not handled here. */
static inline int
payload(PyObject *obj, const char **data, Py_ssize_t *len)
{
    if (obj == Py_None) {
        *data = NULL;
        *len = -1;
        return 1;
    }
    if (PyBytes_CheckExact(obj)) {
        *data = PyBytes_AS_STRING(obj);
        *len = PyBytes_GET_SIZE(obj);
        return 1;
    }
    return 0;
}

#define MAX_HEADERS_ON_STACK 16

/* Size of the encoded headers (count included), or -1: not handled here (Python takes
 * the record), or -2 with an exception set. */
static Py_ssize_t
headers_size(PyObject *headers)
{
    if (!PyTuple_CheckExact(headers) && !PyList_CheckExact(headers))
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(headers);
    PyObject **items = PySequence_Fast_ITEMS(headers);
    Py_ssize_t size = zigzag_size(count);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = items[i];
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
            return -1;
        PyObject *name = PyTuple_GET_ITEM(pair, 0);
        if (!PyUnicode_CheckExact(name))
            return -1;
        Py_ssize_t name_len;
        if (PyUnicode_AsUTF8AndSize(name, &name_len) == NULL) {
            PyErr_Clear(); /* lone surrogates: Python raises its own UnicodeEncodeError */
            return -1;
        }
        const char *data;
        Py_ssize_t len;
        if (!payload(PyTuple_GET_ITEM(pair, 1), &data, &len))
            return -1;
        size += zigzag_size(name_len) + name_len + (len < 0 ? 1 : zigzag_size(len) + len);
    }
    return size;
}

static uint8_t *
write_headers(uint8_t *out, PyObject *headers)
{
    Py_ssize_t count = PySequence_Fast_GET_SIZE(headers);
    PyObject **items = PySequence_Fast_ITEMS(headers);
    out = write_zigzag(out, count);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = items[i];
        Py_ssize_t name_len, len;
        const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &name_len);
        const char *data;
        out = write_zigzag(out, name_len);
        memcpy(out, name, name_len);
        out += name_len;
        payload(PyTuple_GET_ITEM(pair, 1), &data, &len);
        out = write_zigzag(out, len);
        if (len > 0) {
            memcpy(out, data, len);
            out += len;
        }
    }
    return out;
}

/* One record's encoding, sized before it is written: every field but the length prefix. */
typedef struct {
    const char *key, *value;
    Py_ssize_t key_len, value_len; /* -1: null */
    PyObject *headers;             /* NULL: none */
    Py_ssize_t headers_size;
    long long tsd, od;
    Py_ssize_t body, record_size; /* body: after the length prefix; record: with it */
} RecordPlan;

/* Size the record (key, value: None or exact bytes; headers: None or a tuple/list of
 * (str, bytes | None) pairs, as Python's `if headers` reads them).  1: planned; 0: not
 * handled here (the Python loop takes the record). */
static inline int
plan_record(PyObject *key, PyObject *value, PyObject *headers, long long tsd, long long od,
            RecordPlan *p)
{
    if (!payload(key, &p->key, &p->key_len) || !payload(value, &p->value, &p->value_len))
        return 0;
    p->headers = NULL;
    p->headers_size = 1;
    if (headers != Py_None) {
        if (!PyTuple_CheckExact(headers) && !PyList_CheckExact(headers))
            return 0; /* its truth test is Python code */
        if (PySequence_Fast_GET_SIZE(headers) > 0) {
            p->headers_size = headers_size(headers);
            if (p->headers_size < 0)
                return 0;
            p->headers = headers;
        }
    }
    p->tsd = tsd;
    p->od = od;
    p->body = 1 + zigzag_size(tsd) + zigzag_size(od) +
              (p->key_len < 0 ? 1 : zigzag_size(p->key_len) + p->key_len) +
              (p->value_len < 0 ? 1 : zigzag_size(p->value_len) + p->value_len) +
              p->headers_size;
    p->record_size = zigzag_size(p->body) + p->body;
    return 1;
}

/* Write the planned record (record_size bytes) at out. */
static inline void
write_record(uint8_t *out, const RecordPlan *p)
{
    out = write_zigzag(out, p->body);
    *out++ = 0; /* attributes */
    out = write_zigzag(out, p->tsd);
    out = write_zigzag(out, p->od);
    out = write_zigzag(out, p->key_len);
    if (p->key_len > 0) {
        memcpy(out, p->key, p->key_len);
        out += p->key_len;
    }
    out = write_zigzag(out, p->value_len);
    if (p->value_len > 0) {
        memcpy(out, p->value, p->value_len);
        out += p->value_len;
    }
    if (p->headers != NULL)
        write_headers(out, p->headers);
    else
        *out = 0;
}

PyDoc_STRVAR(encode_records_doc,
"encode_records(records, start, batch_size, size, count, last_delta, base_ts, max_ts)\n"
"    -> (stop, size, count, last_delta, base_ts, max_ts, chunk, handled)\n\n"
"BatchBuilder.append_many's loop: encodes records[start:] ((timestamp, key, value, headers)\n"
"tuples) until one does not fit; chunk is the encoded bytes of the records appended.\n"
"handled is False when it stopped at a record it leaves to the Python loop.");

static PyObject *
py_encode_records(PyObject *self, PyObject *args)
{
    PyObject *records;
    Py_ssize_t start;
    long long batch_size, size, count, od, base_ts, max_ts;
    if (!PyArg_ParseTuple(args, "OnLLLLLL", &records, &start, &batch_size, &size, &count, &od,
                          &base_ts, &max_ts))
        return NULL;
    if (!PyTuple_CheckExact(records) && !PyList_CheckExact(records))
        return Py_BuildValue("nLLLLLOO", start, size, count, od, base_ts, max_ts, Py_None,
                             Py_False);
    Buffer buf = {NULL, 0, 0};
    Py_ssize_t end = PySequence_Fast_GET_SIZE(records), i = start;
    int handled = 1;
    while (i < end) {
        /* a list may change under us only through Python code, and none runs below */
        PyObject *rec = PySequence_Fast_GET_ITEM(records, i);
        if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != 4) {
            handled = 0;
            break;
        }
        PyObject *ts_obj = PyTuple_GET_ITEM(rec, 0);
        if (!PyLong_CheckExact(ts_obj)) {
            handled = 0;
            break;
        }
        int overflow;
        long long timestamp = PyLong_AsLongLongAndOverflow(ts_obj, &overflow);
        if (overflow) {
            handled = 0;
            break;
        }
        long long tsd = 0;
        if (count) {
            if (__builtin_sub_overflow(timestamp, base_ts, &tsd))
                break; /* no varlong for that delta: the record starts the next batch */
        }
        RecordPlan plan;
        if (!plan_record(PyTuple_GET_ITEM(rec, 1), PyTuple_GET_ITEM(rec, 2),
                         PyTuple_GET_ITEM(rec, 3), tsd, od + 1, &plan)) {
            handled = 0;
            break;
        }
        Py_ssize_t record_size = plan.record_size;
        if (count) {
            if (size + record_size > batch_size)
                break;
            if (timestamp > max_ts)
                max_ts = timestamp;
        } else {
            base_ts = max_ts = timestamp;
        }
        if (buffer_reserve(&buf, record_size) < 0)
            goto error;
        write_record(buf.data + buf.len, &plan);
        buf.len += record_size;
        od += 1;
        size += record_size;
        count += 1;
        i += 1;
    }
    PyObject *chunk = Py_None;
    if (i > start) {
        chunk = PyBytes_FromStringAndSize((const char *)buf.data, buf.len);
        if (chunk == NULL)
            goto error;
    } else {
        Py_INCREF(chunk);
    }
    PyMem_Free(buf.data);
    PyObject *result = Py_BuildValue("nLLLLLNO", i, size, count, od, base_ts, max_ts, chunk,
                                     handled ? Py_True : Py_False);
    return result;
error:
    PyMem_Free(buf.data);
    return NULL;
}

/* ---- mirror: column buffers re-encoded with one more header per record ------------------ */

/* Rows of a ColumnBuffers (decode_buffers' 14 bytearrays) as record fields, read in place. */
typedef struct {
    const uint8_t *d[B_COUNT];
    Py_ssize_t n[B_COUNT];
} Columns;

static int
columns_from(PyObject *list, Columns *c)
{
    if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) != B_COUNT) {
        PyErr_SetString(PyExc_TypeError, "buffers must be a list of 14 bytearrays");
        return -1;
    }
    for (int i = 0; i < B_COUNT; i++) {
        PyObject *b = PyList_GET_ITEM(list, i);
        if (!PyByteArray_CheckExact(b)) {
            PyErr_SetString(PyExc_TypeError, "buffers must be a list of 14 bytearrays");
            return -1;
        }
        c->d[i] = (const uint8_t *)PyByteArray_AS_STRING(b);
        c->n[i] = PyByteArray_GET_SIZE(b);
    }
    return 0;
}

static inline int32_t
col_i32(const Columns *c, int buf, Py_ssize_t index)
{
    int32_t v;
    memcpy(&v, c->d[buf] + index * 4, 4);
    return v;
}

static inline int64_t
col_i64(const Columns *c, int buf, Py_ssize_t index)
{
    int64_t v;
    memcpy(&v, c->d[buf] + index * 8, 8);
    return v;
}

static inline int
col_valid(const Columns *c, int buf, Py_ssize_t index)
{
    return (c->d[buf][index >> 3] >> (index & 7)) & 1;
}

/* Whether the rows' column buffers hold rows [row, stop) (a bad call, not bad data: the
 * buffers were filled by decode_buffers). */
static int
columns_check(const Columns *c, Py_ssize_t row, Py_ssize_t stop)
{
    if (row < 0 || stop < row || c->n[B_OFFSET] / 8 < stop || c->n[B_HEADER_OFFSETS] / 4 < stop + 1) {
        PyErr_SetString(PyExc_IndexError, "rows outside the column buffers");
        return -1;
    }
    return 0;
}

/* The row's binary field (key or value): length, or -1 for null. */
static inline Py_ssize_t
col_binary(const Columns *c, int offsets, int data, int valid, Py_ssize_t index,
           const uint8_t **out)
{
    if (!col_valid(c, valid, index))
        return -1;
    int32_t start = col_i32(c, offsets, index), end = col_i32(c, offsets, index + 1);
    *out = c->d[data] + start;
    return end - start;
}

/* The loop check: whether a header of the row is `key` with a value starting with `prefix`. */
static int
row_came_from(const Columns *c, Py_ssize_t row, const char *key, Py_ssize_t key_len,
              const char *prefix, Py_ssize_t prefix_len)
{
    int32_t first = col_i32(c, B_HEADER_OFFSETS, row), last = col_i32(c, B_HEADER_OFFSETS, row + 1);
    for (int32_t e = first; e < last; e++) {
        int32_t k0 = col_i32(c, B_HKEY_OFFSETS, e), k1 = col_i32(c, B_HKEY_OFFSETS, e + 1);
        if (k1 - k0 != key_len || memcmp(c->d[B_HKEY_DATA] + k0, key, key_len) != 0)
            continue;
        const uint8_t *v = NULL;
        Py_ssize_t n = col_binary(c, B_HVALUE_OFFSETS, B_HVALUE_DATA, B_HVALUE_VALID, e, &v);
        if (n >= prefix_len && memcmp(v, prefix, prefix_len) == 0)
            return 1;
    }
    return 0;
}

static inline int
decimal_len(int64_t v, char *out)
{
    return snprintf(out, 24, "%lld", (long long)v);
}

PyDoc_STRVAR(scan_columns_doc,
"scan_columns(buffers, row, stop, header_key, skip_prefix, prefix_len, limit)\n"
"    -> (skipped rows, first row too large or -1, its size)\n\n"
"records.scan_columns_py in C: the loop check and the size check of a mirror's rows.");

static PyObject *
py_scan_columns(PyObject *self, PyObject *args)
{
    PyObject *list;
    Py_ssize_t row, stop, prefix_len, limit;
    const char *key, *skip;
    Py_ssize_t key_len, skip_len;
    if (!PyArg_ParseTuple(args, "Onny#y#nn", &list, &row, &stop, &key, &key_len, &skip,
                          &skip_len, &prefix_len, &limit))
        return NULL;
    Columns c;
    if (columns_from(list, &c) < 0 || columns_check(&c, row, stop) < 0)
        return NULL;
    PyObject *skipped = PyList_New(0);
    if (skipped == NULL)
        return NULL;
    Py_ssize_t too_large = -1, too_large_size = 0;
    char digits[24];
    for (Py_ssize_t i = row; i < stop; i++) {
        if (row_came_from(&c, i, key, key_len, skip, skip_len)) {
            PyObject *n = PyLong_FromSsize_t(i);
            if (n == NULL || PyList_Append(skipped, n) < 0) {
                Py_XDECREF(n);
                Py_DECREF(skipped);
                return NULL;
            }
            Py_DECREF(n);
            continue;
        }
        const uint8_t *p;
        Py_ssize_t k = col_binary(&c, B_KEY_OFFSETS, B_KEY_DATA, B_KEY_VALID, i, &p);
        Py_ssize_t v = col_binary(&c, B_VALUE_OFFSETS, B_VALUE_DATA, B_VALUE_VALID, i, &p);
        Py_ssize_t size = (k > 0 ? k : 0) + (v > 0 ? v : 0);
        int32_t e0 = col_i32(&c, B_HEADER_OFFSETS, i), e1 = col_i32(&c, B_HEADER_OFFSETS, i + 1);
        size += col_i32(&c, B_HKEY_OFFSETS, e1) - col_i32(&c, B_HKEY_OFFSETS, e0);
        size += col_i32(&c, B_HVALUE_OFFSETS, e1) - col_i32(&c, B_HVALUE_OFFSETS, e0);
        size += key_len + prefix_len + decimal_len(col_i64(&c, B_OFFSET, i), digits);
        if (size + 64 > limit) {
            too_large = i;
            too_large_size = size;
            break;
        }
    }
    return Py_BuildValue("Nnn", skipped, too_large, too_large_size);
}

PyDoc_STRVAR(mirror_columns_doc,
"mirror_columns(buffers, row, stop, batch_size, size, count, last_delta, base_ts, max_ts,\n"
"               header_key, prefix, skip_prefix)\n"
"    -> (stop, size, count, last_delta, base_ts, max_ts, chunk)\n\n"
"BatchBuilder.append_columns' loop (records.py has its Python twin): rows [row, stop) of\n"
"column buffers encoded as records with one more header, header_key = prefix + the row's\n"
"offset in decimal, until one does not fit; rows whose headers hold header_key with a value\n"
"starting with skip_prefix are passed over.  chunk: the bytes appended, or None.");

static PyObject *
py_mirror_columns(PyObject *self, PyObject *args)
{
    PyObject *list;
    Py_ssize_t row, stop;
    long long batch_size, size, count, od, base_ts, max_ts;
    const char *hkey, *prefix, *skip;
    Py_ssize_t hkey_len, prefix_len, skip_len;
    if (!PyArg_ParseTuple(args, "OnnLLLLLLy#y#y#", &list, &row, &stop, &batch_size, &size,
                          &count, &od, &base_ts, &max_ts, &hkey, &hkey_len, &prefix,
                          &prefix_len, &skip, &skip_len))
        return NULL;
    Columns c;
    if (columns_from(list, &c) < 0 || columns_check(&c, row, stop) < 0)
        return NULL;
    Buffer buf = {NULL, 0, 0};
    Py_ssize_t i = row;
    char digits[24];
    for (; i < stop; i++) {
        if (row_came_from(&c, i, hkey, hkey_len, skip, skip_len))
            continue;
        long long timestamp = col_i64(&c, B_TIMESTAMP, i);
        long long tsd = 0;
        if (count && __builtin_sub_overflow(timestamp, base_ts, &tsd))
            break; /* no varlong for that delta: the record starts the next batch */
        const uint8_t *key = NULL, *value = NULL;
        Py_ssize_t key_len = col_binary(&c, B_KEY_OFFSETS, B_KEY_DATA, B_KEY_VALID, i, &key);
        Py_ssize_t value_len =
            col_binary(&c, B_VALUE_OFFSETS, B_VALUE_DATA, B_VALUE_VALID, i, &value);
        int32_t e0 = col_i32(&c, B_HEADER_OFFSETS, i), e1 = col_i32(&c, B_HEADER_OFFSETS, i + 1);
        int ndigits = decimal_len(col_i64(&c, B_OFFSET, i), digits);
        Py_ssize_t hsize = zigzag_size(e1 - e0 + 1);
        for (int32_t e = e0; e < e1; e++) {
            int32_t kl = col_i32(&c, B_HKEY_OFFSETS, e + 1) - col_i32(&c, B_HKEY_OFFSETS, e);
            hsize += zigzag_size(kl) + kl;
            if (col_valid(&c, B_HVALUE_VALID, e)) {
                int32_t vl =
                    col_i32(&c, B_HVALUE_OFFSETS, e + 1) - col_i32(&c, B_HVALUE_OFFSETS, e);
                hsize += zigzag_size(vl) + vl;
            } else {
                hsize += 1;
            }
        }
        hsize += zigzag_size(hkey_len) + hkey_len + zigzag_size(prefix_len + ndigits) +
                 prefix_len + ndigits;
        Py_ssize_t body = 1 + zigzag_size(tsd) + zigzag_size(od + 1) +
                          (key_len < 0 ? 1 : zigzag_size(key_len) + key_len) +
                          (value_len < 0 ? 1 : zigzag_size(value_len) + value_len) + hsize;
        Py_ssize_t record_size = zigzag_size(body) + body;
        if (count) {
            if (size + record_size > batch_size)
                break;
            if (timestamp > max_ts)
                max_ts = timestamp;
        } else {
            base_ts = max_ts = timestamp;
        }
        if (buffer_reserve(&buf, record_size) < 0)
            goto error;
        uint8_t *out = buf.data + buf.len;
        out = write_zigzag(out, body);
        *out++ = 0; /* attributes */
        out = write_zigzag(out, tsd);
        out = write_zigzag(out, od + 1);
        out = write_zigzag(out, key_len);
        if (key_len > 0) {
            memcpy(out, key, key_len);
            out += key_len;
        }
        out = write_zigzag(out, value_len);
        if (value_len > 0) {
            memcpy(out, value, value_len);
            out += value_len;
        }
        out = write_zigzag(out, e1 - e0 + 1);
        for (int32_t e = e0; e < e1; e++) {
            int32_t k0 = col_i32(&c, B_HKEY_OFFSETS, e), k1 = col_i32(&c, B_HKEY_OFFSETS, e + 1);
            out = write_zigzag(out, k1 - k0);
            memcpy(out, c.d[B_HKEY_DATA] + k0, k1 - k0);
            out += k1 - k0;
            if (col_valid(&c, B_HVALUE_VALID, e)) {
                int32_t v0 = col_i32(&c, B_HVALUE_OFFSETS, e);
                int32_t v1 = col_i32(&c, B_HVALUE_OFFSETS, e + 1);
                out = write_zigzag(out, v1 - v0);
                memcpy(out, c.d[B_HVALUE_DATA] + v0, v1 - v0);
                out += v1 - v0;
            } else {
                out = write_zigzag(out, -1);
            }
        }
        out = write_zigzag(out, hkey_len);
        memcpy(out, hkey, hkey_len);
        out += hkey_len;
        out = write_zigzag(out, prefix_len + ndigits);
        memcpy(out, prefix, prefix_len);
        out += prefix_len;
        memcpy(out, digits, ndigits);
        buf.len += record_size;
        od += 1;
        size += record_size;
        count += 1;
    }
    PyObject *chunk = Py_None;
    if (buf.len) {
        chunk = PyBytes_FromStringAndSize((const char *)buf.data, buf.len);
        if (chunk == NULL)
            goto error;
    } else {
        Py_INCREF(chunk);
    }
    PyMem_Free(buf.data);
    return Py_BuildValue("nLLLLLN", i, size, count, od, base_ts, max_ts, chunk);
error:
    PyMem_Free(buf.data);
    return NULL;
}

/* ---- append_record: Producer.send's one record, straight into its batch ----------------- */

/* The offsets of BatchBuilder's slots (configure_builder reads them from the class's member
 * descriptors), so that a record joins the builder without a Python call or attribute
 * lookup: the state is read and written in place, and the bytes are appended to a
 * bytearray that the builder keeps as the last of its parts (its `_tail` slot), grown in
 * place for every record. */
static PyTypeObject *BuilderType;
static PyObject *AppendFallback; /* records._append_record_py */
enum { S_SIZE, S_COUNT, S_LAST_DELTA, S_BASE_TS, S_MAX_TS, S_BATCH_SIZE, S_PARTS, S_TAIL,
       S_PAYLOAD, S_COUNT_OF_SLOTS };
static const char *const slot_names[S_COUNT_OF_SLOTS] = {
    "_size", "_count", "_last_delta", "_base_ts", "_max_ts", "batch_size", "_parts", "_tail",
    "_payload"};
static Py_ssize_t slot_offset[S_COUNT_OF_SLOTS];

#define SLOT(obj, i) (*(PyObject **)((char *)(obj) + slot_offset[i]))

/* A slot holding an exact int within int64: 1 (value in *out), 0 otherwise. */
static inline int
slot_ll(PyObject *obj, int i, long long *out)
{
    PyObject *v = SLOT(obj, i);
    if (v == NULL || !PyLong_CheckExact(v))
        return 0;
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    return !overflow;
}

/* Replace a slot's value with a new int; -1 on a failed allocation. */
static inline int
set_slot_ll(PyObject *obj, int i, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    Py_XSETREF(SLOT(obj, i), v);
    return 0;
}

PyDoc_STRVAR(append_record_doc,
"append_record(builder, timestamp, key, value, headers) -> int\n\n"
"records.append_record: encode one record into a BatchBuilder; its new record count, or 0\n"
"when it does not fit (batch_size, or a timestamp delta beyond a varlong).  Inputs it does\n"
"not handle (see encode_records) go to the Python twin, records._append_record_py.");

static PyObject *
py_append_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "append_record takes 5 arguments");
        return NULL;
    }
    PyObject *builder = args[0], *ts_obj = args[1];
    long long size, count, od, base_ts, max_ts, batch_size, timestamp, tsd = 0;
    int overflow;
    if (BuilderType == NULL || !Py_IS_TYPE(builder, BuilderType) || !PyLong_CheckExact(ts_obj))
        goto fallback;
    timestamp = PyLong_AsLongLongAndOverflow(ts_obj, &overflow);
    if (overflow || !slot_ll(builder, S_SIZE, &size) || !slot_ll(builder, S_COUNT, &count) ||
        !slot_ll(builder, S_LAST_DELTA, &od) || !slot_ll(builder, S_BASE_TS, &base_ts) ||
        !slot_ll(builder, S_MAX_TS, &max_ts) || !slot_ll(builder, S_BATCH_SIZE, &batch_size))
        goto fallback;
    PyObject *parts = SLOT(builder, S_PARTS);
    if (parts == NULL || !PyList_CheckExact(parts))
        goto fallback;
    if (count && __builtin_sub_overflow(timestamp, base_ts, &tsd))
        return PyLong_FromLong(0); /* no varlong for that delta: it starts the next batch */
    RecordPlan plan;
    if (!plan_record(args[2], args[3], args[4], tsd, od + 1, &plan))
        goto fallback;
    if (count && size + plan.record_size > batch_size)
        return PyLong_FromLong(0);
    /* The bytearray this function grows: the builder's last part, else a new one.  Only
     * one made here counts (a part appended by the Python loop may be the caller's). */
    PyObject *tail = SLOT(builder, S_TAIL);
    Py_ssize_t nparts = PyList_GET_SIZE(parts);
    if (tail == NULL || nparts == 0 || PyList_GET_ITEM(parts, nparts - 1) != tail) {
        tail = PyByteArray_FromStringAndSize(NULL, 0);
        if (tail == NULL)
            return NULL;
        if (PyList_Append(parts, tail) < 0) {
            Py_DECREF(tail);
            return NULL;
        }
        Py_XSETREF(SLOT(builder, S_TAIL), tail); /* the slot takes our reference */
    }
    Py_ssize_t used = PyByteArray_GET_SIZE(tail);
    if (PyByteArray_Resize(tail, used + plan.record_size) < 0)
        return NULL;
    write_record((uint8_t *)PyByteArray_AS_STRING(tail) + used, &plan);
    if (count) {
        if (timestamp > max_ts && set_slot_ll(builder, S_MAX_TS, timestamp) < 0)
            return NULL;
    } else if (set_slot_ll(builder, S_BASE_TS, timestamp) < 0 ||
               set_slot_ll(builder, S_MAX_TS, timestamp) < 0) {
        return NULL;
    }
    if (set_slot_ll(builder, S_SIZE, size + plan.record_size) < 0 ||
        set_slot_ll(builder, S_COUNT, count + 1) < 0 ||
        set_slot_ll(builder, S_LAST_DELTA, od + 1) < 0)
        return NULL;
    Py_XSETREF(SLOT(builder, S_PAYLOAD), Py_NewRef(Py_None));
    return PyLong_FromLongLong(count + 1);
fallback:
    if (AppendFallback == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "append_record: configure_builder() not called");
        return NULL;
    }
    return PyObject_Vectorcall(AppendFallback, args, nargs, NULL);
}

PyDoc_STRVAR(configure_builder_doc,
"configure_builder(BatchBuilder, fallback): the class append_record writes into (its\n"
"slots, found by name) and the Python function that takes the inputs it does not handle.");

static PyObject *
py_configure_builder(PyObject *self, PyObject *args)
{
    PyObject *cls, *fallback;
    if (!PyArg_ParseTuple(args, "O!O", &PyType_Type, &cls, &fallback))
        return NULL;
    Py_ssize_t offsets[S_COUNT_OF_SLOTS];
    for (int i = 0; i < S_COUNT_OF_SLOTS; i++) {
        PyObject *descr = PyObject_GetAttrString(cls, slot_names[i]);
        if (descr == NULL)
            return NULL;
        int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
        if (ok)
            offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member", 
                         ((PyTypeObject *)cls)->tp_name, slot_names[i]);
            return NULL;
        }
    }
    memcpy(slot_offset, offsets, sizeof offsets);
    Py_XSETREF(BuilderType, (PyTypeObject *)Py_NewRef(cls));
    Py_XSETREF(AppendFallback, Py_NewRef(fallback));
    Py_RETURN_NONE;
}

/* ---- varints and murmur2 -------------------------------------------------------------- */

static PyObject *
py_encode_zigzag(PyObject *self, PyObject *arg)
{
    int overflow;
    long long n = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "%S does not fit a signed 64-bit varlong", arg);
        return NULL;
    }
    uint8_t out[MAX_VARLONG_BYTES];
    uint8_t *stop = write_zigzag(out, n);
    return PyBytes_FromStringAndSize((const char *)out, stop - out);
}

static PyObject *
py_decode_zigzag(PyObject *self, PyObject *args)
{
    Py_buffer data;
    Py_ssize_t pos;
    if (check_configured() < 0)
        return NULL;
    if (!PyArg_ParseTuple(args, "y*n", &data, &pos))
        return NULL;
    i128 p = pos;
    int64_t value;
    int rc = pos < 0 ? -2 : decode_zigzag_slow(data.buf, data.len, &p, &value);
    PyBuffer_Release(&data);
    if (rc == -2) {
        PyErr_SetString(PyExc_ValueError, "negative position");
        return NULL;
    }
    if (rc < 0)
        return NULL;
    return Py_BuildValue("Ln", (long long)value, (Py_ssize_t)p);
}

PyDoc_STRVAR(murmur2_doc, "murmur2(data) -> int: Kafka's Utils.murmur2 as a signed int32.");

static PyObject *
py_murmur2(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *data = view.buf;
    Py_ssize_t length = view.len;
    const uint32_t m = 0x5BD1E995;
    uint32_t h = 0x9747B28Cu ^ (uint32_t)length;
    Py_ssize_t whole = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < whole; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8) |
                     ((uint32_t)data[i + 2] << 16) | ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = (h * m) ^ k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[whole + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[whole + 1] << 8;
        /* fall through */
    case 1:
        h ^= data[whole];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)(int32_t)h);
}

static PyObject *
py_configure(PyObject *self, PyObject *args)
{
    PyObject *record, *corrupt_error, *varint_error;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyType_Type, &record, &PyType_Type, &corrupt_error,
                          &PyType_Type, &varint_error))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)record, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "Record must be a tuple subclass");
        return NULL;
    }
    Py_XSETREF(RecordType, Py_NewRef(record));
    Py_XSETREF(CorruptError, Py_NewRef(corrupt_error));
    Py_XSETREF(VarintErrorType, Py_NewRef(varint_error));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", py_configure, METH_VARARGS,
     "configure(Record, CorruptRecordError, VarintError): the classes the kernels build/raise."},
    {"decode_records", py_decode_records, METH_VARARGS, decode_records_doc},
    {"decode_consumer", py_decode_consumer, METH_VARARGS, decode_consumer_doc},
    {"decode_columns", py_decode_columns, METH_VARARGS, decode_columns_doc},
    {"decode_buffers", py_decode_buffers, METH_VARARGS, decode_buffers_doc},
    {"encode_records", py_encode_records, METH_VARARGS, encode_records_doc},
    {"scan_columns", py_scan_columns, METH_VARARGS, scan_columns_doc},
    {"mirror_columns", py_mirror_columns, METH_VARARGS, mirror_columns_doc},
    {"append_record", (PyCFunction)(void (*)(void))py_append_record, METH_FASTCALL,
     append_record_doc},
    {"configure_builder", py_configure_builder, METH_VARARGS, configure_builder_doc},
    {"encode_zigzag", py_encode_zigzag, METH_O, "varint.encode_zigzag"},
    {"decode_zigzag", py_decode_zigzag, METH_VARARGS, "varint.decode_zigzag"},
    {"murmur2", py_murmur2, METH_O, murmur2_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "databus.protocol._speedups",
    "The record format's per-record kernels in C (pure-Python twins in records.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModule_Create(&module);
}
