/*
 * Zeek's texts in C: JSON log lines joined (the optional accelerator of json_columns._join),
 * and texts and addresses as Arrow strings (of arrow_columns.text_strings and addr_strings).
 *
 * The pure-Python renderer (broker_spark/zeek/json_columns.py) makes every column's texts
 * with Arrow kernels and joins each row's pieces with one `take` and one element-wise join:
 * a dozen passes over the rows, each a Python call. This module does the join in one pass
 * of C per row, and spells the commonest values itself (integers, IPv4 addresses, texts
 * that need no escaping, addresses), without the interpreter's lock, so a relay's decoder threads
 * run side by side. Anything else (doubles, escaped texts, IPv6, containers) still comes
 * from Python as strings it picks by index. The tests hold the two joins' lines equal
 * byte for byte.
 *
 * join(n, columns, objects, nulls) -> (offsets, data)
 *   columns: a list of (label, before, after, has, parts); label, before and after are
 *   bytes, has a buffer of n bytes (0: the row has no value), parts a list of:
 *     (0, texts)                       row r's text is texts[r]
 *     (1, texts, index)                texts[index[r]], nothing where index[r] < 0
 *     (2, values)                      int64 values in decimal
 *     (3, values)                      uint64 values in decimal
 *     (4, buf, starts, lengths)        an address: 4 bytes at buf[starts[r]] as a dotted
 *                                      quad, 16 as Zeek writes IPv6 (zeek_inet_ntop: hex
 *                                      words, the first longest run of two or more zero
 *                                      words as ::, an IPv4 tail in its three forms)
 *     (5, buf, starts, lengths, texts, index)
 *                                      buf[starts[r]:starts[r]+lengths[r]] as it is where
 *                                      index[r] < 0, else texts[index[r]]
 *   texts is (offsets, data, validity or None, offset, length, wide): an Arrow string
 *   array's buffers (32-bit offsets, or 64-bit when wide), its offset and length.
 *   objects: rows are {label value,...} objects (commas, braces); else one value a row.
 *   nulls: a row without a value writes label + null (else nothing).
 * Returns the lines as an Arrow string array's buffers: n + 1 int32 offsets and the bytes.
 * Every index, offset and position is checked against its buffer: a bad one raises
 * ValueError, it never reads outside.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *data;
    Py_ssize_t data_len;
    const uint8_t *offsets; /* int32 or int64, by wide */
    const uint8_t *validity;
    Py_ssize_t offset;
    Py_ssize_t length;
    int wide;
} Texts;

enum { WHOLE = 0, TABLE = 1, INT = 2, UINT = 3, ADDR = 4, RAW = 5 };

typedef struct {
    int kind;
    Texts texts;
    const int64_t *index;
    const int64_t *ints;
    const uint64_t *uints;
    const uint8_t *buf;
    Py_ssize_t buf_len;
    const int64_t *starts;
    const int64_t *lengths;
} Part;

typedef struct {
    const char *label, *before, *after;
    Py_ssize_t label_len, before_len, after_len;
    const uint8_t *has;
    Py_ssize_t first_part, parts;
} Column;

typedef struct {
    Py_buffer *views;
    Py_ssize_t count, capacity;
} Views;

/* A buffer view of obj, at least min_len bytes, kept in v until release_views. *out is
 * valid until the next take (the array may move): callers copy what they need. */
static int
take_view(Views *v, PyObject *obj, Py_ssize_t min_len, const char *what, Py_buffer **out)
{
    if (v->count == v->capacity) {
        Py_ssize_t cap = v->capacity ? v->capacity * 2 : 32;
        Py_buffer *grown = PyMem_Realloc(v->views, cap * sizeof(Py_buffer));
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        v->views = grown;
        v->capacity = cap;
    }
    Py_buffer *view = &v->views[v->count];
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    v->count++;
    if (view->len < min_len) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, %zd needed", what, view->len, min_len);
        return -1;
    }
    *out = view;
    return 0;
}

static void
release_views(Views *v)
{
    for (Py_ssize_t i = 0; i < v->count; i++)
        PyBuffer_Release(&v->views[i]);
    PyMem_Free(v->views);
}

static int
parse_texts(Views *v, PyObject *spec, Texts *t)
{
    PyObject *offsets, *data, *validity;
    Py_ssize_t offset, length;
    int wide;
    Py_buffer *view;
    if (!PyArg_ParseTuple(spec, "OOOnnp", &offsets, &data, &validity, &offset, &length, &wide))
        return -1;
    if (offset < 0 || length < 0 || offset > PY_SSIZE_T_MAX / 16 - length) {
        PyErr_SetString(PyExc_ValueError, "texts: an offset or length out of range");
        return -1;
    }
    t->offset = offset;
    t->length = length;
    t->wide = wide;
    if (take_view(v, offsets, (offset + length + 1) * (wide ? 8 : 4), "texts' offsets", &view) < 0)
        return -1;
    t->offsets = view->buf;
    t->data = NULL;
    t->data_len = 0;
    if (data != Py_None) {
        if (take_view(v, data, 0, "texts' data", &view) < 0)
            return -1;
        t->data = view->buf;
        t->data_len = view->len;
    }
    t->validity = NULL;
    if (validity != Py_None) {
        if (take_view(v, validity, (offset + length + 7) / 8, "texts' validity", &view) < 0)
            return -1;
        t->validity = view->buf;
    }
    return 0;
}

static int
parse_part(Views *v, PyObject *spec, Py_ssize_t n, Part *p)
{
    Py_buffer *view;
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 2) {
        PyErr_SetString(PyExc_TypeError, "a part is a tuple (kind, ...)");
        return -1;
    }
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    if (kind == -1 && PyErr_Occurred())
        return -1;
    Py_ssize_t size = PyTuple_GET_SIZE(spec);
    memset(p, 0, sizeof(*p));
    p->kind = (int)kind;
    switch (kind) {
    case WHOLE:
        if (size != 2 || parse_texts(v, PyTuple_GET_ITEM(spec, 1), &p->texts) < 0)
            break;
        if (p->texts.length < n) {
            PyErr_SetString(PyExc_ValueError, "a whole part has fewer texts than rows");
            return -1;
        }
        return 0;
    case TABLE:
        if (size != 3 || parse_texts(v, PyTuple_GET_ITEM(spec, 1), &p->texts) < 0)
            break;
        if (take_view(v, PyTuple_GET_ITEM(spec, 2), n * 8, "an index", &view) < 0)
            return -1;
        p->index = view->buf;
        return 0;
    case INT:
    case UINT:
        if (size != 2)
            break;
        if (take_view(v, PyTuple_GET_ITEM(spec, 1), n * 8, "values", &view) < 0)
            return -1;
        p->ints = view->buf;
        p->uints = view->buf;
        return 0;
    case ADDR:
    case RAW:
        if (size != (kind == ADDR ? 4 : 6))
            break;
        if (take_view(v, PyTuple_GET_ITEM(spec, 1), 0, "a record buffer", &view) < 0)
            return -1;
        p->buf = view->buf;
        p->buf_len = view->len;
        if (take_view(v, PyTuple_GET_ITEM(spec, 2), n * 8, "starts", &view) < 0)
            return -1;
        p->starts = view->buf;
        if (take_view(v, PyTuple_GET_ITEM(spec, 3), n * 8, "lengths", &view) < 0)
            return -1;
        p->lengths = view->buf;
        if (kind == ADDR)
            return 0;
        if (parse_texts(v, PyTuple_GET_ITEM(spec, 4), &p->texts) < 0)
            return -1;
        if (take_view(v, PyTuple_GET_ITEM(spec, 5), n * 8, "an index", &view) < 0)
            return -1;
        p->index = view->buf;
        return 0;
    default:
        PyErr_Format(PyExc_ValueError, "no part of kind %ld", kind);
        return -1;
    }
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "a part of kind %ld has %zd fields", kind, size);
    return -1;
}

/* Whether [start, start + length) lies in a buffer of size bytes (no overflow). */
static inline int
inside(int64_t start, int64_t length, Py_ssize_t size)
{
    return start >= 0 && length >= 0 && length <= size && start <= size - length;
}

/* The bytes of texts[i]: 0 and *at set, 1 for none (null), -1 for out of range. */
static inline int
text_at(const Texts *t, int64_t i, const uint8_t **at, Py_ssize_t *len)
{
    if (i < 0 || i >= t->length)
        return -1;
    Py_ssize_t k = t->offset + (Py_ssize_t)i;
    if (t->validity && !((t->validity[k >> 3] >> (k & 7)) & 1))
        return 1;
    int64_t lo, hi;
    if (t->wide) {
        memcpy(&lo, t->offsets + 8 * k, 8);
        memcpy(&hi, t->offsets + 8 * (k + 1), 8);
    } else {
        int32_t l32, h32;
        memcpy(&l32, t->offsets + 4 * k, 4);
        memcpy(&h32, t->offsets + 4 * (k + 1), 4);
        lo = l32;
        hi = h32;
    }
    if (lo < 0 || hi < lo || hi > t->data_len)
        return -1;
    *at = t->data + lo;
    *len = (Py_ssize_t)(hi - lo);
    return 0;
}

static inline Py_ssize_t
digits_u64(uint64_t x)
{
    static const uint64_t tens[] = {
        10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
        100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL,
        10000000000000ULL, 100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL,
        100000000000000000ULL, 1000000000000000000ULL, 10000000000000000000ULL,
    };
    Py_ssize_t d = 1;
    while (d < 20 && x >= tens[d - 1])
        d++;
    return d;
}

static inline void
write_u64(char *out, Py_ssize_t d, uint64_t x)
{
    for (Py_ssize_t i = d - 1; i >= 0; i--) {
        out[i] = (char)('0' + x % 10);
        x /= 10;
    }
}

static inline Py_ssize_t
octet_len(uint8_t o)
{
    return o >= 100 ? 3 : o >= 10 ? 2 : 1;
}

/* An octet in decimal at out; its length. */
static inline Py_ssize_t
write_octet(char *out, uint8_t o)
{
    Py_ssize_t d = octet_len(o);
    write_u64(out, d, o);
    return d;
}

static inline Py_ssize_t
write_quad(char *out, const uint8_t *o)
{
    char *at = out;
    for (int k = 0; k < 4; k++) {
        at += write_octet(at, o[k]);
        if (k < 3)
            *at++ = '.';
    }
    return at - out;
}

static inline Py_ssize_t
write_hex(char *out, unsigned w)
{
    static const char digits[] = "0123456789abcdef";
    Py_ssize_t d = w >= 0x1000 ? 4 : w >= 0x100 ? 3 : w >= 0x10 ? 2 : 1;
    for (Py_ssize_t i = d - 1; i >= 0; i--, w >>= 4)
        out[i] = digits[w & 15];
    return d;
}

/* 16 address bytes as zeek_inet_ntop writes them (text.addr_text is the reference), at
 * out (46 bytes of room); the length. */
static Py_ssize_t
write_ipv6(char *out, const uint8_t *b)
{
    unsigned w[8];
    for (int i = 0; i < 8; i++)
        w[i] = ((unsigned)b[2 * i] << 8) | b[2 * i + 1];
    int best = -1, best_len = 0, start = -1;
    for (int i = 0; i <= 8; i++) {
        if (i < 8 && w[i] == 0) {
            if (start < 0)
                start = i;
        } else if (start >= 0) {
            if (i - start > best_len) {
                best = start;
                best_len = i - start;
            }
            start = -1;
        }
    }
    if (best_len < 2) {
        best = -1;
        best_len = 0;
    }
    char *at = out;
    if (best == 0 && (best_len == 6 || (best_len == 5 && w[5] == 0xFFFF) ||
                      (best_len == 4 && w[4] == 0xFFFF && w[5] == 0))) {
        *at++ = ':';
        *at++ = ':';
        for (int i = best_len; i < 6; i++) {
            at += write_hex(at, w[i]);
            *at++ = ':';
        }
        return at - out + write_quad(at, b + 12);
    }
    for (int i = 0; i < 8; i++) {
        if (i == best) {
            *at++ = ':';
            *at++ = ':';
            i += best_len - 1;
            continue;
        }
        if (i > 0 && i != best + best_len)
            *at++ = ':';
        at += write_hex(at, w[i]);
    }
    return at - out;
}

/* The lines being written: a buffer grown as needed (no lock held). */
typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Out;

/* Room for k more bytes; -1 when out of memory. */
static inline int
ensure(Out *o, Py_ssize_t k)
{
    if (o->len + k <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap * 2 > o->len + k + 4096 ? o->cap * 2 : o->len + k + 4096;
    char *p = realloc(o->p, (size_t)cap);
    if (!p)
        return -1;
    o->p = p;
    o->cap = cap;
    return 0;
}

/* A short copy: most pieces are a few bytes, where a call of memcpy costs more than the
 * copy. The room is ensured by the caller. */
static inline void
append(Out *o, const void *src, Py_ssize_t len)
{
    char *dst = o->p + o->len;
    const char *from = src;
    if (len <= 16) {
        for (Py_ssize_t i = 0; i < len; i++)
            dst[i] = from[i];
    } else {
        memcpy(dst, from, (size_t)len);
    }
    o->len += len;
}

/* Row r's text of part p, appended; 0, or -1 with *why set. */
static inline int
piece(const Part *p, Py_ssize_t r, Out *o, const char **why)
{
    const uint8_t *at;
    Py_ssize_t len;
    int got;
    switch (p->kind) {
    case WHOLE:
        got = text_at(&p->texts, r, &at, &len);
        break;
    case TABLE:
        if (p->index[r] < 0)
            return 0;
        got = text_at(&p->texts, p->index[r], &at, &len);
        break;
    case INT: {
        if (ensure(o, 24) < 0)
            goto memory;
        int64_t x = p->ints[r];
        uint64_t m = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
        Py_ssize_t d = digits_u64(m);
        if (x < 0)
            o->p[o->len++] = '-';
        write_u64(o->p + o->len, d, m);
        o->len += d;
        return 0;
    }
    case UINT: {
        if (ensure(o, 24) < 0)
            goto memory;
        Py_ssize_t d = digits_u64(p->uints[r]);
        write_u64(o->p + o->len, d, p->uints[r]);
        o->len += d;
        return 0;
    }
    case ADDR:
    case RAW: {
        int64_t s = p->starts[r], l = p->lengths[r];
        if (p->kind == ADDR) {
            if (l != 4 && l != 16)
                return 0;
            if (!inside(s, l, p->buf_len)) {
                *why = "an address lies outside the record buffer";
                return -1;
            }
            if (ensure(o, 48) < 0)
                goto memory;
            const uint8_t *b = p->buf + s;
            o->len += l == 4 ? write_quad(o->p + o->len, b) : write_ipv6(o->p + o->len, b);
            return 0;
        }
        if (p->index[r] >= 0) {
            got = text_at(&p->texts, p->index[r], &at, &len);
            break;
        }
        if (!inside(s, l, p->buf_len)) {
            *why = "a text lies outside the record buffer";
            return -1;
        }
        at = p->buf + s;
        len = (Py_ssize_t)l;
        got = 0;
        break;
    }
    default:
        *why = "a part of an unknown kind";
        return -1;
    }
    if (got < 0) {
        *why = "an index or offset outside its texts";
        return -1;
    }
    if (got > 0)
        return 0;
    if (ensure(o, len) < 0)
        goto memory;
    append(o, at, len);
    return 0;
memory:
    *why = NULL;
    return -1;
}

/* Every row's line, appended to o, its end in offs[r + 1]. 0, or -1 with *why set (NULL:
 * out of memory). */
static int
rows(const Column *cols, Py_ssize_t ncols, const Part *parts, Py_ssize_t n, int objects,
     int nulls, int32_t *offs, Out *o, const char **why)
{
    for (Py_ssize_t r = 0; r < n; r++) {
        int first = 1;
        if (ensure(o, 2) < 0)
            goto memory;
        if (objects)
            o->p[o->len++] = '{';
        for (Py_ssize_t c = 0; c < ncols; c++) {
            const Column *col = &cols[c];
            int has = col->has[r] != 0;
            if (!has && !nulls)
                continue;
            if (ensure(o, 6 + col->label_len + col->before_len) < 0)
                goto memory;
            if (objects && !first)
                o->p[o->len++] = ',';
            first = 0;
            append(o, col->label, col->label_len);
            if (!has) {
                append(o, "null", 4);
                continue;
            }
            append(o, col->before, col->before_len);
            for (Py_ssize_t k = 0; k < col->parts; k++)
                if (piece(&parts[col->first_part + k], r, o, why) < 0)
                    return -1;
            if (ensure(o, col->after_len + 1) < 0)
                goto memory;
            append(o, col->after, col->after_len);
        }
        if (objects) {
            if (ensure(o, 1) < 0)
                goto memory;
            o->p[o->len++] = '}';
        }
        if (o->len > INT32_MAX) {
            *why = "the lines hold more than 2 GiB";
            return -1;
        }
        offs[r + 1] = (int32_t)o->len;
    }
    return 0;
memory:
    *why = NULL;
    return -1;
}

static PyObject *
join(PyObject *self, PyObject *args)
{
    Py_ssize_t n;
    PyObject *columns;
    int objects, nulls;
    if (!PyArg_ParseTuple(args, "nO!pp", &n, &PyList_Type, &columns, &objects, &nulls))
        return NULL;
    if (n < 0 || n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a row count out of range");
        return NULL;
    }
    Views views = {NULL, 0, 0};
    Column *cols = NULL;
    Part *parts = NULL;
    PyObject *offsets = NULL, *data = NULL, *result = NULL;
    Py_ssize_t ncols = PyList_GET_SIZE(columns), nparts = 0;
    for (Py_ssize_t c = 0; c < ncols; c++) {
        PyObject *spec = PyList_GET_ITEM(columns, c);
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 5 ||
            !PyList_Check(PyTuple_GET_ITEM(spec, 4))) {
            PyErr_SetString(PyExc_TypeError,
                            "a column is a tuple (label, before, after, has, [parts])");
            return NULL;
        }
        nparts += PyList_GET_SIZE(PyTuple_GET_ITEM(spec, 4));
    }
    cols = PyMem_Calloc((size_t)ncols + 1, sizeof(Column));
    parts = PyMem_Calloc((size_t)nparts + 1, sizeof(Part));
    if (!cols || !parts) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t c = 0; c < ncols; c++) {
        PyObject *spec = PyList_GET_ITEM(columns, c), *list = PyTuple_GET_ITEM(spec, 4);
        Column *col = &cols[c];
        Py_buffer *view;
        if (PyBytes_AsStringAndSize(PyTuple_GET_ITEM(spec, 0), (char **)&col->label,
                                    &col->label_len) < 0 ||
            PyBytes_AsStringAndSize(PyTuple_GET_ITEM(spec, 1), (char **)&col->before,
                                    &col->before_len) < 0 ||
            PyBytes_AsStringAndSize(PyTuple_GET_ITEM(spec, 2), (char **)&col->after,
                                    &col->after_len) < 0)
            goto done;
        if (take_view(&views, PyTuple_GET_ITEM(spec, 3), n, "a column's has", &view) < 0)
            goto done;
        col->has = view->buf;
        col->first_part = at;
        col->parts = PyList_GET_SIZE(list);
        for (Py_ssize_t k = 0; k < col->parts; k++, at++)
            if (parse_part(&views, PyList_GET_ITEM(list, k), n, &parts[at]) < 0)
                goto done;
    }
    offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    if (!offsets)
        goto done;
    int32_t *offs = (int32_t *)PyBytes_AS_STRING(offsets);
    offs[0] = 0;
    const char *why = NULL;
    int failed;
    Out o = {NULL, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    failed = ensure(&o, 256 * n) < 0 ? (why = NULL, -1)
                                     : rows(cols, ncols, parts, n, objects, nulls, offs, &o, &why);
    Py_END_ALLOW_THREADS
    if (failed) {
        free(o.p);
        if (why)
            PyErr_SetString(PyExc_ValueError, why);
        else
            PyErr_NoMemory();
        goto done;
    }
    data = PyBytes_FromStringAndSize(o.p ? o.p : "", o.len);
    free(o.p);
    if (!data)
        goto done;
    result = PyTuple_Pack(2, offsets, data);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    PyMem_Free(cols);
    PyMem_Free(parts);
    release_views(&views);
    return result;
}

/* The arguments (n, buf, starts, lengths, has) of the functions below: the row count and
 * the four buffers, checked against it; 0, or -1 with an error (views to release). */
static int
row_args(PyObject *args, Py_ssize_t *n, Views *views, Py_buffer **bufs)
{
    static const char *what[4] = {"a record buffer", "starts", "lengths", "has"};
    PyObject *objs[4];
    if (!PyArg_ParseTuple(args, "nOOOO", n, &objs[0], &objs[1], &objs[2], &objs[3]))
        return -1;
    if (*n < 0 || *n > INT32_MAX / 48) {
        PyErr_SetString(PyExc_ValueError, "a row count out of range");
        return -1;
    }
    Py_ssize_t need[4] = {0, *n * 8, *n * 8, *n}, first = views->count;
    for (int k = 0; k < 4; k++)
        if (take_view(views, objs[k], need[k], what[k], &bufs[k]) < 0)
            return -1;
    for (int k = 0; k < 4; k++) /* a later take may have moved the views */
        bufs[k] = &views->views[first + k];
    return 0;
}

/* Whether every row that has a text (addresses: an address, 4 or 16 bytes) lies in the
 * record buffer; -1 with a ValueError naming what, else 0. */
static int
rows_inside(Py_buffer *const *b, Py_ssize_t n, int addresses)
{
    const int64_t *s = b[1]->buf, *l = b[2]->buf;
    const uint8_t *has = b[3]->buf;
    for (Py_ssize_t r = 0; r < n; r++) {
        if (!has[r] || (addresses && l[r] != 4 && l[r] != 16))
            continue;
        if (!inside(s[r], l[r], b[0]->len)) {
            PyErr_SetString(PyExc_ValueError, addresses
                                                  ? "an address lies outside the record buffer"
                                                  : "a text lies outside the record buffer");
            return -1;
        }
    }
    return 0;
}

/* Byte classes, a flag a byte (filled when the module loads): printable ASCII, and of it
 * what a JSON string holds as it is (all but '"' and '\\'). */
static uint8_t printable_byte[256], json_plain_byte[256];

/* Whether every byte of p[0:len] is in the class. */
static inline uint8_t
all_in(const uint8_t *class, const uint8_t *p, int64_t len)
{
    uint8_t all = 1;
    for (int64_t i = 0; i < len; i++)
        all &= class[p[i]];
    return all;
}

/* plain(n, buf, starts, lengths, has) -> bytes: 1 where row r's text is printable ASCII
 * without '"' or '\\' (JSON's inside of a string as it is), or the row has none. */
static PyObject *
plain(PyObject *self, PyObject *args)
{
    Py_ssize_t n;
    Views views = {NULL, 0, 0};
    Py_buffer *b[4];
    PyObject *result = NULL;
    if (row_args(args, &n, &views, b) < 0)
        goto done;
    if (rows_inside(b, n, 0) < 0)
        goto done;
    result = PyBytes_FromStringAndSize(NULL, n);
    if (!result)
        goto done;
    uint8_t *flags = (uint8_t *)PyBytes_AS_STRING(result);
    const uint8_t *data = b[0]->buf, *has = b[3]->buf;
    const int64_t *s = b[1]->buf, *l = b[2]->buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < n; r++)
        flags[r] = has[r] ? all_in(json_plain_byte, data + s[r], l[r]) : 1;
    Py_END_ALLOW_THREADS
done:
    release_views(&views);
    return result;
}

/* texts(n, buf, starts, lengths, has) -> (offsets, data, printable): the texts of the rows
 * that have one, back to back (int64 offsets: an Arrow string array's, large or not), and
 * 1 for a row whose text is all printable ASCII (or that has none). */
static PyObject *
texts(PyObject *self, PyObject *args)
{
    Py_ssize_t n;
    Views views = {NULL, 0, 0};
    Py_buffer *b[4];
    PyObject *offsets = NULL, *data = NULL, *flags = NULL, *result = NULL;
    if (row_args(args, &n, &views, b) < 0)
        goto done;
    if (rows_inside(b, n, 0) < 0)
        goto done;
    const uint8_t *buf = b[0]->buf, *has = b[3]->buf;
    const int64_t *s = b[1]->buf, *l = b[2]->buf;
    int64_t total = 0;
    for (Py_ssize_t r = 0; r < n; r++)
        total += has[r] ? l[r] : 0;
    offsets = PyByteArray_FromStringAndSize(NULL, (n + 1) * 8);
    data = PyByteArray_FromStringAndSize(NULL, total);
    flags = PyByteArray_FromStringAndSize(NULL, n);
    if (!offsets || !data || !flags)
        goto done;
    int64_t *offs = (int64_t *)PyByteArray_AS_STRING(offsets);
    char *out = PyByteArray_AS_STRING(data);
    uint8_t *printable = (uint8_t *)PyByteArray_AS_STRING(flags);
    Py_BEGIN_ALLOW_THREADS
    int64_t at = 0;
    offs[0] = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        printable[r] = has[r] ? all_in(printable_byte, buf + s[r], l[r]) : 1;
        if (has[r]) {
            memcpy(out + at, buf + s[r], (size_t)l[r]);
            at += l[r];
        }
        offs[r + 1] = at;
    }
    Py_END_ALLOW_THREADS
    result = PyTuple_Pack(3, offsets, data, flags);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    Py_XDECREF(flags);
    release_views(&views);
    return result;
}

/* addresses(n, buf, starts, lengths, has) -> (offsets, data): the addresses of the rows that
 * have one (4 or 16 bytes) as Zeek writes them, an Arrow string array's int32 offsets and
 * bytes ("" for a row without). */
static PyObject *
addresses(PyObject *self, PyObject *args)
{
    Py_ssize_t n;
    Views views = {NULL, 0, 0};
    Py_buffer *b[4];
    PyObject *offsets = NULL, *data = NULL, *result = NULL;
    if (row_args(args, &n, &views, b) < 0)
        goto done;
    if (rows_inside(b, n, 1) < 0)
        goto done;
    const uint8_t *buf = b[0]->buf, *has = b[3]->buf;
    const int64_t *s = b[1]->buf, *l = b[2]->buf;
    offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    char *out = PyMem_Malloc((size_t)n * 48 + 1);
    if (!offsets || !out) {
        PyMem_Free(out);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    int32_t *offs = (int32_t *)PyBytes_AS_STRING(offsets);
    int32_t at = 0;
    Py_BEGIN_ALLOW_THREADS
    offs[0] = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        if (has[r] && l[r] == 4)
            at += (int32_t)write_quad(out + at, buf + s[r]);
        else if (has[r] && l[r] == 16)
            at += (int32_t)write_ipv6(out + at, buf + s[r]);
        offs[r + 1] = at;
    }
    Py_END_ALLOW_THREADS
    data = PyBytes_FromStringAndSize(out, at);
    PyMem_Free(out);
    if (data)
        result = PyTuple_Pack(2, offsets, data);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    release_views(&views);
    return result;
}

static PyMethodDef methods[] = {
    {"texts", texts, METH_VARARGS,
     "texts(n, buf, starts, lengths, has) -> (offsets, data, printable): see the source."},
    {"addresses", addresses, METH_VARARGS,
     "addresses(n, buf, starts, lengths, has) -> (offsets, data): as Zeek writes them."},
    {"plain", plain, METH_VARARGS,
     "plain(n, buf, starts, lengths, has) -> bytes: 1 where a text needs no escaping."},
    {"join", join, METH_VARARGS,
     "join(n, columns, objects, nulls) -> (offsets, data): Zeek's JSON lines of n rows."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_zeek_texts",
    "Zeek's texts in C (json_columns' and arrow_columns' optional accelerator).", -1, methods,
};

PyMODINIT_FUNC
PyInit__zeek_texts(void)
{
    for (int b = 0x20; b <= 0x7e; b++) {
        printable_byte[b] = 1;
        json_plain_byte[b] = b != '"' && b != '\\';
    }
    return PyModule_Create(&module);
}
