/* SPDX-License-Identifier: MIT */
/*
 * Internals of the chat-template renderer shared by its files: the arena, the
 * value model (Python's types as Jinja2 sees them), the syntax tree, the
 * builtin tables and the render state. Errors unwind with longjmp to the
 * compile or render entry: every allocation lives in an arena that the entry
 * frees, so nothing leaks when an error skips frames. Not a public header.
 */
#ifndef RS_JINJA_IMPL_H
#define RS_JINJA_IMPL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "common/jinja.h"

/* ---- arena ---------------------------------------------------------------- */

struct ja_chunk;

/*
 * Bump allocator; `fail` is called (and must not return) when `limit` would
 * be passed (oom = 0) or malloc fails (oom = 1).
 */
typedef struct jarena {
    struct ja_chunk *head;
    char *p, *end;
    size_t used, limit, next_chunk;
    void (*fail)(void *ctx, int oom);
    void *ctx;
} jarena;

void *ja_alloc(jarena *a, size_t n);        /* 16-byte aligned, uninitialized */
void *ja_zalloc(jarena *a, size_t n);       /* zeroed */
void ja_release(jarena *a);                 /* frees every chunk */

/* ---- values --------------------------------------------------------------- */

enum jt {
    JT_MISSING = 0, /* internal: an argument not given; never reaches a template */
    JT_UNDEF,
    JT_NONE,
    JT_BOOL,
    JT_INT,
    JT_FLOAT,
    JT_STR,
    JT_LIST, /* list, tuple, generator/iterator, dict view, range: see jlist.kind */
    JT_DICT,
    JT_NS,     /* namespace() */
    JT_MACRO,  /* a macro or a call block's caller */
    JT_FUNC,   /* a global builtin (range, namespace, raise_exception, ...) */
    JT_METHOD, /* a bound method (x.items, s.split, loop.cycle, ...) */
    JT_LOOP,   /* a for loop's `loop` */
    JT_OBJ,    /* joiner() / cycler() instances */
};

/* 16 bytes, passed by value. Strings are (s, n) views: immutable, shared. */
typedef struct jv {
    uint8_t t;
    uint8_t mk; /* JT_STR: 1 when Markup (the `safe` filter, escape) */
    uint16_t pad;
    uint32_t n; /* JT_STR: byte length */
    union {
        int64_t i; /* JT_INT, JT_BOOL */
        double f;
        const char *s;
        struct jlist *l;
        struct jdict *d;
        struct jns *ns;
        struct jmacro *m;
        const struct jundef *u; /* NULL: plain undefined */
        const struct jbuiltin *fn;
        struct jmethod *me;
        struct jloop *lp;
        struct jobj *o;
    } u;
} jv;

enum jl_kind { JL_LIST, JL_TUPLE, JL_ITER, JL_VIEW, JL_RANGE };

struct jerrsave; /* an error kept for later (generators raise when consumed) */

struct jlist {
    jv *v;
    uint32_t n, cap;
    uint8_t kind;     /* enum jl_kind */
    uint8_t consumed; /* JL_ITER: already iterated once */
    const char *tname; /* Python type name for JL_ITER / JL_VIEW ("generator", "dict_items") */
    struct jerrsave *err; /* JL_ITER: raised after the last item */
    int64_t r0, r1, rs;   /* JL_RANGE: start, stop, step (for repr) */
};

struct jkv {
    jv k, v;
};

/* Insertion-ordered mapping; a hash index is built once it grows past a few keys. */
struct jdict {
    struct jkv *kv;
    uint32_t n, cap;
    uint32_t *idx; /* open addressing over kv indices + 1; NULL while small */
    uint32_t idx_cap;
};

struct jns {
    struct jdict d;
};

struct jscope;
struct jnode;

struct jmacro {
    const struct jnode *def; /* N_MACRO or N_CALLBLOCK */
    struct jscope *closure;  /* the scope the definition ran in: read live */
};

enum jundef_kind { JU_PLAIN, JU_NAME, JU_ATTR, JU_ITEM, JU_HINT };

struct jundef {
    uint8_t kind;
    uint8_t exc;     /* RS_JINJA_ERR_UNDEFINED, or _SECURITY for a refused attribute */
    const char *name; /* JU_NAME / JU_ATTR name or JU_HINT text */
    uint32_t name_len;
    jv obj; /* JU_ATTR / JU_ITEM: the object looked into; JU_ITEM: name is its repr */
};

struct jst;
struct jcall;
typedef jv (*jbuiltin_fn)(struct jst *st, const struct jnode *site, jv self, struct jcall *c);

/* Builtin flags: extra positional / keyword arguments accepted, not implemented, refused by
 * the sandbox (SecurityError), positional-only parameters (as Python's str methods). */
enum { JB_VARARGS = 1, JB_VARKW = 2, JB_UNSUPPORTED = 4, JB_UNSAFE = 8, JB_POSONLY = 16 };

/* A filter, test, method or global: parameters after the subject, bound by name. */
struct jbuiltin {
    const char *name;
    const char *const *params; /* NULL-terminated; NULL: none */
    uint8_t nreq;              /* leading params that are required */
    uint8_t flags;             /* JB_* */
    jbuiltin_fn fn;
};

struct jmethod {
    jv self;
    const struct jbuiltin *m;
};

struct jkwarg {
    const char *name;
    uint32_t len;
    jv v;
};

#define JCALL_MAX_PARAMS 8

/* Arguments bound to a builtin's parameters. */
struct jcall {
    jv a[JCALL_MAX_PARAMS]; /* by parameter index; JT_MISSING when not given */
    jv *rest;               /* JB_VARARGS: positional arguments past the parameters */
    uint32_t nrest;
    struct jkwarg *kw; /* JB_VARKW: keyword arguments that name no parameter */
    uint32_t nkw;
};

struct jloop {
    jv *items;
    uint32_t n, i;
    uint32_t depth0;
    const struct jnode *fornode; /* for loop(...) in recursive loops */
    struct jscope *scope;        /* scope the loop statement runs in */
    jv last_changed;             /* loop.changed() */
};

enum jobj_kind { JO_JOINER, JO_CYCLER };

struct jobj {
    uint8_t kind;
    uint8_t used; /* joiner: called before */
    uint32_t pos; /* cycler position */
    jv sep;       /* joiner separator */
    struct jlist *items; /* cycler items */
};

/* ---- syntax tree ---------------------------------------------------------- */

enum jnk {
    /* expressions */
    N_CONST,
    N_NAME,
    N_ATTR,    /* a.name           a, val = name */
    N_ITEM,    /* a[b] */
    N_SLICE,   /* a[l1[0]:l1[1]:l1[2]] (NULL parts omitted) */
    N_BIN,     /* a op b           op = enum jop */
    N_NEG,
    N_POS,
    N_NOT,
    N_AND,
    N_OR,
    N_CMP,     /* a (l1[i].op l1[i].a)...   l1: N_OPERAND */
    N_OPERAND,
    N_COND,    /* b if a else c (c may be NULL) */
    N_LIST,
    N_TUPLE,
    N_DICT,    /* l1 keys, l2 values */
    N_CONCAT,  /* l1[0] ~ l1[1] ~ ... */
    N_CALL,    /* a(l1..., l2 kw..., *b, **c) */
    N_FILTER,  /* a | val(l1..., l2...)   fn resolved (NULL: unknown, raises when run) */
    N_TEST,    /* a is val(...) */
    N_KW,      /* keyword argument val = a */
    /* statements */
    N_DATA,    /* template text val */
    N_PRINT,   /* {{ a }} */
    N_IF,      /* if a: l1 else l2 */
    N_FOR,     /* for a in b [if c]: l1 else l2 */
    N_SET,     /* a = b */
    N_SETBLOCK, /* a = (body l1 | filter chain b) */
    N_NSREF,   /* target ns.attr: sym = ns, val = attr */
    N_MACRO,   /* sym(l1 params = l2 defaults): l3 */
    N_CALLBLOCK, /* call(l1 params = l2 defaults) a: l3 */
    N_FILTERBLOCK, /* filter chain a over body l1 */
    N_WITH,    /* with l1 = l2: l3 */
    N_BREAK,
    N_CONTINUE,
};

enum jop {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
};

/* N_MACRO / N_CALLBLOCK flags: what the body references (Jinja's special names). */
enum { NF_VARARGS = 1, NF_KWARGS = 2, NF_CALLER = 4, NF_RECURSIVE = 8, NF_USES_LOOP = 16 };

typedef struct jnode jnode;
struct jnode {
    uint8_t k;  /* enum jnk */
    uint8_t op; /* enum jop for N_BIN / N_OPERAND */
    uint16_t fl;
    uint32_t line, col;
    jnode *a, *b, *c;
    jnode **l1, **l2, **l3;
    uint32_t n1, n2, n3;
    uint32_t sym;
    jv val;
    const struct jbuiltin *fn;
};

/* Symbols every template knows, in this order from id 0. */
enum {
    SYM_LOOP, SYM_CALLER, SYM_VARARGS, SYM_KWARGS,
    SYM_MESSAGES, SYM_TOOLS, SYM_DOCUMENTS, SYM_ADD_GEN, SYM_BOS, SYM_EOS,
    SYM_FIRST_GLOBAL, /* the globals follow, as in jinja_globals[] */
};

struct rs_jinja {
    jarena ar; /* nodes, strings, symbol table */
    jnode **body;
    uint32_t nbody;
    const char **sym_name;
    uint32_t *sym_len;
    uint32_t nsym;
    uint32_t *sym_idx; /* hash index: sym id + 1 */
    uint32_t sym_cap;
};

/* Symbol id of a name, or UINT32_MAX when the template never mentions it. */
uint32_t jinja_sym_find(const rs_jinja *t, const char *s, size_t n);

/* ---- render state --------------------------------------------------------- */

struct jvar {
    uint32_t sym;
    jv v;
};

typedef struct jscope {
    struct jscope *parent;
    struct jvar *v;
    uint32_t n, cap;
} jscope;

/* Output being produced: the render's text, or a macro's, a set block's, ... */
struct jbuf {
    char *p;
    size_t n, cap;
    int heap; /* malloc'd (the render's own output), else arena */
};

struct jerrsave {
    enum rs_jinja_errkind kind;
    unsigned line, col;
    char *msg;
    size_t len;
};

typedef struct jst {
    jmp_buf *jb;
    jarena ar;
    const rs_jinja *t;
    uint64_t steps, max_steps;
    size_t max_output;
    unsigned depth, max_depth;
    unsigned vdepth; /* nesting of recursive value operations (repr, ==, tojson) */
    struct jbuf *out;
    struct jbuf root;
    jscope *globals;
    const struct tm *now;
    const jnode *cur_stmt; /* position for errors raised away from a node */
    /* the error being raised */
    enum rs_jinja_errkind ekind;
    unsigned eline, ecol;
    const char *emsg;
    size_t emsg_len;
    char ebuf[1024];
} jst;

_Noreturn void jfail(jst *st, const jnode *at, enum rs_jinja_errkind kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
_Noreturn void jfail_str(jst *st, const jnode *at, enum rs_jinja_errkind kind, const char *msg,
                         size_t len);
_Noreturn void jraise_saved(jst *st, const struct jerrsave *e);
struct jerrsave *jerr_capture(jst *st); /* moves the pending error into the arena */

/* Runs fn(arg) and returns 0, or returns 1 with the error kept in *saved. */
int jtry(jst *st, void (*fn)(jst *st, void *arg), void *arg, struct jerrsave **saved);

static inline void jstep(jst *st, const jnode *at, uint64_t n)
{
    st->steps += n;
    if (__builtin_expect(st->steps > st->max_steps, 0))
        jfail(st, at, RS_JINJA_ERR_LIMIT,
              "the template ran more than %llu steps (runaway loop?)",
              (unsigned long long)st->max_steps);
}

/* ---- value functions (jinja_value.c)-------------------------------------- */

static inline jv jv_missing(void) { jv v = {0}; return v; }
static inline jv jv_none(void) { jv v = {0}; v.t = JT_NONE; return v; }
static inline jv jv_undef(void) { jv v = {0}; v.t = JT_UNDEF; return v; }
static inline jv jv_bool(int b) { jv v = {0}; v.t = JT_BOOL; v.u.i = !!b; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.t = JT_INT; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.t = JT_FLOAT; v.u.f = f; return v; }
static inline jv jv_str(const char *s, size_t n)
{
    jv v = {0};
    v.t = JT_STR;
    v.u.s = s;
    v.n = (uint32_t)n;
    return v;
}
#define JV_LIT(lit) jv_str(lit, sizeof(lit) - 1)
static inline int jv_is_str(jv v) { return v.t == JT_STR; }
static inline int jv_is_num(jv v) { return v.t == JT_INT || v.t == JT_FLOAT || v.t == JT_BOOL; }
static inline int jv_is_intlike(jv v) { return v.t == JT_INT || v.t == JT_BOOL; }

void *jalloc(jst *st, size_t n);  /* render arena, zeroed */
jv jv_str_copy(jst *st, const char *s, size_t n);
jv jv_undef_name(jst *st, const char *name, size_t len);
jv jv_undef_attr(jst *st, jv obj, const char *name, size_t len);
jv jv_undef_item(jst *st, jv obj, jv key);
jv jv_undef_hint(jst *st, const char *hint);
jv jv_undef_unsafe(jst *st, jv obj, const char *name, size_t len);

struct jlist *jlist_new(jst *st, uint8_t kind, uint32_t cap);
void jlist_push(jst *st, struct jlist *l, jv v);
jv jv_list(struct jlist *l);
struct jdict *jdict_new(jst *st, uint32_t cap);
jv jv_dict(struct jdict *d);
/* Sets d[k] = v keeping the first position of k; unhashable k raises at `at`. */
void jdict_set(jst *st, const jnode *at, struct jdict *d, jv k, jv v);
/* Pointer to d[k]'s value, or NULL. */
jv *jdict_get(jst *st, const jnode *at, const struct jdict *d, jv k);
jv *jdict_get_str(const struct jdict *d, const char *s, size_t n);

int jv_truthy(jst *st, const jnode *at, jv v);
int jv_eq(jst *st, const jnode *at, jv a, jv b);
/* a < b as Python: -1/0/1 ordering, raising TypeError for incomparable types. */
int jv_cmp(jst *st, const jnode *at, jv a, jv b, const char *opname);
uint64_t jv_hash(jst *st, const jnode *at, jv v);
const char *jv_type_name(jv v); /* Python's type name: "str", "NoneType", ... */

/* str(v) and repr(v), appended to b (arena buffer of st). */
void jv_str_into(jst *st, const jnode *at, struct jbuf *b, jv v);
void jv_repr_into(jst *st, const jnode *at, struct jbuf *b, jv v);
jv jv_to_str(jst *st, const jnode *at, jv v); /* str(v) as a value (strings returned as is) */
jv jv_repr(jst *st, const jnode *at, jv v);

/* Items of anything Python can iterate; undefined iterates as empty. Raises TypeError. */
jv *jv_iter_items(jst *st, const jnode *at, jv v, uint32_t *n, const struct jerrsave **pending);
/* len(v), raising TypeError as Python for types without one. */
int64_t jv_len(jst *st, const jnode *at, jv v);
/* Raises UndefinedError (or the SecurityError it carries) for an undefined v. */
_Noreturn void jv_undef_fail(jst *st, const jnode *at, jv v);
static inline void jv_check_defined(jst *st, const jnode *at, jv v)
{
    if (v.t == JT_UNDEF)
        jv_undef_fail(st, at, v);
}

/* ---- buffers ---------------------------------------------------------------- */

void jbuf_init(jst *st, struct jbuf *b, size_t cap);
void jbuf_grow(jst *st, struct jbuf *b, size_t extra);
static inline void jbuf_put(jst *st, struct jbuf *b, const char *s, size_t n)
{
    if (b->cap - b->n < n)
        jbuf_grow(st, b, n);
    if (n)
        __builtin_memcpy(b->p + b->n, s, n);
    b->n += n;
}
static inline void jbuf_putc(jst *st, struct jbuf *b, char c)
{
    if (b->cap == b->n)
        jbuf_grow(st, b, 1);
    b->p[b->n++] = c;
}
#define jbuf_lit(st, b, lit) jbuf_put(st, b, lit, sizeof(lit) - 1)
void jbuf_printf(jst *st, struct jbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
jv jbuf_take(struct jbuf *b); /* the buffer's text as a string value */

/* ---- numbers (jinja_num.c) ------------------------------------------------ */

/* Python's repr(float): shortest round-trip digits, "1e+16", "inf", "-0.0". */
size_t jnum_float_repr(double f, char out[32]);
jv jnum_binop(jst *st, const jnode *at, int op, jv a, jv b);
jv jnum_neg(jst *st, const jnode *at, jv a);
/* Python's int(str) for base 10 (whitespace, sign, underscores); 0 if not an integer. */
int jnum_parse_int(const char *s, size_t n, int base, int64_t *out);
/* Python's float(str); 0 if not a float. */
int jnum_parse_float(const char *s, size_t n, double *out);
/* Python's round(x, ndigits) for floats. */
double jnum_round(double x, int64_t ndigits);

/* ---- strings (jinja_str.c) -------------------------------------------------- */

/* Code points in s[0..n) (valid UTF-8; template text and JSON input are). */
size_t jstr_cplen(const char *s, size_t n);
/* Byte offset of code point index i (clamped to n). */
size_t jstr_cpoff(const char *s, size_t n, size_t i);
int jstr_isspace(uint32_t cp); /* Python str.isspace for one code point */
uint32_t jstr_decode(const char *s, size_t n, size_t *adv);
/* Python's whitespace-stripping used by trim: which = 1 left, 2 right, 3 both. */
jv jstr_strip(jst *st, jv s, const char *chars, size_t nchars, int have_chars, int which);
jv jstr_escape(jst *st, jv s); /* markupsafe.escape */
void jstr_lower_into(jst *st, struct jbuf *b, const char *s, size_t n);
void jstr_upper_into(jst *st, struct jbuf *b, const char *s, size_t n);
jv jstr_lower(jst *st, jv s);
jv jstr_upper(jst *st, jv s);
jv jstr_capitalize(jst *st, jv s);
jv jstr_title_py(jst *st, jv s);   /* str.title */
jv jstr_swapcase(jst *st, jv s);
jv jstr_replace(jst *st, const jnode *at, jv s, jv old, jv new_, int64_t count);
jv jstr_splitlines(jst *st, jv s, int keepends);
jv jstr_split(jst *st, const jnode *at, jv s, jv sep, int64_t maxsplit, int right);
jv jstr_slice(jst *st, jv s, int64_t start, int64_t stop, int64_t step, int have_start,
              int have_stop);
jv jstr_index(jst *st, jv s, int64_t i, int *ok);
/* Python's PySlice_AdjustIndices (with None bounds as have_* = 0); returns the slice length. */
int64_t jslice_adjust(int64_t len, int64_t *start, int64_t *stop, int64_t step, int have_start,
                      int have_stop);
int64_t jstr_find(jst *st, jv s, jv sub, int64_t start, int64_t end, int right);
int64_t jstr_count(jst *st, jv s, jv sub, int64_t start, int64_t end);
int jstr_contains(const char *h, size_t hn, const char *nd, size_t nn);
/* Unicode properties used by str.isalpha() etc. (jinja_case.c). */
enum { JC_ALPHA = 1, JC_DECIMAL = 2, JC_DIGIT = 4, JC_NUMERIC = 8, JC_UPPER = 16, JC_LOWER = 32,
       JC_CASED = 64, JC_IGNORABLE = 128, JC_TITLE = 256, JC_PRINTABLE = 512,
       JC_IDSTART = 1024, JC_IDCONT = 2048, JC_SPACE = 4096 };
unsigned jcase_props(uint32_t cp);
/* Full case mapping of cp into out (up to 3 code points); returns the count. */
int jcase_map(uint32_t cp, int which, uint32_t out[3]); /* which: 0 lower, 1 upper, 2 title, 3 fold */
void jstr_put_cp(jst *st, struct jbuf *b, uint32_t cp);

/* Python %-formatting: fmt % args (args a tuple, a dict, or one value). */
jv jstr_percent(jst *st, const jnode *at, jv fmt, jv args);
/* str.format(*args, **kwargs). */
jv jstr_format(jst *st, const jnode *at, jv fmt, struct jcall *c);

/* ---- JSON (jinja_json.c) ---------------------------------------------------- */

jv jjson_to_value(jst *st, const json_t *j, unsigned depth);
struct jdump_opts {
    int ensure_ascii;
    int indent_set;
    const char *indent;
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
    int sort_keys;
};
void jjson_dump(jst *st, const jnode *at, struct jbuf *b, jv v, const struct jdump_opts *o);

/* ---- evaluation (jinja_eval.c, jinja_exec.c) --------------------------------- */

jv jeval(jst *st, jscope *sc, const jnode *n);
jv jeval_binop(jst *st, const jnode *at, int op, jv a, jv b); /* Python a op b (enum jop) */
int jcompare(jst *st, const jnode *at, int op, jv a, jv b);  /* ==, !=, <, ..., in */
jv jeval_call(jst *st, jscope *sc, const jnode *call, struct jmacro *caller);
jv jscope_lookup(jst *st, jscope *sc, uint32_t sym, const jnode *at);
void jscope_set(jst *st, jscope *sc, uint32_t sym, jv v);
jscope *jscope_new(jst *st, jscope *parent);
/* Jinja's environment.getattr / getitem under the immutable sandbox. */
jv jget_attr(jst *st, const jnode *at, jv obj, const char *name, size_t len);
jv jget_item(jst *st, const jnode *at, jv obj, jv key);
jv jget_pyattr(jst *st, const jnode *at, jv obj, const char *name, size_t len); /* no item fallback */
/* Calls any callable value with evaluated arguments. */
jv jcall_value(jst *st, const jnode *at, jv fn, jv *args, uint32_t nargs, struct jkwarg *kw,
               uint32_t nkw);
/* Binds arguments to a builtin's parameters (TypeError as Python's on mismatch). */
void jbind(jst *st, const jnode *at, const struct jbuiltin *b, jv *args, uint32_t nargs,
           struct jkwarg *kw, uint32_t nkw, struct jcall *c);
/* Applies a filter chain whose innermost input is `input` (set/filter blocks). */
jv jeval_filter_chain(jst *st, jscope *sc, const jnode *f, jv input);
/* Calls a filter or test by name (map('upper'), select('odd')) on v. */
jv jcall_filter_named(jst *st, const jnode *at, jv name, jv v, jv *args, uint32_t nargs,
                      struct jkwarg *kw, uint32_t nkw);
int jcall_test_named(jst *st, const jnode *at, jv name, jv v, jv *args, uint32_t nargs,
                     struct jkwarg *kw, uint32_t nkw);
/* Invokes a macro (or caller) value. */
jv jmacro_call(jst *st, const jnode *at, struct jmacro *m, jv *args, uint32_t nargs,
               struct jkwarg *kw, uint32_t nkw);
/* Runs statements into st->out; returns 0, or 1/2 for a pending break/continue. */
int jexec_list(jst *st, jscope *sc, jnode *const *body, uint32_t n);
/* Recursive loop call: loop(items). */
jv jloop_recurse(jst *st, const jnode *at, struct jloop *lp, jv iterable);

/* ---- builtin tables ---------------------------------------------------------- */

const struct jbuiltin *jinja_builtin_search(const struct jbuiltin *tab, size_t n, const char *name,
                                            size_t len); /* tab sorted by name */
const struct jbuiltin *jinja_filter_find(const char *name, size_t n);
const struct jbuiltin *jinja_test_find(const char *name, size_t n);
/* A method of Python's str/list/dict/... by receiver value, or NULL. */
const struct jbuiltin *jinja_method_find(jv self, const char *name, size_t n, int *unsafe);
extern const struct jbuiltin jinja_globals[];
extern const unsigned jinja_n_globals;
/* loop.<name> for attribute access. */
jv jloop_attr(jst *st, const jnode *at, struct jloop *lp, const char *name, size_t n, int *found);

/* Shared by the filters: Jinja's make_attrgetter over "a.b.0". */
jv jattr_path(jst *st, const jnode *at, jv item, jv attr, jv dflt);
int64_t jarg_int(jst *st, const jnode *at, jv v, const char *what);
int jarg_bool(jst *st, const jnode *at, jv v, int dflt);

#endif
