/*
 * tracekit.parse._scan: scan one chunk of a Kineto trace's events array into flat
 * per-event rows, without a Python object per event or field.
 *
 * The chunk is the text between the array's brackets (what TraceStream._decode wraps in
 * "[" ... "]"). The scanner validates the whole chunk as strict JSON (strings, escapes,
 * UTF-8, numbers, literals, nesting), because a chunk cut that fell inside a string or a
 * nested object must be rejected exactly as msgspec rejects it. It only *accepts* what it
 * can turn into the same columns as tracekit.parse.columns.Accumulator.add: any value of a
 * type or range that code treats specially (floats where ints are read, big ints,
 * timestamps with more than 3 decimals or an exponent, non-string names, odd grids,
 * duplicate keys, escaped keys, non-ASCII categories, invalid UTF-8, deep nesting) makes
 * the chunk "not handled" and the caller decodes it with msgspec as before. Structural
 * errors are reported the same way (the caller's msgspec decode then raises the usual
 * error), so accepting is the only decision that must match msgspec.
 *
 * scan(data: bytes, categories: tuple[tuple[bytes, int], ...]) returns an int status
 * (BAIL or ERROR) or a tuple (events, rows, strings, offsets, text, meta_spans):
 *   events      number of array elements (every event, kept or not)
 *   rows        a read-only buffer: one Row per event of a kind tracekit keeps (see
 *               ROW_FIELDS)
 *   strings     number of distinct strings interned in the chunk
 *   offsets     bytes: int32[strings + 1] offsets into text
 *   text        bytes: the distinct strings (names decoded; raw JSON text kept as is)
 *   meta_spans  bytes: int64 (start, end) byte spans of the ph == "M" events
 * The GIL is released while scanning.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

enum { ST_OK = 0, ST_BAIL = 1, ST_ERROR = 2, ST_NOMEM = 3 };

/* Event kinds: tracekit.parse.columns' constants (checked by a test). */
enum {
    K_OTHER, K_OP, K_ANNOT, K_KERNEL, K_MEMCPY, K_MEMSET, K_RUNTIME, K_DRIVER, K_PYMODULE,
    K_GPU_ANNOT, K_MEMORY, K_FLOW_END, N_KINDS
};

/* Field bits (presence, "unhandled value" and "seen" masks). The first N_INTS are the
 * integer columns of Row.v, in this order. */
enum {
    F_PID, F_TID, F_EXT, F_CORR, F_DEVICE, F_STREAM, F_REGS, F_SHMEM, F_NBYTES, F_SEQ,
    F_FWD, F_FLOPS, F_CBID, F_DEVTYPE, F_DEVID, F_ADDR, F_MEMBYTES, F_TOTALLOC, F_TOTRES,
    N_INTS,
    F_TS = N_INTS, F_DUR, F_GRID, F_BLOCK, F_NAME, F_PH, F_CAT, F_ARGS,
    F_IDIMS, F_ITYPES, F_ISTRIDES, F_CONCRETE
};
#define BIT(f) (1u << (f))
#define N_RAWS 4

static const char *const INT_NAMES[N_INTS] = {
    "pid", "tid", "external_id", "correlation", "device", "stream", "registers",
    "shared_memory", "nbytes", "seq", "fwd_tid", "flops", "cbid", "device_type",
    "device_id", "addr", "mem_bytes", "total_allocated", "total_reserved",
};
static const char *const RAW_NAMES[N_RAWS] = {
    "input_dims", "input_types", "input_strides", "concrete",
};

typedef struct {
    int64_t ts, dur;      /* ns; 0 where absent */
    int64_t v[N_INTS];    /* 0 where absent */
    uint32_t present;     /* BIT(F_*) for ts, dur, ints, grid, block */
    int32_t name;         /* string code, -1: null / absent / not a string */
    int32_t raw[N_RAWS];  /* string codes of the raw JSON text, -1: absent */
    int32_t grid[3], block[3];
    int8_t kind;
    int8_t pad_[7];
} Row;

/* Values whose type or range the fast path does not reproduce, per kind (see
 * columns.Accumulator._extract for the fields each kind reads). */
#define TIMED (BIT(F_TS) | BIT(F_DUR) | BIT(F_NAME))
#define OP_FIELDS (TIMED | BIT(F_PID) | BIT(F_TID) | BIT(F_EXT) | BIT(F_SEQ) | BIT(F_FWD) | \
                   BIT(F_FLOPS))
#define GPU_FIELDS (TIMED | BIT(F_PID) | BIT(F_TID) | BIT(F_DEVICE) | BIT(F_STREAM) | \
                    BIT(F_CORR) | BIT(F_EXT) | BIT(F_REGS) | BIT(F_SHMEM) | BIT(F_NBYTES) | \
                    BIT(F_GRID) | BIT(F_BLOCK))
#define API_FIELDS (TIMED | BIT(F_PID) | BIT(F_TID) | BIT(F_CORR) | BIT(F_EXT) | BIT(F_CBID))
static const uint32_t RELEVANT[N_KINDS] = {
    [K_OP] = OP_FIELDS,
    [K_ANNOT] = OP_FIELDS,
    [K_KERNEL] = GPU_FIELDS,
    [K_MEMCPY] = GPU_FIELDS,
    [K_MEMSET] = GPU_FIELDS,
    [K_RUNTIME] = API_FIELDS,
    [K_DRIVER] = API_FIELDS,
    /* Python frames: any name (non-strings are simply not nn.Module frames). */
    [K_PYMODULE] = BIT(F_TS) | BIT(F_DUR) | BIT(F_PID) | BIT(F_TID),
    [K_GPU_ANNOT] = TIMED | BIT(F_PID),
    [K_MEMORY] = BIT(F_TS) | BIT(F_PID) | BIT(F_TID) | BIT(F_DEVTYPE) | BIT(F_DEVID) |
                 BIT(F_ADDR) | BIT(F_MEMBYTES) | BIT(F_TOTALLOC) | BIT(F_TOTRES),
    [K_FLOW_END] = BIT(F_TS) | BIT(F_PID) | BIT(F_TID),
};

/* ---- growable buffers ------------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra)
{
    if (b->len + extra <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, size_t n)
{
    if (buf_reserve(b, n))
        return -1;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

/* ---- string interning -------------------------------------------------------------------- */

typedef struct {
    uint32_t *slots;  /* code + 1; 0 = empty */
    size_t mask;
    Buf text;
    Buf offs;   /* int32 offsets, n + 1 of them */
    Buf hashes; /* uint64 per code */
    int32_t n;
} Intern;

/* memcmp(a, b, n) == 0 for the short strings compared here, without a libc call. */
static inline int bytes_eq(const void *a_, const void *b_, size_t n)
{
    const uint8_t *a = a_, *b = b_;
    for (; n >= 8; a += 8, b += 8, n -= 8) {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y)
            return 0;
    }
    for (; n; n--)
        if (*a++ != *b++)
            return 0;
    return 1;
}

static inline uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    return h;
}

static int intern_init(Intern *t)
{
    memset(t, 0, sizeof(*t));
    t->mask = 1023;
    t->slots = calloc(t->mask + 1, sizeof(uint32_t));
    int32_t zero = 0;
    if (!t->slots || buf_put(&t->offs, &zero, sizeof(zero)))
        return -1;
    return 0;
}

static void intern_free(Intern *t)
{
    free(t->slots);
    free(t->text.p);
    free(t->offs.p);
    free(t->hashes.p);
}

static int intern_grow(Intern *t)
{
    size_t mask = t->mask * 2 + 1;
    uint32_t *slots = calloc(mask + 1, sizeof(uint32_t));
    if (!slots)
        return -1;
    const uint64_t *hs = (const uint64_t *)t->hashes.p;
    for (int32_t c = 0; c < t->n; c++) {
        size_t i = hs[c] & mask;
        while (slots[i])
            i = (i + 1) & mask;
        slots[i] = (uint32_t)c + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->mask = mask;
    return 0;
}

/* Code of the string; -1: out of memory, -2: too much text for int32 offsets. */
static int32_t intern(Intern *t, const uint8_t *s, size_t n)
{
    uint64_t h = hash_bytes(s, n);
    size_t i = h & t->mask;
    const int32_t *offs = (const int32_t *)t->offs.p;
    const uint64_t *hs = (const uint64_t *)t->hashes.p;
    for (;;) {
        uint32_t slot = t->slots[i];
        if (!slot)
            break;
        int32_t c = (int32_t)slot - 1;
        if (hs[c] == h && (size_t)(offs[c + 1] - offs[c]) == n &&
            bytes_eq(t->text.p + offs[c], s, n))
            return c;
        i = (i + 1) & t->mask;
    }
    if (t->text.len + n > (size_t)INT32_MAX)
        return -2;
    int32_t c = t->n;
    int32_t end = (int32_t)(t->text.len + n);
    if (buf_put(&t->text, s, n) || buf_put(&t->offs, &end, sizeof(end)) ||
        buf_put(&t->hashes, &h, sizeof(h)))
        return -1;
    t->slots[i] = (uint32_t)c + 1;
    t->n++;
    if ((size_t)t->n * 2 > t->mask && intern_grow(t))
        return -1;
    return c;
}

/* ---- scanner state ----------------------------------------------------------------------- */

typedef struct {
    const uint8_t *s;  /* start of the value's text */
    size_t n;          /* length (strings: without quotes) */
    int type;          /* V_* */
    int flags;         /* strings: S_ESC, S_HIGH */
} Val;

enum { V_ABSENT, V_STRING, V_OTHER };
enum { S_ESC = 1, S_HIGH = 2 };

typedef struct {
    uint32_t seen, weird;
    Val ph, cat, name;
    Val raw[N_RAWS];
    Row *r;  /* numbers go straight into the next row; it is kept if the kind is */
} Ev;

typedef struct {
    const uint8_t *base, *end;
    int status;
    int ncats;
    struct {
        char name[32];
        size_t n;
        int kind;
    } cats[32];
    Buf rows, meta, scratch;
    Intern strings;
    Py_ssize_t events;
} S;

#define FAIL(st, code) ((st)->status = (code), (const uint8_t *)NULL)

static inline const uint8_t *ws(const uint8_t *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
        p++;
    return p;
}

/* Bytes that stop the fast part of a string scan: '"', '\\', controls (NUL included: it
 * is also the sentinel after the data) and non-ASCII. */
static uint8_t STR_SPECIAL[256];


static inline int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* The 4 hex digits at p, -1 if one is not (stops at the first: never reads past a NUL). */
static inline int hex4(const uint8_t *p)
{
    int u = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0)
            return -1;
        u = (u << 4) | h;
    }
    return u;
}

/* Length of the valid UTF-8 sequence at p (p[0] >= 0x80), 0 if invalid (as CPython's
 * decoder: no overlongs, no surrogates, nothing above U+10FFFF). */
static inline int utf8_len(const uint8_t *p)
{
    uint8_t c = p[0];
    if (c >= 0xC2 && c <= 0xDF)
        return (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        if (p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80)
            return 0;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        if (p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
            return 0;
        return 4;
    }
    return 0;
}

/* p at the opening quote; returns the byte after the closing quote. */
static const uint8_t *scan_string(S *st, const uint8_t *p, int *flags)
{
    const uint8_t *end = st->end;
    p++;
    for (;;) {
#ifdef __SSE2__
        const __m128i q = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\');
        const __m128i lim = _mm_set1_epi8(0x20);
        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            /* signed compare: < 0x20 catches controls and every byte >= 0x80 */
            __m128i x = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, q), _mm_cmpeq_epi8(v, bs)),
                                     _mm_cmplt_epi8(v, lim));
            int m = _mm_movemask_epi8(x);
            if (m) {
                p += __builtin_ctz((unsigned)m);
                goto special;
            }
            p += 16;
        }
#endif
        while (!STR_SPECIAL[*p])
            p++;
#ifdef __SSE2__
    special:
#endif
        if (*p == '"')
            return p + 1;
        if (*p == '\\') {
            *flags |= S_ESC;
            switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p += 2;
                continue;
            case 'u': {
                int u = hex4(p + 2);
                if (u < 0)
                    return FAIL(st, ST_ERROR);
                p += 6;
                if (u >= 0xD800 && u <= 0xDBFF) {
                    int lo = (p[0] == '\\' && p[1] == 'u') ? hex4(p + 2) : -1;
                    if (lo < 0xDC00 || lo > 0xDFFF)
                        return FAIL(st, ST_ERROR);  /* lone surrogate: msgspec rejects it */
                    p += 6;
                } else if (u >= 0xDC00 && u <= 0xDFFF) {
                    return FAIL(st, ST_ERROR);
                }
                continue;
            }
            default:
                return FAIL(st, ST_ERROR);
            }
        }
        if (*p >= 0x80) {
            int n = utf8_len(p);
            if (!n)
                return FAIL(st, ST_BAIL);  /* msgspec accepts some of it: let it decide */
            *flags |= S_HIGH;
            p += n;
            continue;
        }
        return FAIL(st, ST_ERROR);  /* control character, or the end of the data */
    }
}

/* Decode a validated JSON string body (escapes) into UTF-8 in st->scratch. */
static int unescape(S *st, const uint8_t *s, size_t n, const uint8_t **out, size_t *out_n)
{
    st->scratch.len = 0;
    if (buf_reserve(&st->scratch, n))
        return -1;
    uint8_t *d = (uint8_t *)st->scratch.p;
    const uint8_t *e = s + n;
    while (s < e) {
        if (*s != '\\') {
            *d++ = *s++;
            continue;
        }
        uint8_t c = s[1];
        s += 2;
        switch (c) {
        case 'b': *d++ = '\b'; break;
        case 'f': *d++ = '\f'; break;
        case 'n': *d++ = '\n'; break;
        case 'r': *d++ = '\r'; break;
        case 't': *d++ = '\t'; break;
        case 'u': {
            uint32_t u = (uint32_t)hex4(s);
            s += 4;
            if (u >= 0xD800 && u <= 0xDBFF) {
                u = 0x10000 + ((u - 0xD800) << 10) + ((uint32_t)hex4(s + 2) - 0xDC00);
                s += 6;
            }
            if (u < 0x80) {
                *d++ = (uint8_t)u;
            } else if (u < 0x800) {
                *d++ = (uint8_t)(0xC0 | (u >> 6));
                *d++ = (uint8_t)(0x80 | (u & 0x3F));
            } else if (u < 0x10000) {
                *d++ = (uint8_t)(0xE0 | (u >> 12));
                *d++ = (uint8_t)(0x80 | ((u >> 6) & 0x3F));
                *d++ = (uint8_t)(0x80 | (u & 0x3F));
            } else {
                *d++ = (uint8_t)(0xF0 | (u >> 18));
                *d++ = (uint8_t)(0x80 | ((u >> 12) & 0x3F));
                *d++ = (uint8_t)(0x80 | ((u >> 6) & 0x3F));
                *d++ = (uint8_t)(0x80 | (u & 0x3F));
            }
            break;
        }
        default: *d++ = c; break; /* '"', '\\', '/' */
        }
    }
    *out = (const uint8_t *)st->scratch.p;
    *out_n = (size_t)(d - (uint8_t *)st->scratch.p);
    return 0;
}

/* The decoded text of a string value. */
static int str_text(S *st, const Val *v, const uint8_t **out, size_t *n)
{
    if (!(v->flags & S_ESC)) {
        *out = v->s;
        *n = v->n;
        return 0;
    }
    return unescape(st, v->s, v->n, out, n);
}

/* ---- numbers ----------------------------------------------------------------------------- */

enum { N_INT = 1, N_BIG, N_DEC, N_EXP };

typedef struct {
    int type;
    int neg;
    uint64_t ip;  /* integer part (valid if idig <= 18) */
    int idig;
    uint64_t fp;  /* fraction digits as an integer (valid if fdig <= 18) */
    int fdig;
} Num;

static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static const uint8_t *parse_number(S *st, const uint8_t *p, Num *n)
{
    n->neg = 0;
    n->ip = n->fp = 0;
    n->fdig = 0;
    if (*p == '-') {
        n->neg = 1;
        p++;
    }
    const uint8_t *d0 = p;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (is_digit(*p)) {
            n->ip = n->ip * 10 + (uint64_t)(*p - '0');
            p++;
        }
    } else {
        return FAIL(st, ST_ERROR);
    }
    n->idig = (int)(p - d0);
    n->type = n->idig <= 18 ? N_INT : N_BIG;
    if (*p == '.') {
        p++;
        const uint8_t *f0 = p;
        while (is_digit(*p)) {
            n->fp = n->fp * 10 + (uint64_t)(*p - '0');
            p++;
        }
        if (p == f0)
            return FAIL(st, ST_ERROR);
        n->fdig = (int)(p - f0);
        n->type = N_DEC;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!is_digit(*p))
            return FAIL(st, ST_ERROR);
        while (is_digit(*p))
            p++;
        n->type = N_EXP;
    }
    return p;
}

static const int64_t POW10_3[4] = {1000, 100, 10, 1};

/* Exact ns of a microsecond value, as columns.to_ns computes it; 0 if not handled. */
static inline int num_ns(const Num *n, int64_t *out)
{
    int64_t v;
    if (n->type == N_INT && n->ip <= 9000000000000000ull) {
        v = (int64_t)n->ip * 1000;
    } else if (n->type == N_DEC && n->idig <= 16 && n->ip <= 9000000000000000ull &&
               n->fdig <= 3) {
        v = (int64_t)n->ip * 1000 + (int64_t)n->fp * POW10_3[n->fdig];
    } else {
        return 0;
    }
    *out = n->neg ? -v : v;
    return 1;
}

/* ---- values ------------------------------------------------------------------------------- */

static const uint8_t *skip_value(S *st, const uint8_t *p, int depth);

static const uint8_t *skip_literal(S *st, const uint8_t *p, const char *lit)
{
    for (; *lit; lit++, p++)
        if (*p != (uint8_t)*lit)
            return FAIL(st, ST_ERROR);
    return p;
}

static const uint8_t *skip_value(S *st, const uint8_t *p, int depth)
{
    int flags = 0;
    switch (*p) {
    case '"':
        return scan_string(st, p, &flags);
    case '{':
    case '[': {
        const uint8_t close = *p == '{' ? '}' : ']';
        if (depth > 64)
            return FAIL(st, ST_BAIL);  /* msgspec's own limit is deeper: let it decide */
        p = ws(p + 1);
        if (*p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (*p != '"')
                    return FAIL(st, ST_ERROR);
                if (!(p = scan_string(st, p, &flags)))
                    return NULL;
                p = ws(p);
                if (*p != ':')
                    return FAIL(st, ST_ERROR);
                p = ws(p + 1);
            }
            if (!(p = skip_value(st, p, depth + 1)))
                return NULL;
            p = ws(p);
            if (*p == ',') {
                p = ws(p + 1);
                continue;
            }
            if (*p == close)
                return p + 1;
            return FAIL(st, ST_ERROR);
        }
    }
    case 't':
        return skip_literal(st, p, "true");
    case 'f':
        return skip_literal(st, p, "false");
    case 'n':
        return skip_literal(st, p, "null");
    default: {
        Num n;
        return parse_number(st, p, &n);
    }
    }
}

/* A string-typed field (ph, cat, name): strings are kept as spans, null is absent, any
 * other value is V_OTHER. */
static const uint8_t *string_field(S *st, const uint8_t *p, Val *v)
{
    if (*p == '"') {
        v->s = p + 1;
        v->flags = 0;
        const uint8_t *q = scan_string(st, p, &v->flags);
        if (q) {
            v->n = (size_t)(q - 1 - v->s);
            v->type = V_STRING;
        }
        return q;
    }
    if (*p == 'n') {
        v->type = V_ABSENT;
        return skip_literal(st, p, "null");
    }
    v->type = V_OTHER;
    return skip_value(st, p, 1);
}

static inline int in_int32(const Num *n)
{
    return n->type == N_INT && n->ip <= (n->neg ? 2147483648ull : 2147483647ull);
}

/* Whether number n is handled for field f (ts/dur: exact ns; registers: int32; flops:
 * exact as a double; other ints: int64), and its column value. */
static int number_value(const Num *n, int f, int64_t *out)
{
    if (f == F_TS || f == F_DUR)
        return num_ns(n, out);
    if (n->type != N_INT || (f == F_REGS && !in_int32(n)) ||
        (f == F_FLOPS && n->ip > (1ull << 53)))
        return 0;
    *out = n->neg ? -(int64_t)n->ip : (int64_t)n->ip;
    return 1;
}

/* A numeric field: handled numbers are kept, null is absent, anything else is marked
 * unhandled (which only matters if the event's kind reads the field). */
static const uint8_t *number_field(S *st, const uint8_t *p, Ev *ev, int f, int64_t *out)
{
    if (*p == '-' || is_digit(*p)) {
        Num n;
        if (!(p = parse_number(st, p, &n)))
            return NULL;
        if (number_value(&n, f, out))
            ev->r->present |= BIT(f);
        else
            ev->weird |= BIT(f);
        return p;
    }
    if (*p == 'n')
        return skip_literal(st, p, "null");
    ev->weird |= BIT(f);
    return skip_value(st, p, 1);
}

/* grid / block: a list of exactly 3 ints in int32 range. */
static const uint8_t *triple_field(S *st, const uint8_t *p, Ev *ev, int f, int32_t *out)
{
    if (*p == '[') {
        const uint8_t *q = ws(p + 1);
        int i;
        for (i = 0; i < 3; i++) {
            if (!(*q == '-' || is_digit(*q)))
                break;
            Num n;
            if (!(q = parse_number(st, q, &n)))
                return NULL;
            if (!in_int32(&n))
                break;
            out[i] = n.neg ? (int32_t)(-(int64_t)n.ip) : (int32_t)n.ip;
            q = ws(q);
            if (i < 2) {
                if (*q != ',')
                    break;
                q = ws(q + 1);
            }
        }
        if (i == 3 && *q == ']') {
            ev->r->present |= BIT(f);
            return q + 1;
        }
        out[0] = out[1] = out[2] = 0;
        ev->weird |= BIT(f);
        return skip_value(st, p, 1);
    }
    if (*p == 'n')
        return skip_literal(st, p, "null");
    ev->weird |= BIT(f);
    return skip_value(st, p, 1);
}

static const uint8_t *raw_field(S *st, const uint8_t *p, Val *v)
{
    const uint8_t *q = skip_value(st, p, 1);
    if (q) {
        v->s = p;
        v->n = (size_t)(q - p);
        v->type = V_STRING;
    }
    return q;
}

/* ---- keys --------------------------------------------------------------------------------- */

enum { KEY_SKIP = -1, MAX_KEY = 24, KEYS_PER_LEN = 4 };

typedef struct {
    const char *name;
    int field;
} Key;

/* The keys of an event and of its args that tracekit reads (reader.Event / reader.Args);
 * "id", "bp" and args "name", "Python id", ... are read only for metadata events, which
 * the caller decodes with msgspec. */
static const Key EVENT_KEYS[] = {
    {"ph", F_PH}, {"cat", F_CAT}, {"name", F_NAME}, {"pid", F_PID}, {"tid", F_TID},
    {"ts", F_TS}, {"dur", F_DUR}, {"args", F_ARGS},
};
static const Key ARGS_KEYS[] = {
    {"External id", F_EXT}, {"correlation", F_CORR}, {"device", F_DEVICE},
    {"stream", F_STREAM}, {"grid", F_GRID}, {"block", F_BLOCK},
    {"registers per thread", F_REGS}, {"shared memory", F_SHMEM}, {"bytes", F_NBYTES},
    {"Sequence number", F_SEQ}, {"Fwd thread id", F_FWD}, {"Input Dims", F_IDIMS},
    {"Input type", F_ITYPES}, {"Input Strides", F_ISTRIDES}, {"Concrete Inputs", F_CONCRETE},
    {"flops", F_FLOPS}, {"cbid", F_CBID}, {"Device Type", F_DEVTYPE}, {"Device Id", F_DEVID},
    {"Addr", F_ADDR}, {"Bytes", F_MEMBYTES}, {"Total Allocated", F_TOTALLOC},
    {"Total Reserved", F_TOTRES},
};

/* Keys bucketed by length: a lookup is a few comparisons at most. */
typedef struct {
    const Key *keys[MAX_KEY + 1][KEYS_PER_LEN];
    int n[MAX_KEY + 1];
} KeyTable;

static KeyTable EVENT_TABLE, ARGS_TABLE;

static int key_table(KeyTable *t, const Key *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(keys[i].name);
        if (len > MAX_KEY || t->n[len] == KEYS_PER_LEN)
            return -1;
        t->keys[len][t->n[len]++] = &keys[i];
    }
    return 0;
}

static inline int key_lookup(const KeyTable *t, const uint8_t *k, size_t n)
{
    if (n > MAX_KEY)
        return KEY_SKIP;
    for (int i = 0; i < t->n[n]; i++)
        if (bytes_eq(t->keys[n][i]->name, k, n))
            return t->keys[n][i]->field;
    return KEY_SKIP;
}

static int event_key(const uint8_t *k, size_t n) { return key_lookup(&EVENT_TABLE, k, n); }
static int args_key(const uint8_t *k, size_t n) { return key_lookup(&ARGS_TABLE, k, n); }

/* ---- objects ------------------------------------------------------------------------------ */

/* Iterate an object's members: calls member(st, p_at_value, ev, key) for each known key.
 * Keys with escapes could spell a known key: not handled. Duplicate known keys (msgspec
 * keeps the last) are not handled either. */
static const uint8_t *args_member(S *st, const uint8_t *p, Ev *ev, int key)
{
    switch (key) {
    case F_GRID:
        return triple_field(st, p, ev, F_GRID, ev->r->grid);
    case F_BLOCK:
        return triple_field(st, p, ev, F_BLOCK, ev->r->block);
    case F_IDIMS: case F_ITYPES: case F_ISTRIDES: case F_CONCRETE:
        return raw_field(st, p, &ev->raw[key - F_IDIMS]);
    default:
        return number_field(st, p, ev, key, &ev->r->v[key]);
    }
}

static const uint8_t *parse_args(S *st, const uint8_t *p, Ev *ev);

static const uint8_t *event_member(S *st, const uint8_t *p, Ev *ev, int key)
{
    switch (key) {
    case F_PH:
        return string_field(st, p, &ev->ph);
    case F_CAT:
        return string_field(st, p, &ev->cat);
    case F_NAME:
        return string_field(st, p, &ev->name);
    case F_TS:
        return number_field(st, p, ev, F_TS, &ev->r->ts);
    case F_DUR:
        return number_field(st, p, ev, F_DUR, &ev->r->dur);
    case F_ARGS:
        if (*p != '{')
            return FAIL(st, ST_BAIL);  /* msgspec: a validation error */
        return parse_args(st, p, ev);
    default:
        return number_field(st, p, ev, key, &ev->r->v[key]);
    }
}

#define OBJECT_LOOP(KEYFN, MEMBER)                                                   \
    p = ws(p + 1);                                                                   \
    if (*p == '}')                                                                   \
        return p + 1;                                                                \
    for (;;) {                                                                       \
        if (*p != '"')                                                               \
            return FAIL(st, ST_ERROR);                                               \
        const uint8_t *k = p + 1;                                                    \
        int kflags = 0;                                                              \
        if (!(p = scan_string(st, p, &kflags)))                                      \
            return NULL;                                                             \
        size_t kn = (size_t)(p - 1 - k);                                             \
        p = ws(p);                                                                   \
        if (*p != ':')                                                               \
            return FAIL(st, ST_ERROR);                                               \
        p = ws(p + 1);                                                               \
        if (kflags & S_ESC)                                                          \
            return FAIL(st, ST_BAIL);                                                \
        int key = KEYFN(k, kn);                                                      \
        if (key == KEY_SKIP) {                                                       \
            p = skip_value(st, p, 2);                                                \
        } else {                                                                     \
            if (ev->seen & BIT(key))                                                 \
                return FAIL(st, ST_BAIL);                                            \
            ev->seen |= BIT(key);                                                    \
            p = MEMBER(st, p, ev, key);                                              \
        }                                                                            \
        if (!p)                                                                      \
            return NULL;                                                             \
        p = ws(p);                                                                   \
        if (*p == ',') {                                                             \
            p = ws(p + 1);                                                           \
            continue;                                                                \
        }                                                                            \
        if (*p == '}')                                                               \
            return p + 1;                                                            \
        return FAIL(st, ST_ERROR);                                                   \
    }

static const uint8_t *parse_args(S *st, const uint8_t *p, Ev *ev)
{
    OBJECT_LOOP(args_key, args_member)
}

static const uint8_t *parse_event(S *st, const uint8_t *p, Ev *ev)
{
    OBJECT_LOOP(event_key, event_member)
}

/* ---- one event's row ---------------------------------------------------------------------- */

static int str_eq(S *st, const Val *v, const char *lit, int *eq)
{
    *eq = 0;
    if (v->type != V_STRING)
        return 0;
    const uint8_t *s;
    size_t n;
    if (str_text(st, v, &s, &n))
        return -1;
    *eq = n == strlen(lit) && memcmp(s, lit, n) == 0;
    return 0;
}

/* Kind from the category, case-insensitively (ASCII only: other text is not handled, since
 * str.lower() maps a few non-ASCII letters to ASCII ones). Returns -1 on bail. */
static int cat_kind(S *st, const Val *cat)
{
    if (cat->type != V_STRING)
        return K_OTHER;
    const uint8_t *s;
    size_t n;
    if (str_text(st, cat, &s, &n))
        return -2;
    char low[32];
    if (n >= sizeof(low)) {
        for (size_t i = 0; i < n; i++)
            if (s[i] >= 0x80)
                return -1;
        return K_OTHER;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x80)
            return -1;
        low[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    for (int i = 0; i < st->ncats; i++)
        if (st->cats[i].n == n && memcmp(st->cats[i].name, low, n) == 0)
            return st->cats[i].kind;
    return K_OTHER;
}

static int32_t intern_val(S *st, const Val *v, int decode)
{
    const uint8_t *s = v->s;
    size_t n = v->n;
    if (decode && str_text(st, v, &s, &n)) {
        st->status = ST_NOMEM;
        return -1;
    }
    int32_t c = intern(&st->strings, s, n);
    if (c < 0)
        st->status = c == -1 ? ST_NOMEM : ST_BAIL;
    return c;
}

/* Returns 0, or -1 with st->status set. */
static int finish_event(S *st, Ev *ev, const uint8_t *start, const uint8_t *stop)
{
    int ph = 0;
    if (ev->ph.type == V_STRING) {
        const uint8_t *s;
        size_t n;
        if (str_text(st, &ev->ph, &s, &n))
            return st->status = ST_NOMEM, -1;
        if (n == 1)
            ph = s[0];
    }
    if (ph == 'M') {
        int64_t span[2] = {start - st->base, stop - st->base};
        if (buf_put(&st->meta, span, sizeof(span)))
            return st->status = ST_NOMEM, -1;
        return 0;
    }
    if (ph != 'X' && ph != 'i' && ph != 'f')
        return 0;
    int kind = K_OTHER, eq;
    if (ph == 'X') {
        kind = cat_kind(st, &ev->cat);
        if (kind < 0)
            return st->status = kind == -1 ? ST_BAIL : ST_NOMEM, -1;
    } else if (ph == 'i') {
        if (str_eq(st, &ev->name, "[memory]", &eq))
            return st->status = ST_NOMEM, -1;
        if (eq)
            kind = K_MEMORY;
    } else {
        if (str_eq(st, &ev->cat, "fwdbwd", &eq))
            return st->status = ST_NOMEM, -1;
        if (eq)
            kind = K_FLOW_END;
    }
    if (kind == K_OTHER)
        return 0;
    uint32_t weird = ev->weird;
    if (ev->name.type == V_OTHER)
        weird |= BIT(F_NAME);
    if (weird & RELEVANT[kind])
        return st->status = ST_BAIL, -1;
    Row *r = ev->r;
    st->rows.len += sizeof(Row);  /* keep the row */
    r->kind = (int8_t)kind;
    r->name = -1;
    if (kind != K_MEMORY && kind != K_FLOW_END && ev->name.type == V_STRING) {
        if ((r->name = intern_val(st, &ev->name, 1)) < 0)
            return -1;
    }
    for (int i = 0; i < N_RAWS; i++) {
        r->raw[i] = -1;
        if ((kind == K_OP || kind == K_ANNOT) && ev->raw[i].type == V_STRING) {
            if ((r->raw[i] = intern_val(st, &ev->raw[i], 0)) < 0)
                return -1;
        }
    }
    return 0;
}

static void scan_chunk(S *st)
{
    const uint8_t *p = ws(st->base);
    if (p == st->end)
        return;
    /* rows are at most one per ~100 bytes of Kineto text: reserve, grow if not */
    if (buf_reserve(&st->rows, (size_t)(st->end - st->base) / 128 * sizeof(Row))) {
        st->status = ST_NOMEM;
        return;
    }
    Ev ev;
    for (;;) {
        if (*p != '{') {
            st->status = *p == '[' || *p == '"' || *p == '-' || is_digit(*p) || *p == 't' ||
                                 *p == 'f' || *p == 'n'
                             ? ST_BAIL   /* a value that is not an object: msgspec decides */
                             : ST_ERROR;
            return;
        }
        const uint8_t *start = p;
        if (buf_reserve(&st->rows, sizeof(Row))) {
            st->status = ST_NOMEM;
            return;
        }
        ev.r = (Row *)(st->rows.p + st->rows.len);
        memset(ev.r, 0, sizeof(Row));
        ev.seen = ev.weird = 0;
        ev.ph.type = ev.cat.type = ev.name.type = V_ABSENT;
        for (int i = 0; i < N_RAWS; i++)
            ev.raw[i].type = V_ABSENT;
        if (!(p = parse_event(st, p, &ev)))
            return;
        st->events++;
        if (finish_event(st, &ev, start, p))
            return;
        p = ws(p);
        if (p == st->end)
            return;
        if (*p != ',') {
            st->status = ST_ERROR;
            return;
        }
        p = ws(p + 1);
        if (p == st->end) {
            st->status = ST_ERROR;  /* trailing comma */
            return;
        }
    }
}

static int init_tables(void)
{
    for (int c = 0; c < 256; c++)
        STR_SPECIAL[c] = (c < 0x20 || c >= 0x80 || c == '"' || c == '\\');
    if (key_table(&EVENT_TABLE, EVENT_KEYS, sizeof(EVENT_KEYS) / sizeof(EVENT_KEYS[0])) ||
        key_table(&ARGS_TABLE, ARGS_KEYS, sizeof(ARGS_KEYS) / sizeof(ARGS_KEYS[0])))
        return -1;
    return 0;
}

/* ---- Python interface ---------------------------------------------------------------------- */

/* A read-only buffer that owns a malloc'd block: the rows reach numpy without a copy. */
typedef struct {
    PyObject_HEAD
    char *p;
    Py_ssize_t len;
} Block;

static int block_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    Block *b = (Block *)self;
    return PyBuffer_FillInfo(view, self, b->p, b->len, 1, flags);
}

static void block_dealloc(PyObject *self)
{
    free(((Block *)self)->p);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs block_as_buffer = {block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracekit.parse._scan.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory written by the scanner (buffer protocol, read-only).",
};

/* Hand b's memory to a Block (b is left empty). */
static PyObject *block_of(Buf *b)
{
    Block *o = PyObject_New(Block, &BlockType);
    if (!o)
        return NULL;
    o->p = b->p;
    o->len = (Py_ssize_t)b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    return (PyObject *)o;
}

static PyObject *bytes_of(Buf *b)
{
    return PyBytes_FromStringAndSize(b->p ? b->p : "", (Py_ssize_t)b->len);
}

static int load_cats(S *st, PyObject *cats)
{
    if (!PyTuple_Check(cats) || PyTuple_GET_SIZE(cats) > 32) {
        PyErr_SetString(PyExc_TypeError, "categories: a tuple of at most 32 (bytes, int) pairs");
        return -1;
    }
    st->ncats = (int)PyTuple_GET_SIZE(cats);
    for (int i = 0; i < st->ncats; i++) {
        PyObject *item = PyTuple_GET_ITEM(cats, i);
        char *name;
        Py_ssize_t n;
        int kind;
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "y#i", &name, &n, &kind))
            return -1;
        if (n >= 32 || kind < 0 || kind >= N_KINDS) {
            PyErr_SetString(PyExc_ValueError, "categories: name too long or kind out of range");
            return -1;
        }
        memcpy(st->cats[i].name, name, (size_t)n);
        st->cats[i].n = (size_t)n;
        st->cats[i].kind = kind;
    }
    return 0;
}

static PyObject *py_scan(PyObject *self, PyObject *args)
{
    PyObject *data, *cats;
    if (!PyArg_ParseTuple(args, "SO:scan", &data, &cats))
        return NULL;
    S *st = calloc(1, sizeof(S));
    if (!st)
        return PyErr_NoMemory();
    PyObject *res = NULL;
    if (load_cats(st, cats))
        goto done;
    if (intern_init(&st->strings)) {
        PyErr_NoMemory();
        goto done;
    }
    /* bytes objects end with a NUL byte: the scanner relies on it as a sentinel. */
    st->base = (const uint8_t *)PyBytes_AS_STRING(data);
    st->end = st->base + PyBytes_GET_SIZE(data);
    Py_INCREF(data);
    Py_BEGIN_ALLOW_THREADS
    scan_chunk(st);
    Py_END_ALLOW_THREADS
    Py_DECREF(data);
    if (st->status == ST_NOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    if (st->status != ST_OK) {
        res = PyLong_FromLong(st->status);
        goto done;
    }
    res = Py_BuildValue("(nNiNNN)", st->events, block_of(&st->rows), (int)st->strings.n,
                        bytes_of(&st->strings.offs), bytes_of(&st->strings.text),
                        bytes_of(&st->meta));
done:
    free(st->rows.p);
    free(st->meta.p);
    free(st->scratch.p);
    intern_free(&st->strings);
    free(st);
    return res;
}

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS,
     "scan(data, categories) -> BAIL | ERROR | (events, rows, strings, offsets, text, "
     "meta_spans)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tracekit.parse._scan",
    "Native scanner for chunks of a Kineto trace's events array.", -1, methods,
};

static int add_layout(PyObject *m)
{
    /* ROW_FIELDS: (name, numpy format, offset) of Row's fields, for a numpy dtype. */
    PyObject *fields = PyList_New(0);
    if (!fields)
        return -1;
#define ADD(name, fmt, off)                                                            \
    do {                                                                               \
        PyObject *t = Py_BuildValue("(ssn)", name, fmt, (Py_ssize_t)(off));            \
        if (!t || PyList_Append(fields, t)) {                                          \
            Py_XDECREF(t);                                                             \
            Py_DECREF(fields);                                                         \
            return -1;                                                                 \
        }                                                                              \
        Py_DECREF(t);                                                                  \
    } while (0)
    ADD("ts", "<i8", offsetof(Row, ts));
    ADD("dur", "<i8", offsetof(Row, dur));
    for (int i = 0; i < N_INTS; i++)
        ADD(INT_NAMES[i], "<i8", offsetof(Row, v) + (size_t)i * sizeof(int64_t));
    ADD("present", "<u4", offsetof(Row, present));
    ADD("name", "<i4", offsetof(Row, name));
    for (int i = 0; i < N_RAWS; i++)
        ADD(RAW_NAMES[i], "<i4", offsetof(Row, raw) + (size_t)i * sizeof(int32_t));
    ADD("grid", "(3,)<i4", offsetof(Row, grid));
    ADD("block", "(3,)<i4", offsetof(Row, block));
    ADD("kind", "i1", offsetof(Row, kind));
#undef ADD
    if (PyModule_AddObject(m, "ROW_FIELDS", fields)) {
        Py_DECREF(fields);
        return -1;
    }
    /* BITS: field name -> bit of Row.present */
    PyObject *bits = PyDict_New();
    if (!bits)
        return -1;
    int ok = 1;
    for (int i = 0; i < N_INTS && ok; i++) {
        PyObject *v = PyLong_FromLong(i);
        ok = v && PyDict_SetItemString(bits, INT_NAMES[i], v) == 0;
        Py_XDECREF(v);
    }
    const struct {
        const char *name;
        int bit;
    } extra[] = {{"ts", F_TS}, {"dur", F_DUR}, {"grid", F_GRID}, {"block", F_BLOCK}};
    for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]) && ok; i++) {
        PyObject *v = PyLong_FromLong(extra[i].bit);
        ok = v && PyDict_SetItemString(bits, extra[i].name, v) == 0;
        Py_XDECREF(v);
    }
    if (!ok || PyModule_AddObject(m, "BITS", bits)) {
        Py_DECREF(bits);
        return -1;
    }
    /* KINDS: the kind codes this scanner writes (must equal tracekit.parse.columns'). */
    PyObject *kinds = Py_BuildValue(
        "{sisisisisisisisisisisisi}", "OTHER", K_OTHER, "OP", K_OP, "ANNOT", K_ANNOT, "KERNEL",
        K_KERNEL, "MEMCPY", K_MEMCPY, "MEMSET", K_MEMSET, "RUNTIME", K_RUNTIME, "DRIVER",
        K_DRIVER, "PYMODULE", K_PYMODULE, "GPU_ANNOT", K_GPU_ANNOT, "MEMORY", K_MEMORY,
        "FLOW_END", K_FLOW_END);
    if (!kinds || PyModule_AddObject(m, "KINDS", kinds)) {
        Py_XDECREF(kinds);
        return -1;
    }
    if (PyModule_AddIntConstant(m, "ROW_SIZE", (long)sizeof(Row)) ||
        PyModule_AddIntConstant(m, "BAIL", ST_BAIL) ||
        PyModule_AddIntConstant(m, "ERROR", ST_ERROR))
        return -1;
    return 0;
}

PyMODINIT_FUNC PyInit__scan(void)
{
    if (init_tables()) {
        PyErr_SetString(PyExc_SystemError, "_scan: key table overflow");
        return NULL;
    }
    if (PyType_Ready(&BlockType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (add_layout(m)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
