/* databus_plugins.index._json_speedups: named fields of many JSON values in one call, in C.
 *
 * ``json_fields(values, paths, bad)`` reads each value (bytes, or None) as ``json.loads``
 * would and returns ``(columns, undecided)``: per path (a tuple of str, the keys from the
 * top of the document down) the list of each value's node there, and the indexes of the
 * values this code leaves to Python.  A node is
 *
 * - a str for a JSON string, and for a JSON integer its decimal text (``str(int(...))``,
 *   so ``-0`` is ``0``),
 * - a float for another number (``NaN``, ``Infinity`` and ``-Infinity`` included, as
 *   ``json.loads`` reads them), True / False,
 * - None when a key on the path is absent, or the value there or above it is ``null``, or
 *   the value is None (a record without one),
 * - ``bad`` when the node is an object or an array, or the path goes through something
 *   that is neither an object nor null.
 *
 * Duplicate keys: the last one counts (``json.loads`` builds a dict).  The index's field
 * extraction (plugins/index/fields.py) turns the nodes into the text it stores.
 *
 * No document is ever read the whole way into Python objects: the value is checked to the
 * end (a document ``json.loads`` refuses must not give fields) and only the nodes asked for
 * are made.  Whatever this code is not sure to read exactly as ``json.loads`` does is
 * *undecided* (its column entries are None, its index listed) and the caller decodes it in
 * Python: any syntax error, bytes that are not strict UTF-8 (``json.loads`` also reads
 * UTF-16/32, a BOM, encoded surrogates), a lone surrogate escape, an integer of more than
 * 640 digits (Python's limit on int() of a string may be that low), nesting deeper than
 * MAX_DEPTH (Python's recursion limit), a value that is not bytes.  So every verdict on a
 * malformed value is Python's own.  tests/sinks/test_index_fields.py checks with hypothesis
 * that both ways agree, on well-formed, hostile and random values.
 *
 * The values are read without holding the GIL (the builder's other threads run meanwhile:
 * SQLite's writer takes the GIL back after each statement); the nodes' objects are made
 * after, holding it.
 *
 * Every read is bounds-checked: the values come from whoever produced to the topic.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_FIELDS 64
#define MAX_DEPTH 100
#define MAX_INT_DIGITS 640

/* Status of a read: OK, NO (undecided: Python reads this value), ERR (out of memory). */
enum { OK = 0, NO = 1, ERR = -1 };

typedef struct {
    const char *text;
    Py_ssize_t len;
} Key;

typedef struct {
    int count;
    int length[MAX_FIELDS];  /* keys in the path */
    Key *keys[MAX_FIELDS];
    uint64_t ends_at[MAX_DEPTH + 1];  /* the fields whose path has that many keys */
    Key *storage;
} Paths;

/* A node found by the reading (no GIL): its kind and where its text is. */
enum { N_NONE = 0, N_BAD, N_STR, N_INT, N_FLOAT, N_TRUE, N_FALSE, N_NAN, N_INF, N_NINF };

typedef struct {
    int kind;
    int escaped;  /* N_STR: holds escapes */
    const unsigned char *start, *stop;  /* N_STR: inside the quotes; N_INT, N_FLOAT */
} Node;

typedef struct {
    const unsigned char *p, *end;
    const Paths *paths;
    Node nodes[MAX_FIELDS];
    char *buf;  /* an escaped string unescaped, a number's text (PyMem_Raw: no GIL) */
    Py_ssize_t cap;
} Scan;

static int
set_nodes(Scan *s, uint64_t fields, int kind)
{
    for (int f = 0; fields; f++, fields >>= 1)
        if (fields & 1)
            s->nodes[f].kind = kind;
    return OK;
}

static int
reserve(Scan *s, Py_ssize_t n)
{
    if (n <= s->cap)
        return OK;
    Py_ssize_t cap = n < 256 ? 256 : n * 2;
    char *buf = PyMem_RawRealloc(s->buf, (size_t)cap);
    if (buf == NULL)
        return ERR;
    s->buf = buf;
    s->cap = cap;
    return OK;
}

static void
skip_ws(Scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* One UTF-8 character of 2-4 bytes at p (p[0] >= 0x80), strictly as Python decodes:
 * no overlong forms, no surrogates, nothing above U+10FFFF.  Its length, or 0. */
static int
utf8_char(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    Py_ssize_t left = end - p;
    if (c >= 0xC2 && c <= 0xDF)
        return left >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80)
            return 0;
        if (c == 0xE0 && p[1] < 0xA0)
            return 0;  /* overlong */
        if (c == 0xED && p[1] >= 0xA0)
            return 0;  /* a surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 ||
            (p[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && p[1] < 0x90)
            return 0;  /* overlong */
        if (c == 0xF4 && p[1] >= 0x90)
            return 0;  /* above U+10FFFF */
        return 4;
    }
    return 0;
}

static int
hex4(const unsigned char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return NO;
        v = v * 16 + d;
    }
    *out = v;
    return OK;
}

/* The string at s->p (its opening quote): checked, s->p after its closing quote, its raw
 * text in [*start, *stop) and whether it holds escapes. */
static int
scan_string(Scan *s, const unsigned char **start, const unsigned char **stop, int *escaped)
{
    const unsigned char *p = s->p + 1, *end = s->end;
    *start = p;
    *escaped = 0;
    while (p < end) {
        unsigned c = *p;
        if (c == '"') {
            *stop = p;
            s->p = p + 1;
            return OK;
        }
        if (c < 0x20)
            return NO;  /* a control character: json.loads refuses it */
        if (c == '\\') {
            *escaped = 1;
            if (end - p < 2)
                return NO;
            switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p += 2;
                continue;
            case 'u': {
                unsigned v;
                if (end - p < 6 || hex4(p + 2, &v) != OK)
                    return NO;
                p += 6;
                continue;
            }
            default:
                return NO;
            }
        }
        if (c < 0x80) {
            p++;
            continue;
        }
        int n = utf8_char(p, end);
        if (n == 0)
            return NO;
        p += n;
    }
    return NO;  /* not closed */
}

static char *
put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | (cp >> 6));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | (cp >> 18));
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* A checked string's text unescaped, as UTF-8, in s->buf (escapes are never longer than
 * what they stand for).  A surrogate that is not half of a pair is NO: Python would make
 * a str that is not valid UTF-8. */
static int
unescape(Scan *s, const unsigned char *p, const unsigned char *stop, Py_ssize_t *len)
{
    if (reserve(s, stop - p) != OK)
        return ERR;
    char *o = s->buf;
    while (p < stop) {
        if (*p != '\\') {
            *o++ = (char)*p++;
            continue;
        }
        unsigned char e = p[1];
        p += 2;
        switch (e) {
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, low;
            hex4(p, &cp);  /* checked by scan_string */
            p += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return NO;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                /* a pair: \uD8xx\uDCxx, as json.loads joins them */
                if (stop - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &low) != OK ||
                    low < 0xDC00 || low > 0xDFFF)
                    return NO;
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            o = put_utf8(o, cp);
            break;
        }
        default: *o++ = (char)e; break;  /* " \ / */
        }
    }
    *len = o - s->buf;
    return OK;
}


/* A number at s->p as json.loads' scanner reads it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)?
 * (what follows is checked by the caller). */
static int
scan_number(Scan *s, int *is_int)
{
    const unsigned char *p = s->p, *end = s->end;
    if (p < end && *p == '-')
        p++;
    if (p >= end)
        return NO;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    } else {
        return NO;
    }
    *is_int = 1;
    if (p < end && *p == '.') {
        if (end - p < 2 || p[1] < '0' || p[1] > '9')
            return NO;
        p += 2;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        *is_int = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        const unsigned char *q = p + 1;
        if (q < end && (*q == '+' || *q == '-'))
            q++;
        if (q >= end || *q < '0' || *q > '9')
            return NO;
        while (q < end && *q >= '0' && *q <= '9')
            q++;
        p = q;
        *is_int = 0;
    }
    if (*is_int && p - s->p > MAX_INT_DIGITS)
        return NO;  /* int() of so many digits may be refused: Python decides */
    s->p = p;
    return OK;
}


static int
literal(Scan *s, const char *word, Py_ssize_t len)
{
    if (s->end - s->p < len || memcmp(s->p, word, (size_t)len) != 0)
        return NO;
    s->p += len;
    return OK;
}

static int parse_value(Scan *s, int depth, uint64_t active);

/* The fields in ``more`` whose key at ``depth`` is the key in [start, stop). */
static int
matching(Scan *s, int depth, uint64_t more, const unsigned char *start,
         const unsigned char *stop, int escaped, uint64_t *out)
{
    *out = 0;
    if (!more)
        return OK;
    const char *text = (const char *)start;
    Py_ssize_t len = stop - start;
    if (escaped) {
        int st = unescape(s, start, stop, &len);
        if (st != OK)
            return st;
        text = s->buf;
    }
    for (int f = 0; more >> f; f++) {
        if (!((more >> f) & 1))
            continue;
        Key *key = &s->paths->keys[f][depth];
        if (key->len == len && memcmp(key->text, text, (size_t)len) == 0)
            *out |= (uint64_t)1 << f;
    }
    return OK;
}

static int
parse_object(Scan *s, int depth, uint64_t more)
{
    /* A later key of the same name replaces what an earlier one gave. */
    set_nodes(s, more, N_NONE);
    s->p++;  /* { */
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return OK;
    }
    for (;;) {
        if (s->p >= s->end || *s->p != '"')
            return NO;
        const unsigned char *start, *stop;
        int escaped, st;
        uint64_t sub;
        if ((st = scan_string(s, &start, &stop, &escaped)) != OK)
            return st;
        if ((st = matching(s, depth, more, start, stop, escaped, &sub)) != OK)
            return st;
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':')
            return NO;
        s->p++;
        skip_ws(s);
        if ((st = parse_value(s, depth + 1, sub)) != OK)
            return st;
        skip_ws(s);
        if (s->p >= s->end)
            return NO;
        if (*s->p == '}') {
            s->p++;
            return OK;
        }
        if (*s->p != ',')
            return NO;
        s->p++;
        skip_ws(s);
    }
}

static int
parse_array(Scan *s, int depth)
{
    s->p++;  /* [ */
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return OK;
    }
    for (;;) {
        int st = parse_value(s, depth + 1, 0);
        if (st != OK)
            return st;
        skip_ws(s);
        if (s->p >= s->end)
            return NO;
        if (*s->p == ']') {
            s->p++;
            return OK;
        }
        if (*s->p != ',')
            return NO;
        s->p++;
        skip_ws(s);
    }
}

/* The value at s->p, ``depth`` keys down; ``active``: the fields whose path led here. */
static int
parse_value(Scan *s, int depth, uint64_t active)
{
    if (depth > MAX_DEPTH)
        return NO;
    if (s->p >= s->end)
        return NO;
    uint64_t here = active & s->paths->ends_at[depth];  /* this value is their node */
    uint64_t more = active & ~here;  /* their path goes on into this value */
    Node node = {N_NONE, 0, s->p, NULL};
    int st;
    switch (*s->p) {
    case '{':
        set_nodes(s, here, N_BAD);
        return parse_object(s, depth, more);
    case '[':
        set_nodes(s, active, N_BAD);
        return parse_array(s, depth);
    case '"': {
        if ((st = scan_string(s, &node.start, &node.stop, &node.escaped)) != OK)
            return st;
        if (here && node.escaped) {
            Py_ssize_t len;  /* unescaped now only to know it has no lone surrogate */
            if ((st = unescape(s, node.start, node.stop, &len)) != OK)
                return st;
        }
        node.kind = N_STR;
        break;
    }
    case 'n':
        if ((st = literal(s, "null", 4)) != OK)
            return st;
        return set_nodes(s, active, N_NONE);  /* null on the way: missing too */
    case 't':
        if ((st = literal(s, "true", 4)) != OK)
            return st;
        node.kind = N_TRUE;
        break;
    case 'f':
        if ((st = literal(s, "false", 5)) != OK)
            return st;
        node.kind = N_FALSE;
        break;
    case 'N':
        if ((st = literal(s, "NaN", 3)) != OK)
            return st;
        node.kind = N_NAN;
        break;
    case 'I':
        if ((st = literal(s, "Infinity", 8)) != OK)
            return st;
        node.kind = N_INF;
        break;
    default: {
        if (*s->p == '-' && s->end - s->p > 1 && s->p[1] == 'I') {
            s->p++;
            if ((st = literal(s, "Infinity", 8)) != OK)
                return st;
            node.kind = N_NINF;
            break;
        }
        int is_int;
        if ((st = scan_number(s, &is_int)) != OK)
            return st;
        node.kind = is_int ? N_INT : N_FLOAT;
        node.stop = s->p;
        break;
    }
    }
    /* a scalar: the node of ``here`` (one field or several with the same path) */
    for (int f = 0; here >> f; f++)
        if ((here >> f) & 1)
            s->nodes[f] = node;
    set_nodes(s, more, N_BAD);  /* a path through a scalar */
    return OK;
}

/* The object of a node (holding the GIL). */
static PyObject *
make_node(Scan *s, const Node *node, PyObject *bad)
{
    Py_ssize_t len;
    switch (node->kind) {
    case N_BAD:
        return Py_NewRef(bad);
    case N_STR:
        if (!node->escaped)
            return PyUnicode_DecodeUTF8((const char *)node->start, node->stop - node->start,
                                        NULL);
        if (unescape(s, node->start, node->stop, &len) != OK)
            return PyErr_NoMemory();  /* (a lone surrogate was found while reading) */
        return PyUnicode_DecodeUTF8(s->buf, len, NULL);
    case N_INT:
        len = node->stop - node->start;
        if (len == 2 && node->start[0] == '-' && node->start[1] == '0')
            return PyUnicode_FromStringAndSize("0", 1);
        return PyUnicode_FromStringAndSize((const char *)node->start, len);
    case N_FLOAT: {
        len = node->stop - node->start;
        if (reserve(s, len + 1) != OK)
            return PyErr_NoMemory();
        memcpy(s->buf, node->start, (size_t)len);
        s->buf[len] = '\0';
        double d = PyOS_string_to_double(s->buf, NULL, NULL);
        if (d == -1.0 && PyErr_Occurred())
            return NULL;
        return PyFloat_FromDouble(d);
    }
    case N_TRUE:
        return Py_NewRef(Py_True);
    case N_FALSE:
        return Py_NewRef(Py_False);
    case N_NAN:
        return PyFloat_FromDouble(Py_NAN);
    case N_INF:
        return PyFloat_FromDouble(Py_HUGE_VAL);
    case N_NINF:
        return PyFloat_FromDouble(-Py_HUGE_VAL);
    default:
        return Py_NewRef(Py_None);
    }
}

static void
free_paths(Paths *paths)
{
    PyMem_Free(paths->storage);
}

static int
read_paths(PyObject *seq, Paths *paths)
{
    memset(paths, 0, sizeof(*paths));
    PyObject *fast = PySequence_Fast(seq, "paths must be a sequence of tuples of str");
    if (fast == NULL)
        return ERR;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast), total = 0;
    if (n > MAX_FIELDS) {
        PyErr_Format(PyExc_ValueError, "at most %d paths", MAX_FIELDS);
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *path = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyTuple_Check(path) || PyTuple_GET_SIZE(path) < 1 ||
            PyTuple_GET_SIZE(path) > MAX_DEPTH) {
            PyErr_Format(PyExc_ValueError, "a path is a tuple of 1 to %d str", MAX_DEPTH);
            goto fail;
        }
        total += PyTuple_GET_SIZE(path);
    }
    paths->storage = PyMem_Calloc((size_t)(total ? total : 1), sizeof(Key));
    if (paths->storage == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    Key *next = paths->storage;
    paths->count = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *path = PySequence_Fast_GET_ITEM(fast, i);
        Py_ssize_t len = PyTuple_GET_SIZE(path);
        paths->keys[i] = next;
        paths->length[i] = (int)len;
        paths->ends_at[len] |= (uint64_t)1 << i;
        for (Py_ssize_t k = 0; k < len; k++, next++) {
            PyObject *key = PyTuple_GET_ITEM(path, k);
            if (!PyUnicode_Check(key)) {
                PyErr_SetString(PyExc_TypeError, "a path's keys are str");
                goto fail;
            }
            /* the str stays alive in the caller's tuple for the call */
            next->text = PyUnicode_AsUTF8AndSize(key, &next->len);
            if (next->text == NULL)
                goto fail;  /* a lone surrogate: the caller reads in Python */
        }
    }
    Py_DECREF(fast);
    return OK;
fail:
    Py_DECREF(fast);
    free_paths(paths);
    return ERR;
}

PyDoc_STRVAR(json_fields_doc,
"json_fields(values, paths, bad) -> (columns, undecided)\n\n"
"Per path (a tuple of keys), each value's node there: str (a string; an integer's decimal\n"
"text), float, bool, None (absent or null) or ``bad`` (an object or array, or a path\n"
"through a scalar).  ``undecided``: indexes of the values to read in Python instead\n"
"(their nodes here are None).");

/* What the reading (no GIL) needs of one value. */
enum { V_NONE, V_BYTES, V_OTHER };

typedef struct {
    int what;
    int status;  /* OK, NO or ERR, after the reading */
    const unsigned char *data;
    Py_ssize_t size;
} Value;

static PyObject *
py_json_fields(PyObject *self, PyObject *args)
{
    PyObject *values, *path_seq, *bad;
    if (!PyArg_ParseTuple(args, "OOO:json_fields", &values, &path_seq, &bad))
        return NULL;
    Paths paths;
    if (read_paths(path_seq, &paths) != OK)
        return NULL;
    PyObject *held = NULL, *columns = NULL, *undecided = NULL, *result = NULL;
    Value *vals = NULL;
    Node *nodes = NULL;
    Scan s = {.paths = &paths};
    int nf = paths.count, failed = 0;
    uint64_t all = nf == 64 ? ~(uint64_t)0 : (((uint64_t)1 << nf) - 1);

    /* A tuple: the bytes stay alive, unchanged, while the GIL is released. */
    held = PySequence_Tuple(values);
    if (held == NULL)
        goto done;
    Py_ssize_t n = PyTuple_GET_SIZE(held);
    vals = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Value));
    nodes = PyMem_Calloc((size_t)(n > 0 ? n * nf : 1), sizeof(Node));
    if (vals == NULL || nodes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyTuple_GET_ITEM(held, i);
        if (value == Py_None) {
            vals[i].what = V_NONE;
        } else if (PyBytes_CheckExact(value)) {
            vals[i].what = V_BYTES;
            vals[i].data = (const unsigned char *)PyBytes_AS_STRING(value);
            vals[i].size = PyBytes_GET_SIZE(value);
        } else {
            vals[i].what = V_OTHER;
        }
    }

    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        int st = OK;
        if (vals[i].what == V_OTHER) {
            st = NO;
        } else if (vals[i].what == V_BYTES) {
            memset(s.nodes, 0, sizeof(Node) * (size_t)nf);
            s.p = vals[i].data;
            s.end = s.p + vals[i].size;
            skip_ws(&s);
            st = parse_value(&s, 0, all);
            if (st == OK) {
                skip_ws(&s);
                if (s.p != s.end)
                    st = NO;  /* more after the document */
            }
            if (st == OK)
                memcpy(nodes + i * nf, s.nodes, sizeof(Node) * (size_t)nf);
        }  /* V_NONE: no value, every node None (calloc'd) */
        vals[i].status = st;
        failed = st == ERR;
    }
    Py_END_ALLOW_THREADS

    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    if ((columns = PyList_New(nf)) == NULL || (undecided = PyList_New(0)) == NULL)
        goto done;
    for (int f = 0; f < nf; f++) {
        PyObject *column = PyList_New(n);
        if (column == NULL)
            goto done;
        PyList_SET_ITEM(columns, f, column);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (vals[i].status == NO) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(undecided, index) < 0) {
                Py_XDECREF(index);
                goto done;
            }
            Py_DECREF(index);
        }
        for (int f = 0; f < nf; f++) {
            PyObject *node = vals[i].status == NO ? Py_NewRef(Py_None)
                                                  : make_node(&s, &nodes[i * nf + f], bad);
            if (node == NULL)
                goto done;
            PyList_SET_ITEM(PyList_GET_ITEM(columns, f), i, node);
        }
    }
    result = PyTuple_Pack(2, columns, undecided);
done:
    PyMem_RawFree(s.buf);
    PyMem_Free(vals);
    PyMem_Free(nodes);
    free_paths(&paths);
    Py_XDECREF(held);
    Py_XDECREF(columns);
    Py_XDECREF(undecided);
    return result;
}

static PyMethodDef methods[] = {
    {"json_fields", py_json_fields, METH_VARARGS, json_fields_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "databus_plugins.index._json_speedups",
    "Named fields of many JSON values in one call, in C (the pure-Python twin is json.loads "
    "in plugins/index/fields.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__json_speedups(void)
{
    return PyModule_Create(&module);
}
