/*
 * The delta coder of bloomswarm.common._bloomfast (docs/format.md, "Delta file").
 *
 * Implements, bit for bit, what common/rice.py does: the flipped bit positions of
 * base XOR target (bit p = bit p % 8 of byte p / 8), their gaps (g0 = p0,
 * gi = pi - p(i-1) - 1), and the Rice code of each gap with parameter k: the quotient
 * g >> k in unary (that many 0 bits, then a 1) in the quotient stream, the low k bits
 * in the remainder stream, each stream filled from the least significant bit of each
 * byte and padded with zero bits. Linked into the _bloomfast module (bloomfast.c).
 *
 *   delta_count(base, target) -> int        bits that differ (equal-length buffers)
 *   delta_encode(base, target, k, q, r) -> int
 *       writes the streams into the zeroed writable buffers q and r (r exactly
 *       ceil(flips * k / 8) bytes, q large enough) and returns the quotient stream's
 *       length in bits; ValueError when a buffer is too small
 *   delta_apply(body, q, r, k, flips) -> None
 *       flips the encoded bits of the writable body; ValueError (message without a
 *       prefix) unless the streams hold exactly `flips` positions, all inside the body,
 *       with canonical lengths and zero padding. The body may be partly patched then.
 *
 * All three release the GIL while they run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define BSD_MAX_K 48

#if defined(__GNUC__) || defined(__clang__)
#define BSD_CTZ(x) ((unsigned)__builtin_ctzll(x))
#define BSD_POPCOUNT(x) ((uint64_t)__builtin_popcountll(x))
#else
static unsigned BSD_CTZ(uint64_t x)
{
    unsigned n = 0;
    while (!(x & 1)) {
        x >>= 1;
        n++;
    }
    return n;
}
static uint64_t BSD_POPCOUNT(uint64_t x)
{
    uint64_t n = 0;
    for (; x; x &= x - 1)
        n++;
    return n;
}
#endif

/* Little-endian host (checked in bloomfast.c): byte i of a word holds bits 8i..8i+7.
 * The full-word case is a constant-size memcpy, which compiles to one load. */
static inline uint64_t bsd_load(const unsigned char *p, size_t avail)
{
    uint64_t v = 0;
    if (avail >= 8)
        memcpy(&v, p, 8);
    else
        memcpy(&v, p, avail);
    return v;
}

static uint64_t bsd_count(const unsigned char *a, const unsigned char *b, size_t n)
{
    uint64_t total = 0;
    size_t i;
    for (i = 0; i + 8 <= n; i += 8)
        total += BSD_POPCOUNT(bsd_load(a + i, 8) ^ bsd_load(b + i, 8));
    if (i < n)
        total += BSD_POPCOUNT(bsd_load(a + i, n - i) ^ bsd_load(b + i, n - i));
    return total;
}

/* A bit writer: bits gather in a 64-bit word, written out 8 bytes at a time. */
typedef struct {
    unsigned char *buf;
    size_t cap, used; /* bytes */
    uint64_t acc;
    unsigned n; /* bits in acc, 0..63 */
} bsd_writer;

static inline int bsd_flush_word(bsd_writer *w)
{
    if (w->cap - w->used < 8)
        return -1;
    memcpy(w->buf + w->used, &w->acc, 8);
    w->used += 8;
    w->acc = 0;
    w->n = 0;
    return 0;
}

/* Append the low `bits` bits of v (bits <= 48, v < 2**bits). */
static inline int bsd_put(bsd_writer *w, uint64_t v, unsigned bits)
{
    w->acc |= v << w->n;
    if (w->n + bits < 64) {
        w->n += bits;
        return 0;
    }
    {
        unsigned spill = w->n + bits - 64, done = bits - spill;
        if (bsd_flush_word(w) < 0)
            return -1;
        w->acc = spill ? v >> done : 0;
        w->n = spill;
    }
    return 0;
}

/* Append q zero bits and a one bit. */
static inline int bsd_put_unary(bsd_writer *w, uint64_t q)
{
    while (q >= 64 - w->n) {
        q -= 64 - w->n;
        if (bsd_flush_word(w) < 0)
            return -1;
    }
    w->n += (unsigned)q;
    w->acc |= (uint64_t)1 << w->n;
    w->n++;
    if (w->n == 64)
        return bsd_flush_word(w);
    return 0;
}

/* Write the last partial word; returns the stream's length in bits, or -1. */
static inline int64_t bsd_finish(bsd_writer *w)
{
    size_t tail = (w->n + 7) / 8;
    if (w->cap - w->used < tail)
        return -1;
    memcpy(w->buf + w->used, &w->acc, tail);
    return (int64_t)(w->used * 8 + w->n);
}

/* Returns the quotient stream's length in bits, or -1 when q or r is too small. */
static int64_t bsd_encode(const unsigned char *a, const unsigned char *b, size_t n, unsigned k,
                          unsigned char *q, size_t qcap, unsigned char *r, size_t rcap)
{
    const uint64_t mask = k ? (((uint64_t)1 << k) - 1) : 0;
    bsd_writer qw = {q, qcap, 0, 0, 0}, rw = {r, rcap, 0, 0, 0};
    uint64_t next = 0;
    size_t i;

    for (i = 0; i < n; i += 8) {
        uint64_t x = bsd_load(a + i, n - i) ^ bsd_load(b + i, n - i);
        while (x) {
            uint64_t pos = (uint64_t)i * 8 + BSD_CTZ(x);
            uint64_t gap = pos - next;
            x &= x - 1;
            next = pos + 1;
            if (bsd_put_unary(&qw, gap >> k) < 0)
                return -1;
            if (k && bsd_put(&rw, gap & mask, k) < 0)
                return -1;
        }
    }
    if (bsd_finish(&rw) < 0)
        return -1;
    return bsd_finish(&qw);
}

/* Returns NULL on success, else what is wrong with the streams. */
static const char *bsd_apply(unsigned char *body, size_t n, const unsigned char *q, size_t qlen,
                             const unsigned char *r, size_t rlen, unsigned k, uint64_t flips)
{
    const uint64_t nbits = (uint64_t)n * 8;
    const uint64_t max_q = nbits >> k;
    const uint64_t mask = k ? (((uint64_t)1 << k) - 1) : 0;
    uint64_t next = 0, run_start = 0, count = 0, rpos = 0;
    size_t i;

    if ((uint64_t)rlen != (flips * k + 7) / 8)
        return "the remainder stream's length does not match the flip count";
    for (i = 0; i < qlen; i += 8) {
        uint64_t w = bsd_load(q + i, qlen - i);
        while (w) {
            uint64_t one = (uint64_t)i * 8 + BSD_CTZ(w);
            uint64_t quotient = one - run_start, gap, pos;
            w &= w - 1;
            run_start = one + 1;
            if (count == flips)
                return "the quotient stream holds more flips than the header says";
            if (quotient > max_q)
                return "a position lies beyond the body";
            gap = quotient << k;
            if (k) {
                size_t byte = (size_t)(rpos >> 3);
                gap |= (bsd_load(r + byte, rlen - byte) >> (rpos & 7)) & mask;
                rpos += k;
            }
            pos = next + gap;
            if (pos >= nbits || pos < next)
                return "a position lies beyond the body";
            body[pos >> 3] ^= (unsigned char)(1u << (pos & 7));
            next = pos + 1;
            count++;
        }
    }
    if (count != flips)
        return "the quotient stream holds fewer flips than the header says";
    if ((uint64_t)qlen != (flips ? (run_start - 1) / 8 + 1 : 0))
        return "bytes after the quotient stream's last flip";
    if (((flips * k) & 7) && (r[rlen - 1] >> ((flips * k) & 7)))
        return "non-zero padding after the remainder stream";
    return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Python wrappers                                                                       */
/* ------------------------------------------------------------------------------------ */

static int bsd_arg_k(PyObject *obj, unsigned *k)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (v > BSD_MAX_K) {
        PyErr_Format(PyExc_ValueError, "rice_k %llu above %d", v, BSD_MAX_K);
        return -1;
    }
    *k = (unsigned)v;
    return 0;
}

static int bsd_two_bodies(PyObject *const *args, Py_buffer *a, Py_buffer *b)
{
    if (PyObject_GetBuffer(args[0], a, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(args[1], b, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(a);
        return -1;
    }
    if (a->len != b->len) {
        PyErr_Format(PyExc_ValueError, "bodies of different sizes: %zd and %zd bytes", a->len, b->len);
        PyBuffer_Release(a);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

PyObject *bsd_py_count(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer a, b;
    uint64_t total;

    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "delta_count(base, target) takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (bsd_two_bodies(args, &a, &b) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    total = bsd_count(a.buf, b.buf, (size_t)a.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLongLong(total);
}

PyObject *bsd_py_encode(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer a, b, q, r;
    unsigned k;
    int64_t qbits;

    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "delta_encode(base, target, k, q, r) takes 5 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    if (bsd_arg_k(args[2], &k) < 0)
        return NULL;
    if (bsd_two_bodies(args, &a, &b) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[3], &q, PyBUF_WRITABLE) < 0)
        goto fail_q;
    if (PyObject_GetBuffer(args[4], &r, PyBUF_WRITABLE) < 0)
        goto fail_r;
    Py_BEGIN_ALLOW_THREADS
    memset(q.buf, 0, (size_t)q.len);
    memset(r.buf, 0, (size_t)r.len);
    qbits = bsd_encode(a.buf, b.buf, (size_t)a.len, k, q.buf, (size_t)q.len, r.buf, (size_t)r.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&r);
    PyBuffer_Release(&q);
    PyBuffer_Release(&b);
    PyBuffer_Release(&a);
    if (qbits < 0) {
        PyErr_SetString(PyExc_ValueError, "delta_encode: a stream buffer is too small");
        return NULL;
    }
    return PyLong_FromLongLong(qbits);
fail_r:
    PyBuffer_Release(&q);
fail_q:
    PyBuffer_Release(&b);
    PyBuffer_Release(&a);
    return NULL;
}

PyObject *bsd_py_apply(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer body, q, r;
    unsigned k;
    unsigned long long flips;
    const char *problem;

    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "delta_apply(body, q, r, k, flips) takes 5 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    if (bsd_arg_k(args[3], &k) < 0)
        return NULL;
    flips = PyLong_AsUnsignedLongLong(args[4]);
    if (flips == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &body, PyBUF_WRITABLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &q, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&body);
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &r, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&q);
        PyBuffer_Release(&body);
        return NULL;
    }
    if (flips > (unsigned long long)body.len * 8) {
        problem = "more flips than bits in the body";
    } else {
        Py_BEGIN_ALLOW_THREADS
        problem = bsd_apply(body.buf, (size_t)body.len, q.buf, (size_t)q.len, r.buf, (size_t)r.len, k,
                            (uint64_t)flips);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&r);
    PyBuffer_Release(&q);
    PyBuffer_Release(&body);
    if (problem != NULL) {
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    Py_RETURN_NONE;
}
