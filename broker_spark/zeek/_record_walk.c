/*
 * Zeek's log records walked in C: the optional accelerator of columns.decode_block.
 *
 * The numpy walk (broker_spark/zeek/columns.py) reads one column of every record at a
 * time: a dozen array operations a column, each a Python call over all records, most of a
 * relay's or a task's decoding time. This walks each record once, value after value, and
 * fills the same arrays (a ColumnData's present, values, proto, starts, lengths, prefix,
 * counts and elements), without the interpreter's lock. It takes the same decisions: a
 * record fits only if it has the expected field count and every value has its column's
 * type (subtype 0), a flag of 0 or 1 and a well-formed payload, and its values end exactly
 * at its end. Records that do not fit are left blank (nothing present, no elements) for
 * the caller to decode with the reference codec. The tests run every decoding test on
 * both walks and compare what comes out.
 *
 * walk(buf, starts, ends, header, fields_ok, types) -> (ok, columns)
 *   buf: the records' bytes; starts, ends: int64 buffers of n positions; header: 4 when each
 *   record starts with its field count (int32, big-endian), else 0; fields_ok: whether the
 *   records (without a header) have as many values as types; types: a list of
 *   (tag, element tag), tags as Zeek numbers them, every one known (no 0).
 *   ok: n bytes; columns: per type a tuple of bytearrays (present, values, proto, starts,
 *   lengths, prefix, counts, elements), None for those the type does not have; elements is
 *   such a tuple too (its counts and elements None), of all elements, record after record.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum {
    BOOL = 1, INT = 2, COUNT = 3, DOUBLE = 4, TIME = 5, INTERVAL = 6, STRING = 7,
    ENUM = 9, PORT = 10, ADDR = 11, SUBNET = 12, TABLE = 14, FUNC = 17, FILE_ = 18,
    VECTOR = 19,
};

enum { PRESENT, VALUES, PROTO, STARTS, LENGTHS, PREFIX, COUNTS, ARRAYS };
static const int widths[ARRAYS] = {1, 8, 4, 8, 8, 8, 8};

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Array;

typedef struct Column {
    int tag;
    int has[ARRAYS];
    Array arrays[ARRAYS];
    struct Column *elements;
    Py_ssize_t entries;
    int fixed; /* preallocated: entries are written in place, already zero */
} Column;

static int
is_fixed(int tag)
{
    return tag == BOOL || tag == INT || tag == COUNT || tag == DOUBLE || tag == TIME ||
           tag == INTERVAL;
}

static int
is_text(int tag)
{
    return tag == STRING || tag == ENUM || tag == FUNC || tag == FILE_;
}

static int
is_container(int tag)
{
    return tag == TABLE || tag == VECTOR;
}

static void
column_init(Column *c, int tag, int depth)
{
    memset(c, 0, sizeof(*c));
    c->tag = tag;
    c->has[PRESENT] = 1;
    if (is_fixed(tag))
        c->has[VALUES] = 1;
    else if (tag == PORT)
        c->has[VALUES] = c->has[PROTO] = 1;
    else if (is_text(tag) || tag == ADDR)
        c->has[STARTS] = c->has[LENGTHS] = 1;
    else if (tag == SUBNET)
        c->has[STARTS] = c->has[LENGTHS] = c->has[PREFIX] = 1;
    else if (is_container(tag) && depth == 0)
        c->has[COUNTS] = 1;
}

static void
column_free(Column *c)
{
    for (int a = 0; a < ARRAYS; a++)
        free(c->arrays[a].p);
    if (c->elements) {
        column_free(c->elements);
        free(c->elements);
    }
}

/* The column's arrays made n entries long, zeros (a record's column, whose entries are
 * known in number: no growing, no blanking); -1 when out of memory. */
static int
column_preallocate(Column *c, Py_ssize_t n)
{
    for (int a = 0; a < ARRAYS; a++) {
        if (!c->has[a])
            continue;
        c->arrays[a].p = calloc((size_t)n + 1, (size_t)widths[a]);
        if (!c->arrays[a].p)
            return -1;
        c->arrays[a].cap = c->arrays[a].len = n * widths[a];
    }
    c->fixed = 1;
    return 0;
}

/* Room for one more entry in every array the column has; -1 when out of memory. */
static int
column_reserve(Column *c)
{
    for (int a = 0; a < ARRAYS; a++) {
        if (!c->has[a])
            continue;
        Array *arr = &c->arrays[a];
        if (arr->len + widths[a] > arr->cap) {
            Py_ssize_t cap = arr->cap ? arr->cap * 2 : 1024 * widths[a];
            char *p = realloc(arr->p, (size_t)cap);
            if (!p)
                return -1;
            arr->p = p;
            arr->cap = cap;
        }
    }
    return 0;
}

/* A blank entry (nothing present, zeros), appended. */
static void
column_blank(Column *c)
{
    if (c->fixed) {
        c->entries++;
        return;
    }
    for (int a = 0; a < ARRAYS; a++) {
        if (!c->has[a])
            continue;
        memset(c->arrays[a].p + c->arrays[a].len, 0, (size_t)widths[a]);
        c->arrays[a].len += widths[a];
    }
    c->entries++;
}

static inline void
put(Column *c, int a, Py_ssize_t entry, const void *value)
{
    memcpy(c->arrays[a].p + entry * widths[a], value, (size_t)widths[a]);
}

static inline uint64_t
be64(const uint8_t *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    return __builtin_bswap64(x);
}

static inline uint32_t
be32(const uint8_t *p)
{
    uint32_t x;
    memcpy(&x, p, 4);
    return __builtin_bswap32(x);
}

/* One value of column c at *pos (the record ends at end), appended as the column's next
 * entry (blank when it does not fit); whether it fits. -1 when out of memory. */
static int
value(Column *c, const uint8_t *buf, int64_t *pos, int64_t end, int depth)
{
    if (!c->fixed && column_reserve(c) < 0)
        return -1;
    Py_ssize_t entry = c->entries;
    column_blank(c);
    int64_t at = *pos + 9;
    if (at > end || be64(buf + *pos) != (uint64_t)c->tag << 32 || buf[*pos + 8] > 1)
        return 0;
    int present = buf[*pos + 8];
    int tag = c->tag;
    int64_t step = 9;
    if (present) {
        if (is_fixed(tag)) {
            if (at + 8 > end)
                return 0;
            uint64_t v = be64(buf + at);
            put(c, VALUES, entry, &v);
            step = 17;
        } else if (tag == PORT) {
            if (at + 12 > end)
                return 0;
            uint64_t number = be64(buf + at);
            int32_t proto = (int32_t)be32(buf + at + 8);
            if (number > 65535 || proto < 0 || proto > 3)
                return 0;
            put(c, VALUES, entry, &number);
            put(c, PROTO, entry, &proto);
            step = 21;
        } else if (is_text(tag)) {
            if (at + 4 > end)
                return 0;
            int64_t length = be32(buf + at), start = at + 4;
            if (start + length > end)
                return 0;
            put(c, STARTS, entry, &start);
            put(c, LENGTHS, entry, &length);
            step = 13 + length;
        } else if (tag == ADDR || tag == SUBNET) {
            int skip = tag == SUBNET;
            if (at + skip + 1 > end)
                return 0;
            int family = buf[at + skip];
            if (family != 4 && family != 6)
                return 0;
            int64_t width = family == 4 ? 4 : 16, start = at + 1 + skip;
            if (start + width > end)
                return 0;
            if (skip) {
                /* Zeek keeps an IPv4 prefix as its length within IPv6 space: /8 is 104 */
                int64_t prefix = buf[at] - (family == 4 ? 96 : 0);
                if (prefix < 0 || prefix > (family == 4 ? 32 : 128))
                    return 0;
                put(c, PREFIX, entry, &prefix);
            }
            put(c, STARTS, entry, &start);
            put(c, LENGTHS, entry, &width);
            step = 10 + skip + width;
        } else if (is_container(tag) && depth == 0) {
            if (at + 8 > end)
                return 0;
            int64_t count = (int64_t)be64(buf + at);
            if (count < 0 || count > (end - at - 8) / 9)
                return 0;
            put(c, COUNTS, entry, &count);
            int64_t inner = at + 8;
            for (int64_t j = 0; j < count; j++) {
                int got = value(c->elements, buf, &inner, end, 1);
                if (got <= 0)
                    return got;
            }
            *pos = inner;
            c->arrays[PRESENT].p[entry] = 1;
            return 1;
        } else {
            return 0; /* a type no log record holds: only an unset value fits */
        }
    } else if (is_text(tag) || tag == ADDR || tag == SUBNET) {
        int64_t start = at + (tag == SUBNET ? 2 : tag == ADDR ? 1 : 4);
        put(c, STARTS, entry, &start);
    }
    *pos += step;
    c->arrays[PRESENT].p[entry] = (char)present;
    return 1;
}

/* Record r's entries blanked and its elements dropped (it does not fit). */
static void
forget(Column *cols, Py_ssize_t ncols, Py_ssize_t r, const Py_ssize_t *marks)
{
    for (Py_ssize_t c = 0; c < ncols; c++) {
        Column *col = &cols[c];
        for (int a = 0; a < ARRAYS; a++)
            if (col->has[a])
                memset(col->arrays[a].p + r * widths[a], 0, (size_t)widths[a]);
        if (col->elements) {
            Column *e = col->elements;
            e->entries = marks[c];
            for (int a = 0; a < ARRAYS; a++)
                if (e->has[a])
                    e->arrays[a].len = marks[c] * widths[a];
        }
    }
}

static PyObject *
column_result(Column *c)
{
    PyObject *items[ARRAYS + 1];
    for (int a = 0; a < ARRAYS; a++) {
        if (!c->has[a]) {
            items[a] = Py_NewRef(Py_None);
            continue;
        }
        items[a] = PyByteArray_FromStringAndSize(c->arrays[a].p ? c->arrays[a].p : "",
                                                 c->entries * widths[a]);
        if (!items[a]) {
            for (int k = 0; k < a; k++)
                Py_DECREF(items[k]);
            return NULL;
        }
    }
    items[ARRAYS] = c->elements ? column_result(c->elements) : Py_NewRef(Py_None);
    if (!items[ARRAYS]) {
        for (int k = 0; k < ARRAYS; k++)
            Py_DECREF(items[k]);
        return NULL;
    }
    PyObject *out = PyTuple_New(ARRAYS + 1);
    if (!out) {
        for (int k = 0; k <= ARRAYS; k++)
            Py_DECREF(items[k]);
        return NULL;
    }
    for (int k = 0; k <= ARRAYS; k++)
        PyTuple_SET_ITEM(out, k, items[k]);
    return out;
}

static PyObject *
walk(PyObject *self, PyObject *args)
{
    PyObject *buf_obj, *starts_obj, *ends_obj, *types;
    int header, fields_ok;
    if (!PyArg_ParseTuple(args, "OOOipO!", &buf_obj, &starts_obj, &ends_obj, &header,
                          &fields_ok, &PyList_Type, &types))
        return NULL;
    if (header != 0 && header != 4) {
        PyErr_SetString(PyExc_ValueError, "header is 0 or 4");
        return NULL;
    }
    Py_buffer bv, sv, ev;
    if (PyObject_GetBuffer(buf_obj, &bv, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(starts_obj, &sv, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&bv);
        return NULL;
    }
    if (PyObject_GetBuffer(ends_obj, &ev, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&bv);
        PyBuffer_Release(&sv);
        return NULL;
    }
    PyObject *result = NULL, *ok_obj = NULL, *cols_obj = NULL;
    Py_ssize_t n = sv.len / 8, ncols = PyList_GET_SIZE(types);
    Column *cols = calloc((size_t)ncols + 1, sizeof(Column));
    Py_ssize_t *marks = calloc((size_t)ncols + 1, sizeof(Py_ssize_t));
    if (!cols || !marks) {
        PyErr_NoMemory();
        goto done;
    }
    if (ev.len != sv.len) {
        PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
        goto done;
    }
    for (Py_ssize_t c = 0; c < ncols; c++) {
        int tag, element;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(types, c), "ii", &tag, &element))
            goto done;
        if (tag == 0 || (is_container(tag) && element == 0)) {
            PyErr_SetString(PyExc_ValueError, "a type not known (VOID): the numpy walk infers it");
            goto done;
        }
        column_init(&cols[c], tag, 0);
        if (column_preallocate(&cols[c], n) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        if (is_container(tag)) {
            cols[c].elements = malloc(sizeof(Column));
            if (!cols[c].elements) {
                PyErr_NoMemory();
                goto done;
            }
            column_init(cols[c].elements, element, 1);
        }
    }
    ok_obj = PyByteArray_FromStringAndSize(NULL, n);
    if (!ok_obj)
        goto done;
    uint8_t *ok = (uint8_t *)PyByteArray_AS_STRING(ok_obj);
    const uint8_t *buf = bv.buf;
    const int64_t *starts = sv.buf, *ends = ev.buf;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < n && !failed; r++) {
        int64_t start = starts[r], end = ends[r];
        int fits = fields_ok && start >= 0 && end <= bv.len && end - start >= header;
        if (fits && header)
            fits = (int32_t)be32(buf + start) == ncols;
        int64_t pos = start + header;
        for (Py_ssize_t c = 0; c < ncols; c++) {
            marks[c] = cols[c].elements ? cols[c].elements->entries : 0;
        }
        for (Py_ssize_t c = 0; c < ncols; c++) {
            if (!fits) {
                column_blank(&cols[c]);
                continue;
            }
            int got = value(&cols[c], buf, &pos, end, 0);
            if (got < 0) {
                failed = 1;
                break;
            }
            fits = got;
        }
        if (failed)
            break;
        fits = fits && pos == end;
        if (!fits)
            forget(cols, ncols, r, marks);
        ok[r] = (uint8_t)fits;
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    cols_obj = PyList_New(ncols);
    if (!cols_obj)
        goto done;
    for (Py_ssize_t c = 0; c < ncols; c++) {
        PyObject *col = column_result(&cols[c]);
        if (!col)
            goto done;
        PyList_SET_ITEM(cols_obj, c, col);
    }
    result = PyTuple_Pack(2, ok_obj, cols_obj);
done:
    Py_XDECREF(ok_obj);
    Py_XDECREF(cols_obj);
    if (cols)
        for (Py_ssize_t c = 0; c < ncols; c++)
            column_free(&cols[c]);
    free(cols);
    free(marks);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&ev);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(buf, starts, ends, header, fields_ok, types) -> (ok, columns): see the source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_record_walk",
    "Zeek's log records walked in C (columns.decode_block's optional accelerator).", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__record_walk(void)
{
    return PyModule_Create(&module);
}
