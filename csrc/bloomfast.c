/*
 * bloomswarm.common._bloomfast: the optional C fast path of bloomswarm.
 *
 * Implements, bit for bit, docs/format.md: key encoding, MurmurHash3_x64_128
 * (H = h2 << 64 | h1) and the probing of the blocked-512 (layout 1) and standard
 * Kirsch-Mitzenmacher (layout 2) layouts.
 *
 * Python interface (called by the bloomswarm package):
 *
 *   class Probe:                      base type, meant to be subclassed from Python
 *       Probe()                       starts unbound
 *       _bind(body, layout, seed, k, num_bits)   hold a read-only buffer on body
 *       _unbind()                     release it (idempotent; dealloc does it too)
 *       key in probe                  one lookup (ValueError "filter is closed" if unbound)
 *       _contains_u64(keys, out)      keys: C-contiguous 8-byte integer buffer,
 *                                     out: writable buffer of len(keys) bytes (1/0)
 *       _contains_keys(seq, out)      seq: sequence of bytes/str/int keys, out as above
 *
 *   add_u64(body, layout, seed, k, num_bits, keys)   insert a uint64/int64 buffer
 *   add_keys(body, layout, seed, k, num_bits, seq)   insert a sequence of keys
 *   murmur3_x64_128(data, seed) -> (h1, h2)          unsigned, = mmh3.hash64(..., signed=False)
 *   delta_count / delta_encode / delta_apply          the delta coder, in csrc/delta.c
 *
 * Keys (docs/format.md): bytes and its subclasses, bytearray and memoryview as they are
 * (a non-contiguous memoryview raises BufferError); str and subclasses as UTF-8 (a lone
 * surrogate raises UnicodeEncodeError); int and subclasses, bool included, as 8 bytes
 * little-endian two's complement (OverflowError outside [-2**63, 2**63)); anything else
 * raises TypeError.
 *
 * add_keys raises the same errors as `in` for a bad key (TypeError, OverflowError,
 * UnicodeEncodeError); every key before the bad one has then been inserted and none
 * after it. _contains_keys leaves out[] unspecified past a bad key.
 *
 * The batch calls (_contains_u64, add_u64) release the GIL; they and _contains_keys
 * hold their own buffer export on the body while they run, so a concurrent _unbind()
 * cannot pull the memory from under them (an mmap cannot be closed meanwhile).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* ------------------------------------------------------------------------------------ */
/* MurmurHash3_x64_128 (Austin Appleby, public domain)                                   */
/* ------------------------------------------------------------------------------------ */
/* After the reference implementation in smhasher (MurmurHash3.cpp). Input is read with
 * memcpy, so unaligned keys are fine. Produces (h1, h2) as the reference does, which is
 * mmh3.hash64(key, seed, signed=False); H = h2 << 64 | h1 = mmh3.hash128(key, seed). */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "bloomswarm _bloomfast assumes a little-endian host"
#endif
#elif !defined(_WIN32) && !defined(__x86_64__) && !defined(__aarch64__) && !defined(__i386__)
#error "cannot tell the host byte order; bloomswarm _bloomfast assumes little-endian"
#endif

#if defined(__GNUC__) || defined(__clang__)
#define BSW_INLINE static inline __attribute__((always_inline))
#define BSW_FALLTHROUGH __attribute__((fallthrough))
#else
#define BSW_INLINE static inline
#define BSW_FALLTHROUGH ((void)0)
#endif

#define BSW_C1 0x87c37b91114253d5ULL
#define BSW_C2 0x4cf5ad432745937fULL

BSW_INLINE uint64_t bsw_rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

BSW_INLINE uint64_t bsw_fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

BSW_INLINE uint64_t bsw_load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The general hash, for any length. */
BSW_INLINE void bsw_murmur3_x64_128(const void *key, size_t len, uint32_t seed,
                                    uint64_t *out_h1, uint64_t *out_h2)
{
    const uint8_t *data = (const uint8_t *)key;
    const size_t nblocks = len / 16;
    uint64_t h1 = seed, h2 = seed;
    uint64_t k1, k2;
    size_t i;

    for (i = 0; i < nblocks; i++) {
        k1 = bsw_load64(data + i * 16);
        k2 = bsw_load64(data + i * 16 + 8);

        k1 *= BSW_C1; k1 = bsw_rotl64(k1, 31); k1 *= BSW_C2; h1 ^= k1;
        h1 = bsw_rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;

        k2 *= BSW_C2; k2 = bsw_rotl64(k2, 33); k2 *= BSW_C1; h2 ^= k2;
        h2 = bsw_rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
    }

    {
        const uint8_t *tail = data + nblocks * 16;
        k1 = 0;
        k2 = 0;
        switch (len & 15) {
        case 15: k2 ^= ((uint64_t)tail[14]) << 48; BSW_FALLTHROUGH;
        case 14: k2 ^= ((uint64_t)tail[13]) << 40; BSW_FALLTHROUGH;
        case 13: k2 ^= ((uint64_t)tail[12]) << 32; BSW_FALLTHROUGH;
        case 12: k2 ^= ((uint64_t)tail[11]) << 24; BSW_FALLTHROUGH;
        case 11: k2 ^= ((uint64_t)tail[10]) << 16; BSW_FALLTHROUGH;
        case 10: k2 ^= ((uint64_t)tail[9]) << 8; BSW_FALLTHROUGH;
        case 9:
            k2 ^= ((uint64_t)tail[8]);
            k2 *= BSW_C2; k2 = bsw_rotl64(k2, 33); k2 *= BSW_C1; h2 ^= k2;
            BSW_FALLTHROUGH;
        case 8: k1 ^= ((uint64_t)tail[7]) << 56; BSW_FALLTHROUGH;
        case 7: k1 ^= ((uint64_t)tail[6]) << 48; BSW_FALLTHROUGH;
        case 6: k1 ^= ((uint64_t)tail[5]) << 40; BSW_FALLTHROUGH;
        case 5: k1 ^= ((uint64_t)tail[4]) << 32; BSW_FALLTHROUGH;
        case 4: k1 ^= ((uint64_t)tail[3]) << 24; BSW_FALLTHROUGH;
        case 3: k1 ^= ((uint64_t)tail[2]) << 16; BSW_FALLTHROUGH;
        case 2: k1 ^= ((uint64_t)tail[1]) << 8; BSW_FALLTHROUGH;
        case 1:
            k1 ^= ((uint64_t)tail[0]);
            k1 *= BSW_C1; k1 = bsw_rotl64(k1, 31); k1 *= BSW_C2; h1 ^= k1;
            break;
        default:
            break;
        }
    }

    h1 ^= (uint64_t)len;
    h2 ^= (uint64_t)len;
    h1 += h2;
    h2 += h1;
    h1 = bsw_fmix64(h1);
    h2 = bsw_fmix64(h2);
    h1 += h2;
    h2 += h1;
    *out_h1 = h1;
    *out_h2 = h2;
}

/* The same hash specialised for exactly 8 bytes whose little-endian value is `v`
 * (an int key or one element of a uint64 array): no blocks, an 8-byte tail. */
BSW_INLINE void bsw_murmur3_u64(uint64_t v, uint32_t seed, uint64_t *out_h1, uint64_t *out_h2)
{
    uint64_t h1 = seed, h2 = seed;
    uint64_t k1 = v;
    k1 *= BSW_C1; k1 = bsw_rotl64(k1, 31); k1 *= BSW_C2; h1 ^= k1;
    h1 ^= 8;
    h2 ^= 8;
    h1 += h2;
    h2 += h1;
    h1 = bsw_fmix64(h1);
    h2 = bsw_fmix64(h2);
    h1 += h2;
    h2 += h1;
    *out_h1 = h1;
    *out_h2 = h2;
}


#if !defined(__SIZEOF_INT128__)
#error "bloomswarm _bloomfast needs a compiler with unsigned __int128 (gcc or clang)"
#endif

typedef unsigned __int128 bsw_u128;

#if defined(__GNUC__) || defined(__clang__)
#define BSW_LIKELY(x) __builtin_expect(!!(x), 1)
#define BSW_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define BSW_PREFETCH_R(p) __builtin_prefetch((p), 0, 3)
#define BSW_PREFETCH_W(p) __builtin_prefetch((p), 1, 3)
#define BSW_NOINLINE __attribute__((noinline))
#else
#define BSW_LIKELY(x) (x)
#define BSW_UNLIKELY(x) (x)
#define BSW_PREFETCH_R(p) ((void)(p))
#define BSW_PREFETCH_W(p) ((void)(p))
#define BSW_NOINLINE
#endif

/* ------------------------------------------------------------------------------------ */
/* Filter parameters                                                                     */
/* ------------------------------------------------------------------------------------ */

#define BSW_LAYOUT_BLOCKED 1
#define BSW_LAYOUT_STANDARD 2
#define BSW_MAX_PROBES_BLOCKED 10
#define BSW_MAX_PROBES_STANDARD 32
#define BSW_MAX_BLOCKS 0xFFFFFFFFULL

typedef struct {
    int layout;
    int k;
    uint32_t seed;
    uint64_t num_bits;
    uint64_t nblocks; /* blocked: num_bits / 512 */
    /* standard: Lemire's fastmod constant M = floor((2^128 - 1) / num_bits) + 1, so that
     * a % num_bits == ((M * a mod 2^128) * num_bits) >> 128 for every 64-bit a. */
    uint64_t m_lo, m_hi;
} bsw_params;

BSW_INLINE uint64_t bsw_fastmod(uint64_t a, const bsw_params *p)
{
    bsw_u128 t = (bsw_u128)p->m_lo * a;
    uint64_t low_lo = (uint64_t)t;
    uint64_t low_hi = (uint64_t)(t >> 64) + p->m_hi * a; /* (M * a) mod 2^128 */
    bsw_u128 u = (bsw_u128)low_lo * p->num_bits;
    bsw_u128 v = (bsw_u128)low_hi * p->num_bits + (uint64_t)(u >> 64);
    return (uint64_t)(v >> 64);
}

/* Fill the derived fields; the caller has validated the others. */
static void bsw_params_derive(bsw_params *p)
{
    p->nblocks = p->num_bits / 512;
    if (p->layout == BSW_LAYOUT_STANDARD) {
        bsw_u128 m = ~(bsw_u128)0 / p->num_bits + 1;
        p->m_lo = (uint64_t)m;
        p->m_hi = (uint64_t)(m >> 64);
    } else {
        p->m_lo = p->m_hi = 0;
    }
}

/* Read a non-negative integer argument; ValueError when negative or above `max`,
 * TypeError when it is not an integer. */
static int bsw_arg_u64(PyObject *o, const char *name, uint64_t max, uint64_t *out)
{
    PyObject *idx;
    long long sv;
    int overflow = 0;
    unsigned long long uv;

    if (PyFloat_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not float", name);
        return -1;
    }
    idx = PyNumber_Index(o);
    if (idx == NULL)
        return -1;
    sv = PyLong_AsLongLongAndOverflow(idx, &overflow);
    if (sv == -1 && PyErr_Occurred()) {
        Py_DECREF(idx);
        return -1;
    }
    if (overflow < 0 || (overflow == 0 && sv < 0)) {
        Py_DECREF(idx);
        PyErr_Format(PyExc_ValueError, "%s must be non-negative", name);
        return -1;
    }
    if (overflow == 0) {
        uv = (unsigned long long)sv;
    } else {
        uv = PyLong_AsUnsignedLongLong(idx);
        if (uv == (unsigned long long)-1 && PyErr_Occurred()) {
            Py_DECREF(idx);
            if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                return -1;
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s is too large", name);
            return -1;
        }
    }
    Py_DECREF(idx);
    if ((uint64_t)uv > max) {
        PyErr_Format(PyExc_ValueError, "%s must be at most %llu, got %llu", name,
                     (unsigned long long)max, uv);
        return -1;
    }
    *out = (uint64_t)uv;
    return 0;
}

/* Parse (layout, seed, k, num_bits) and check them against docs/format.md. */
static int bsw_parse_params(PyObject *const *args, bsw_params *p)
{
    uint64_t layout, seed, k, num_bits;

    if (bsw_arg_u64(args[0], "layout", UINT64_MAX, &layout) < 0 ||
        bsw_arg_u64(args[1], "seed", 0xFFFFFFFFULL, &seed) < 0 ||
        bsw_arg_u64(args[2], "k", UINT64_MAX, &k) < 0 ||
        bsw_arg_u64(args[3], "num_bits", UINT64_MAX, &num_bits) < 0)
        return -1;

    if (layout == BSW_LAYOUT_BLOCKED) {
        if (num_bits == 0 || num_bits % 512) {
            PyErr_Format(PyExc_ValueError,
                         "blocked layout needs num_bits a positive multiple of 512, got %llu",
                         (unsigned long long)num_bits);
            return -1;
        }
        if (num_bits / 512 > BSW_MAX_BLOCKS) {
            PyErr_Format(PyExc_ValueError, "blocked layout allows at most %llu blocks, got %llu",
                         (unsigned long long)BSW_MAX_BLOCKS, (unsigned long long)(num_bits / 512));
            return -1;
        }
        if (k < 1 || k > BSW_MAX_PROBES_BLOCKED) {
            PyErr_Format(PyExc_ValueError, "blocked layout needs 1..%d probes, got %llu",
                         BSW_MAX_PROBES_BLOCKED, (unsigned long long)k);
            return -1;
        }
    } else if (layout == BSW_LAYOUT_STANDARD) {
        if (num_bits == 0 || num_bits % 64) {
            PyErr_Format(PyExc_ValueError,
                         "standard layout needs num_bits a positive multiple of 64, got %llu",
                         (unsigned long long)num_bits);
            return -1;
        }
        if (k < 1 || k > BSW_MAX_PROBES_STANDARD) {
            PyErr_Format(PyExc_ValueError, "standard layout needs 1..%d probes, got %llu",
                         BSW_MAX_PROBES_STANDARD, (unsigned long long)k);
            return -1;
        }
    } else {
        PyErr_Format(PyExc_ValueError, "unknown layout id %llu (expected 1 or 2)",
                     (unsigned long long)layout);
        return -1;
    }
    p->layout = (int)layout;
    p->k = (int)k;
    p->seed = (uint32_t)seed;
    p->num_bits = num_bits;
    bsw_params_derive(p);
    return 0;
}

/* Get a buffer on a filter body and check its length is num_bits / 8. */
static int bsw_get_body(PyObject *body, Py_buffer *view, int writable, const bsw_params *p)
{
    if (PyObject_GetBuffer(body, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len < 0 || (uint64_t)view->len != p->num_bits / 8) {
        PyErr_Format(PyExc_ValueError, "body is %zd bytes, expected num_bits / 8 = %llu",
                     view->len, (unsigned long long)(p->num_bits / 8));
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Probing                                                                               */
/* ------------------------------------------------------------------------------------ */

BSW_INLINE const uint8_t *bsw_block(const uint8_t *body, const bsw_params *p, uint64_t h2)
{
    return body + (((h2 >> 32) * p->nblocks) >> 32) * 64;
}

/* Blocked: bit_i = (H >> 9i) & 511 inside the block; i = 7 spans h1 bit 63 and h2 bits 0..7. */
BSW_INLINE int bsw_blocked_test(const uint8_t *blk, uint64_t h1, uint64_t h2, int k)
{
    bsw_u128 H = ((bsw_u128)h2 << 64) | h1;
    int i;
    for (i = 0; i < k; i++) {
        unsigned b = (unsigned)H & 511u;
        if (!(blk[b >> 3] & (1u << (b & 7))))
            return 0;
        H >>= 9;
    }
    return 1;
}

/* The same test without early exit, for the batch loops: no mispredicted branch when a
 * mix of present and absent keys is looked up. */
BSW_INLINE int bsw_blocked_test_nb(const uint8_t *blk, uint64_t h1, uint64_t h2, int k)
{
    bsw_u128 H = ((bsw_u128)h2 << 64) | h1;
    uint64_t ok = 1;
    int i;
    for (i = 0; i < k; i++) {
        unsigned b = (unsigned)H & 511u;
        ok &= bsw_load64(blk + ((b >> 6) << 3)) >> (b & 63);
        H >>= 9;
    }
    return (int)(ok & 1);
}

BSW_INLINE void bsw_blocked_set(uint8_t *blk, uint64_t h1, uint64_t h2, int k)
{
    bsw_u128 H = ((bsw_u128)h2 << 64) | h1;
    int i;
    for (i = 0; i < k; i++) {
        unsigned b = (unsigned)H & 511u;
        blk[b >> 3] |= (uint8_t)(1u << (b & 7));
        H >>= 9;
    }
}

/* Standard: index_i = (h1 + i * h2 mod 2^64) mod num_bits. */
BSW_INLINE int bsw_standard_test(const uint8_t *body, const bsw_params *p, uint64_t h1,
                                 uint64_t h2)
{
    uint64_t x = h1;
    int i;
    for (i = 0; i < p->k; i++) {
        uint64_t b = bsw_fastmod(x, p);
        if (!(body[b >> 3] & (1u << (b & 7))))
            return 0;
        x += h2;
    }
    return 1;
}

BSW_INLINE void bsw_standard_set(uint8_t *body, const bsw_params *p, uint64_t h1, uint64_t h2)
{
    uint64_t x = h1;
    int i;
    for (i = 0; i < p->k; i++) {
        uint64_t b = bsw_fastmod(x, p);
        body[b >> 3] |= (uint8_t)(1u << (b & 7));
        x += h2;
    }
}

BSW_INLINE int bsw_test(const uint8_t *body, const bsw_params *p, uint64_t h1, uint64_t h2)
{
    if (p->layout == BSW_LAYOUT_BLOCKED)
        return bsw_blocked_test(bsw_block(body, p, h2), h1, h2, p->k);
    return bsw_standard_test(body, p, h1, h2);
}

BSW_INLINE void bsw_set(uint8_t *body, const bsw_params *p, uint64_t h1, uint64_t h2)
{
    if (p->layout == BSW_LAYOUT_BLOCKED)
        bsw_blocked_set((uint8_t *)bsw_block(body, p, h2), h1, h2, p->k);
    else
        bsw_standard_set(body, p, h1, h2);
}

/* Prefetch what a key's test or insert touches first: its block (blocked) or its
 * first probes (standard). */
BSW_INLINE void bsw_prefetch(const uint8_t *body, const bsw_params *p, uint64_t h1, uint64_t h2,
                             int for_write)
{
    if (p->layout == BSW_LAYOUT_BLOCKED) {
        const uint8_t *blk = bsw_block(body, p, h2);
        if (for_write)
            BSW_PREFETCH_W(blk);
        else
            BSW_PREFETCH_R(blk);
    } else {
        /* A lookup of a present key and every insert touch all k lines; an absent key
         * usually stops after one or two. Prefetch up to 2 (lookups) or 4 (inserts). */
        int n = for_write ? 4 : 2, i;
        uint64_t x = h1;
        if (n > p->k)
            n = p->k;
        for (i = 0; i < n; i++) {
            const uint8_t *q = body + (bsw_fastmod(x, p) >> 3);
            if (for_write)
                BSW_PREFETCH_W(q);
            else
                BSW_PREFETCH_R(q);
            x += h2;
        }
    }
}

/* ------------------------------------------------------------------------------------ */
/* Batch loops over 8-byte integer keys (run without the GIL)                            */
/* ------------------------------------------------------------------------------------ */

/* Keys are hashed BSW_AHEAD keys before they are tested, and their first cache line is
 * prefetched meanwhile, so up to BSW_AHEAD memory accesses are in flight. */
#ifndef BSW_AHEAD
#define BSW_AHEAD 16
#endif

typedef struct {
    uint64_t h1, h2;
} bsw_hash;

BSW_INLINE void bsw_u64_loop(uint8_t *body, const bsw_params *p, const uint8_t *keys,
                             uint8_t *out, Py_ssize_t n, int insert, int layout, int k)
{
    bsw_hash ring[BSW_AHEAD];
    bsw_params lp = *p;
    Py_ssize_t i, pre = n < BSW_AHEAD ? n : BSW_AHEAD;

    /* layout, insert and (blocked) k are constants after inlining: the branches on them
     * fold away and the probe loops unroll. */
    lp.layout = layout;
    lp.k = k;
    for (i = 0; i < pre; i++) {
        bsw_murmur3_u64(bsw_load64(keys + 8 * i), lp.seed, &ring[i].h1, &ring[i].h2);
        bsw_prefetch(body, &lp, ring[i].h1, ring[i].h2, insert);
    }
    for (i = 0; i < n; i++) {
        bsw_hash *s = &ring[i & (BSW_AHEAD - 1)];
        if (insert)
            bsw_set(body, &lp, s->h1, s->h2);
        else if (layout == BSW_LAYOUT_BLOCKED)
            out[i] = (uint8_t)bsw_blocked_test_nb(bsw_block(body, &lp, s->h2), s->h1, s->h2, k);
        else
            out[i] = (uint8_t)bsw_standard_test(body, &lp, s->h1, s->h2);
        if (i + BSW_AHEAD < n) {
            bsw_murmur3_u64(bsw_load64(keys + 8 * (i + BSW_AHEAD)), lp.seed, &s->h1, &s->h2);
            bsw_prefetch(body, &lp, s->h1, s->h2, insert);
        }
    }
}

#define BSW_BLOCKED_K_CASES(CALL)                                                             \
    switch (p->k) {                                                                          \
    case 1: CALL(1); break;                                                                  \
    case 2: CALL(2); break;                                                                  \
    case 3: CALL(3); break;                                                                  \
    case 4: CALL(4); break;                                                                  \
    case 5: CALL(5); break;                                                                  \
    case 6: CALL(6); break;                                                                  \
    case 7: CALL(7); break;                                                                  \
    case 8: CALL(8); break;                                                                  \
    case 9: CALL(9); break;                                                                  \
    default: CALL(10); break;                                                                \
    }

static void bsw_contains_u64_blocked(const uint8_t *body, const bsw_params *p,
                                     const uint8_t *keys, uint8_t *out, Py_ssize_t n)
{
#define BSW_CALL(K) bsw_u64_loop((uint8_t *)body, p, keys, out, n, 0, BSW_LAYOUT_BLOCKED, K)
    BSW_BLOCKED_K_CASES(BSW_CALL)
#undef BSW_CALL
}

static void bsw_contains_u64_standard(const uint8_t *body, const bsw_params *p,
                                      const uint8_t *keys, uint8_t *out, Py_ssize_t n)
{
    bsw_u64_loop((uint8_t *)body, p, keys, out, n, 0, BSW_LAYOUT_STANDARD, p->k);
}

static void bsw_add_u64_blocked(uint8_t *body, const bsw_params *p, const uint8_t *keys,
                                Py_ssize_t n)
{
#define BSW_CALL(K) bsw_u64_loop(body, p, keys, NULL, n, 1, BSW_LAYOUT_BLOCKED, K)
    BSW_BLOCKED_K_CASES(BSW_CALL)
#undef BSW_CALL
}

static void bsw_add_u64_standard(uint8_t *body, const bsw_params *p, const uint8_t *keys,
                                 Py_ssize_t n)
{
    bsw_u64_loop(body, p, keys, NULL, n, 1, BSW_LAYOUT_STANDARD, p->k);
}

/* Release the GIL only when the loop is long enough to repay it. */
#define BSW_NOGIL_MIN 512

/* ------------------------------------------------------------------------------------ */
/* Key encoding and hashing                                                              */
/* ------------------------------------------------------------------------------------ */

static BSW_NOINLINE int bsw_hash_key_slow(PyObject *key, uint32_t seed, uint64_t *h1,
                                          uint64_t *h2)
{
    if (PyBytes_Check(key)) {
        bsw_murmur3_x64_128(PyBytes_AS_STRING(key), (size_t)PyBytes_GET_SIZE(key), seed, h1, h2);
        return 0;
    }
    if (PyUnicode_Check(key)) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(key, &len);
        if (s == NULL)
            return -1;
        bsw_murmur3_x64_128(s, (size_t)len, seed, h1, h2);
        return 0;
    }
    if (PyLong_Check(key)) { /* int subclasses, bool */
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (overflow) {
            PyErr_SetString(PyExc_OverflowError,
                            "int key is outside the 64-bit signed range [-2**63, 2**63)");
            return -1;
        }
        if (v == -1 && PyErr_Occurred())
            return -1;
        bsw_murmur3_u64((uint64_t)v, seed, h1, h2);
        return 0;
    }
    if (PyByteArray_Check(key) || PyMemoryView_Check(key)) {
        Py_buffer view;
        if (PyObject_GetBuffer(key, &view, PyBUF_SIMPLE) < 0)
            return -1;
        bsw_murmur3_x64_128(view.buf, (size_t)view.len, seed, h1, h2);
        PyBuffer_Release(&view);
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "unsupported key type %.200s: use bytes, str or int",
                 Py_TYPE(key)->tp_name);
    return -1;
}

/* Hash one key per docs/format.md. Exact bytes, str and int take the inline fast path. */
BSW_INLINE int bsw_hash_key(PyObject *key, uint32_t seed, uint64_t *h1, uint64_t *h2)
{
    if (PyBytes_CheckExact(key)) {
        bsw_murmur3_x64_128(PyBytes_AS_STRING(key), (size_t)PyBytes_GET_SIZE(key), seed, h1, h2);
        return 0;
    }
    if (PyUnicode_CheckExact(key)) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(key, &len);
        if (BSW_UNLIKELY(s == NULL))
            return -1;
        bsw_murmur3_x64_128(s, (size_t)len, seed, h1, h2);
        return 0;
    }
    if (PyLong_CheckExact(key)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (BSW_LIKELY(!overflow && !(v == -1 && PyErr_Occurred()))) {
            bsw_murmur3_u64((uint64_t)v, seed, h1, h2);
            return 0;
        }
    }
    return bsw_hash_key_slow(key, seed, h1, h2);
}

/* ------------------------------------------------------------------------------------ */
/* Buffer helpers for the batch calls                                                    */
/* ------------------------------------------------------------------------------------ */

/* A C-contiguous buffer of 8-byte native integers (numpy uint64/int64, array('Q'), ...). */
static int bsw_get_u64_keys(PyObject *keys, Py_buffer *view, Py_ssize_t *n)
{
    const char *f;
    if (PyObject_GetBuffer(keys, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (view->itemsize != 8 || f[0] == '\0' || f[1] != '\0' || strchr("qQlLnN", f[0]) == NULL) {
        PyErr_Format(PyExc_ValueError,
                     "keys must be a C-contiguous buffer of 8-byte integers "
                     "(uint64/int64), got format '%.20s' with itemsize %zd",
                     view->format ? view->format : "B", view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    *n = view->len / 8;
    return 0;
}

static int bsw_get_out(PyObject *out, Py_buffer *view, Py_ssize_t n)
{
    if (PyObject_GetBuffer(out, view, PyBUF_WRITABLE) < 0)
        return -1;
    if (view->len != n) {
        PyErr_Format(PyExc_ValueError, "out is %zd bytes, expected one byte per key (%zd)",
                     view->len, n);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Probe                                                                                 */
/* ------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    int bound;
    const uint8_t *body;
    bsw_params p;
    Py_buffer view;
} ProbeObject;

static PyTypeObject ProbeType;

static void probe_release(ProbeObject *self)
{
    if (self->bound) {
        self->bound = 0;
        self->body = NULL;
        PyBuffer_Release(&self->view);
    }
}

/* Probe() takes no arguments; a subclass's constructor may take any (its own __init__
 * deals with them), so only the exact type checks. There is no tp_init, so that the
 * __init__ of a Python base later in a subclass's MRO is the one that runs. */
static PyObject *probe_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (type == &ProbeType &&
        (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0))) {
        PyErr_SetString(PyExc_TypeError, "Probe() takes no arguments");
        return NULL;
    }
    return type->tp_alloc(type, 0); /* zeroed: starts unbound */
}

static void probe_dealloc(PyObject *self)
{
    probe_release((ProbeObject *)self);
    Py_TYPE(self)->tp_free(self);
}

static int probe_closed(void)
{
    PyErr_SetString(PyExc_ValueError, "filter is closed");
    return -1;
}

static PyObject *probe_bind(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    ProbeObject *self = (ProbeObject *)op;
    bsw_params p;
    Py_buffer view;

    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError,
                     "_bind(body, layout, seed, k, num_bits) takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    if (bsw_parse_params(args + 1, &p) < 0)
        return NULL;
    if (bsw_get_body(args[0], &view, 0, &p) < 0)
        return NULL;
    probe_release(self);
    self->view = view;
    self->body = (const uint8_t *)view.buf;
    self->p = p;
    self->bound = 1;
    Py_RETURN_NONE;
}

static PyObject *probe_unbind(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    probe_release((ProbeObject *)op);
    Py_RETURN_NONE;
}

static int probe_contains(PyObject *op, PyObject *key)
{
    ProbeObject *self = (ProbeObject *)op;
    uint64_t h1, h2;

    if (BSW_UNLIKELY(!self->bound))
        return probe_closed();
    if (BSW_UNLIKELY(bsw_hash_key(key, self->p.seed, &h1, &h2) < 0))
        return -1;
    if (BSW_UNLIKELY(!self->bound)) /* a buffer exporter ran Python code that unbound us */
        return probe_closed();
    return bsw_test(self->body, &self->p, h1, h2);
}

/* Take a private export of the bound body so that the memory stays valid for the whole
 * call even if another thread (or Python code run by a key) unbinds the probe. */
static int probe_hold(ProbeObject *self, Py_buffer *hold, bsw_params *p)
{
    if (!self->bound)
        return probe_closed();
    if (self->view.obj == NULL) {
        PyErr_SetString(PyExc_ValueError, "the filter body has no owner object");
        return -1;
    }
    if (PyObject_GetBuffer(self->view.obj, hold, PyBUF_SIMPLE) < 0)
        return -1;
    if (hold->buf != self->view.buf || hold->len != self->view.len) {
        PyBuffer_Release(hold);
        PyErr_SetString(PyExc_ValueError, "the filter body changed since _bind()");
        return -1;
    }
    *p = self->p;
    return 0;
}

static PyObject *probe_contains_u64(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    ProbeObject *self = (ProbeObject *)op;
    Py_buffer hold, kv, ov;
    bsw_params p;
    Py_ssize_t n;

    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "_contains_u64(keys, out) takes 2 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    if (probe_hold(self, &hold, &p) < 0)
        return NULL;
    if (bsw_get_u64_keys(args[0], &kv, &n) < 0) {
        PyBuffer_Release(&hold);
        return NULL;
    }
    if (bsw_get_out(args[1], &ov, n) < 0) {
        PyBuffer_Release(&kv);
        PyBuffer_Release(&hold);
        return NULL;
    }
    {
        PyThreadState *ts = n >= BSW_NOGIL_MIN ? PyEval_SaveThread() : NULL;
        if (p.layout == BSW_LAYOUT_BLOCKED)
            bsw_contains_u64_blocked(hold.buf, &p, kv.buf, ov.buf, n);
        else
            bsw_contains_u64_standard(hold.buf, &p, kv.buf, ov.buf, n);
        if (ts != NULL)
            PyEval_RestoreThread(ts);
    }
    PyBuffer_Release(&ov);
    PyBuffer_Release(&kv);
    PyBuffer_Release(&hold);
    Py_RETURN_NONE;
}

/* Keys of a Python sequence are hashed in chunks; a chunk's cache lines are prefetched
 * before any of its keys is tested or set. */
#define BSW_CHUNK 32

/* Hash up to BSW_CHUNK keys of `fast` from `start`. Returns how many were hashed; sets
 * *err when the key after them raised. */
static Py_ssize_t bsw_hash_chunk(PyObject *fast, Py_ssize_t start, Py_ssize_t n,
                                 const uint8_t *body, const bsw_params *p, int for_write,
                                 bsw_hash *hs, int *err)
{
    Py_ssize_t j, m = n - start < BSW_CHUNK ? n - start : BSW_CHUNK;
    *err = 0;
    for (j = 0; j < m; j++) {
        PyObject *key;
        int rc;
        if (start + j >= PySequence_Fast_GET_SIZE(fast)) { /* the list shrank under us */
            PyErr_SetString(PyExc_RuntimeError, "the key sequence changed size during the call");
            *err = 1;
            return j;
        }
        key = PySequence_Fast_GET_ITEM(fast, start + j);
        if (PyBytes_CheckExact(key) || PyUnicode_CheckExact(key) || PyLong_CheckExact(key)) {
            rc = bsw_hash_key(key, p->seed, &hs[j].h1, &hs[j].h2); /* runs no Python code */
        } else {
            Py_INCREF(key);
            rc = bsw_hash_key_slow(key, p->seed, &hs[j].h1, &hs[j].h2);
            Py_DECREF(key);
        }
        if (rc < 0) {
            *err = 1;
            return j;
        }
        bsw_prefetch(body, p, hs[j].h1, hs[j].h2, for_write);
    }
    return m;
}

static PyObject *probe_contains_keys(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    ProbeObject *self = (ProbeObject *)op;
    Py_buffer hold, ov;
    bsw_params p;
    PyObject *fast;
    Py_ssize_t n, i, j, m;
    bsw_hash hs[BSW_CHUNK];
    uint8_t *out;
    int err = 0;

    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "_contains_keys(seq, out) takes 2 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    if (probe_hold(self, &hold, &p) < 0)
        return NULL;
    fast = PySequence_Fast(args[0], "keys must be a sequence");
    if (fast == NULL) {
        PyBuffer_Release(&hold);
        return NULL;
    }
    n = PySequence_Fast_GET_SIZE(fast);
    if (bsw_get_out(args[1], &ov, n) < 0) {
        Py_DECREF(fast);
        PyBuffer_Release(&hold);
        return NULL;
    }
    out = ov.buf;
    for (i = 0; i < n && !err; i += m) {
        m = bsw_hash_chunk(fast, i, n, hold.buf, &p, 0, hs, &err);
        for (j = 0; j < m; j++)
            out[i + j] = (uint8_t)bsw_test(hold.buf, &p, hs[j].h1, hs[j].h2);
    }
    PyBuffer_Release(&ov);
    Py_DECREF(fast);
    PyBuffer_Release(&hold);
    if (err)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef probe_methods[] = {
    {"_bind", (PyCFunction)(void (*)(void))probe_bind, METH_FASTCALL,
     "_bind(body, layout, seed, k, num_bits)\n--\n\n"
     "Hold a read-only buffer on body (num_bits/8 bytes) and the filter parameters.\n"
     "Re-binding releases the previous buffer."},
    {"_unbind", probe_unbind, METH_NOARGS,
     "_unbind()\n--\n\nRelease the body buffer (idempotent); lookups then raise ValueError."},
    {"_contains_u64", (PyCFunction)(void (*)(void))probe_contains_u64, METH_FASTCALL,
     "_contains_u64(keys, out)\n--\n\n"
     "Look up each 8-byte integer of keys (uint64/int64 buffer); write 1 or 0 into out\n"
     "(a writable buffer of len(keys) bytes, e.g. a numpy bool array). Releases the GIL."},
    {"_contains_keys", (PyCFunction)(void (*)(void))probe_contains_keys, METH_FASTCALL,
     "_contains_keys(seq, out)\n--\n\n"
     "Look up each bytes/str/int key of seq; write 1 or 0 into out (len(seq) bytes)."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods probe_as_sequence = {
    .sq_contains = probe_contains,
};

static PyTypeObject ProbeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bloomswarm.common._bloomfast.Probe",
    .tp_basicsize = sizeof(ProbeObject),
    .tp_itemsize = 0,
    .tp_dealloc = probe_dealloc,
    .tp_as_sequence = &probe_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Probe()\n--\n\n"
              "Lookups in a Bloom filter body (docs/format.md). Subclass it; bind a body with\n"
              "_bind(body, layout, seed, k, num_bits), then use `key in probe`.",
    .tp_methods = probe_methods,
    .tp_new = probe_new,
};

/* ------------------------------------------------------------------------------------ */
/* Module functions                                                                      */
/* ------------------------------------------------------------------------------------ */

static PyObject *mod_add_u64(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    bsw_params p;
    Py_buffer bv, kv;
    Py_ssize_t n;

    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError,
                     "add_u64(body, layout, seed, k, num_bits, keys) takes 6 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    if (bsw_parse_params(args + 1, &p) < 0)
        return NULL;
    if (bsw_get_body(args[0], &bv, 1, &p) < 0)
        return NULL;
    if (bsw_get_u64_keys(args[5], &kv, &n) < 0) {
        PyBuffer_Release(&bv);
        return NULL;
    }
    {
        PyThreadState *ts = n >= BSW_NOGIL_MIN ? PyEval_SaveThread() : NULL;
        if (p.layout == BSW_LAYOUT_BLOCKED)
            bsw_add_u64_blocked(bv.buf, &p, kv.buf, n);
        else
            bsw_add_u64_standard(bv.buf, &p, kv.buf, n);
        if (ts != NULL)
            PyEval_RestoreThread(ts);
    }
    PyBuffer_Release(&kv);
    PyBuffer_Release(&bv);
    Py_RETURN_NONE;
}

static PyObject *mod_add_keys(PyObject *Py_UNUSED(module), PyObject *const *args,
                              Py_ssize_t nargs)
{
    bsw_params p;
    Py_buffer bv;
    PyObject *fast;
    Py_ssize_t n, i, j, m;
    bsw_hash hs[BSW_CHUNK];
    int err = 0;

    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError,
                     "add_keys(body, layout, seed, k, num_bits, seq) takes 6 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    if (bsw_parse_params(args + 1, &p) < 0)
        return NULL;
    if (bsw_get_body(args[0], &bv, 1, &p) < 0)
        return NULL;
    fast = PySequence_Fast(args[5], "keys must be a sequence");
    if (fast == NULL) {
        PyBuffer_Release(&bv);
        return NULL;
    }
    n = PySequence_Fast_GET_SIZE(fast);
    for (i = 0; i < n && !err; i += m) {
        /* the keys hashed before a bad one are still inserted: the documented behaviour */
        m = bsw_hash_chunk(fast, i, n, bv.buf, &p, 1, hs, &err);
        for (j = 0; j < m; j++)
            bsw_set(bv.buf, &p, hs[j].h1, hs[j].h2);
    }
    Py_DECREF(fast);
    PyBuffer_Release(&bv);
    if (err)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *mod_murmur3(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    uint64_t seed, h1, h2;

    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "murmur3_x64_128(data, seed) takes 2 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    if (bsw_arg_u64(args[1], "seed", 0xFFFFFFFFULL, &seed) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    bsw_murmur3_x64_128(view.buf, (size_t)view.len, (uint32_t)seed, &h1, &h2);
    PyBuffer_Release(&view);
    return Py_BuildValue("(KK)", (unsigned long long)h1, (unsigned long long)h2);
}

/* The delta coder, csrc/delta.c (linked into this module). */
PyObject *bsd_py_count(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *bsd_py_encode(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *bsd_py_apply(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

static PyMethodDef module_methods[] = {
    {"add_u64", (PyCFunction)(void (*)(void))mod_add_u64, METH_FASTCALL,
     "add_u64(body, layout, seed, k, num_bits, keys)\n--\n\n"
     "Insert each 8-byte integer of keys (uint64/int64 buffer) into the writable body.\n"
     "Releases the GIL."},
    {"add_keys", (PyCFunction)(void (*)(void))mod_add_keys, METH_FASTCALL,
     "add_keys(body, layout, seed, k, num_bits, seq)\n--\n\n"
     "Insert each bytes/str/int key of seq into the writable body. A bad key raises\n"
     "TypeError, OverflowError or UnicodeEncodeError after every key before it has been\n"
     "inserted."},
    {"murmur3_x64_128", (PyCFunction)(void (*)(void))mod_murmur3, METH_FASTCALL,
     "murmur3_x64_128(data, seed)\n--\n\n"
     "Return (h1, h2), unsigned: the same as mmh3.hash64(data, seed, signed=False)."},
    {"delta_count", (PyCFunction)(void (*)(void))bsd_py_count, METH_FASTCALL,
     "delta_count(base, target)\n--\n\n"
     "Return the number of bits that differ between two equally long buffers."},
    {"delta_encode", (PyCFunction)(void (*)(void))bsd_py_encode, METH_FASTCALL,
     "delta_encode(base, target, k, q, r)\n--\n\n"
     "Rice-code the flipped positions of base XOR target into the writable buffers q and r\n"
     "(docs/format.md, \"Delta file\"); return the quotient stream's length in bits."},
    {"delta_apply", (PyCFunction)(void (*)(void))bsd_py_apply, METH_FASTCALL,
     "delta_apply(body, q, r, k, flips)\n--\n\n"
     "Flip the bits the streams encode in the writable body; ValueError when the streams\n"
     "are not exactly `flips` positions inside the body."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef bloomfast_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "bloomswarm.common._bloomfast",
    .m_doc = "C fast path of bloomswarm: hashing and probing per docs/format.md.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__bloomfast(void)
{
    PyObject *m;
    if (PyType_Ready(&ProbeType) < 0)
        return NULL;
    m = PyModule_Create(&bloomfast_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ProbeType);
    if (PyModule_AddObject(m, "Probe", (PyObject *)&ProbeType) < 0) {
        Py_DECREF(&ProbeType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
