/* SPDX-License-Identifier: MIT */
/*
 * Internals shared by the wire encoders and decoders (ipc/wire*.c only): a
 * strict msgpack reader over a byte buffer and a writer over rs_wire_buf.
 * The reader never allocates and never recurses past RS_WIRE_DEPTH_MAX, so a
 * hostile message costs at most its own bytes; every failure fills the
 * caller's rs_wire_error with a code and a message naming the field. The
 * writer packs through msgpack-c's packer and records overflow in the buffer.
 */
#ifndef RS_WIRE_IMPL_H
#define RS_WIRE_IMPL_H

#include <msgpack.h>

#include "ipc/wire.h"

/* What the next value is, by its msgpack format byte. */
enum wire_kind {
    WK_NIL, WK_BOOL, WK_INT, WK_FLOAT, WK_STR, WK_BIN, WK_ARRAY, WK_MAP, WK_EXT, WK_BAD, WK_END
};

struct wire_rd {
    const uint8_t *p;           /* next unread byte */
    const uint8_t *end;         /* one past the last byte */
    struct rs_wire_error *err;  /* filled on failure */
    const char *field;          /* field named in error messages; NULL = the message itself */
    int64_t index;              /* array item named in error messages; -1 = none */
};

/* One decoded msgpack header (wire_rd_tok); str/bin/ext payloads are left in place at `data`. */
struct wire_tok {
    enum wire_kind kind;
    uint32_t len;        /* str/bin/ext: payload bytes; array: items; map: pairs */
    const uint8_t *data; /* str/bin/ext payload */
    bool neg;            /* int: value < 0 (then i holds it), else u */
    uint64_t u;
    int64_t i;
    double f;
    bool b;
};

void wire_rd_init(struct wire_rd *r, const void *buf, size_t len, struct rs_wire_error *err);
enum wire_kind wire_rd_kind(const struct wire_rd *r);
const char *wire_kind_name(enum wire_kind kind);

/* Fills r->err (prefixing the field name) and returns RS_EPROTO. */
rs_err wire_fail(struct wire_rd *r, enum rs_wire_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Each reads one value of the named type or fails with wrong_type / too_large / bad_request. */
rs_err wire_rd_map(struct wire_rd *r, uint32_t *n);
rs_err wire_rd_array(struct wire_rd *r, uint32_t *n, uint32_t max);
rs_err wire_rd_array_exact(struct wire_rd *r, uint32_t n);
rs_err wire_rd_str(struct wire_rd *r, struct rs_wire_str *s, uint32_t max);
rs_err wire_rd_text(struct wire_rd *r, struct rs_wire_str *s, uint32_t max); /* + UTF-8 check */
rs_err wire_rd_id(struct wire_rd *r, char out[RS_WIRE_ID_MAX + 1], bool allow_empty);
rs_err wire_rd_u64(struct wire_rd *r, uint64_t *v, uint64_t max);
rs_err wire_rd_u32(struct wire_rd *r, uint32_t *v, uint32_t max);
rs_err wire_rd_i64(struct wire_rd *r, int64_t *v, int64_t min, int64_t max);
rs_err wire_rd_f32(struct wire_rd *r, float *v); /* float32, float64 or any integer */
rs_err wire_rd_bool(struct wire_rd *r, bool *v);
rs_err wire_rd_skip(struct wire_rd *r);          /* any value, depth <= RS_WIRE_DEPTH_MAX */
rs_err wire_rd_ids(struct wire_rd *r, struct rs_wire_ids *out, uint32_t max);
rs_err wire_rd_lps(struct wire_rd *r, struct rs_wire_lps *out, uint32_t max);
rs_err wire_rd_lp(struct wire_rd *r, struct rs_wire_logprob *out);
rs_err wire_rd_done(struct wire_rd *r);          /* no trailing bytes */
/* Any one header: scalars whole, str/bin/ext with their payload skipped, containers' counts. */
rs_err wire_rd_tok(struct wire_rd *r, struct wire_tok *t);

/* One key of a map: `key` on the wire, `path` in error messages (e.g. "usage.prompt_tokens"). */
struct wire_field {
    const char *key;
    const char *path;
};

/* Decodes value tab[idx] for a map being read; r->field is already set to its path. */
typedef rs_err (*wire_field_fn)(struct wire_rd *r, unsigned idx, void *ctx);

/*
 * Reads the n_pairs key/value pairs of a map whose header was read: each key
 * must be in tab (else unknown_field) and appear once (else bad_request);
 * fn decodes the value. Bits of `required` (1 << idx) must all be seen (else
 * missing_field). *seen gets the bits of the keys present.
 */
rs_err wire_rd_fields(struct wire_rd *r, uint32_t n_pairs, const struct wire_field *tab,
                      unsigned n_tab, uint64_t required, wire_field_fn fn, void *ctx,
                      uint64_t *seen);

/* "v", "type" and "id" of a client-facing message, found before its fields are decoded. */
struct wire_hdr {
    enum rs_wire_type type;
    char id[RS_WIRE_ID_MAX + 1]; /* "" when absent or not a valid id */
};

/*
 * First pass over a client-facing message (a map of at most max_len bytes):
 * checks "v" against RS_WIRE_VERSION and names the type; grabs "id" when it
 * is a valid id so even a rejected request can be answered by id.
 */
rs_err wire_rd_header(const void *buf, size_t len, size_t max_len, struct wire_hdr *h,
                      struct rs_wire_error *err);

/*
 * The start of every decoder: wire_rd_header, then r set on the message's
 * map with *n_fields its entries. h->id is set even when it fails.
 */
rs_err wire_rd_message(const void *buf, size_t len, size_t max_len, struct wire_hdr *h,
                       struct wire_rd *r, uint32_t *n_fields, struct rs_wire_error *err);

/* Fills err with code and a formatted message; returns RS_EPROTO (validators: RS_EINVAL). */
rs_err wire_set_error(struct rs_wire_error *err, enum rs_wire_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writer: packs into b; overflow is remembered in b->failed and reported by wire_wr_end. */
struct wire_wr {
    msgpack_packer pk;
    struct rs_wire_buf *b;
};

void wire_wr_begin(struct wire_wr *w, struct rs_wire_buf *b);
rs_err wire_wr_end(struct wire_wr *w); /* RS_OK, or RS_ERANGE when the message did not fit */
void wire_wr_map(struct wire_wr *w, uint32_t n);
void wire_wr_array(struct wire_wr *w, uint32_t n);
void wire_wr_key(struct wire_wr *w, const char *key);
void wire_wr_str(struct wire_wr *w, const char *p, size_t len);
void wire_wr_u64(struct wire_wr *w, uint64_t v);
void wire_wr_i64(struct wire_wr *w, int64_t v);
void wire_wr_f32(struct wire_wr *w, float v);
void wire_wr_bool(struct wire_wr *w, bool v);
void wire_wr_ids(struct wire_wr *w, const struct rs_wire_ids *ids);
void wire_wr_lps(struct wire_wr *w, const struct rs_wire_lps *lps);
void wire_wr_raw(struct wire_wr *w, const void *p, size_t n); /* bytes already msgpack */
/* Writes "v" and "type" (the first two pairs of every client-facing map). */
void wire_wr_head(struct wire_wr *w, enum rs_wire_type type);

/*
 * A conversation document (wire_doc.h) at r: a value of kind `top` (WK_ARRAY
 * or WK_MAP) of at most max_items entries, each top-level array item of kind
 * `item` (WK_END = any), JSON types only, depth and nodes bounded. Sets *out
 * to a view of its bytes. wire_check_doc runs the same walk for an encoder.
 */
struct rs_wire_doc;
rs_err wire_rd_doc(struct wire_rd *r, struct rs_wire_doc *out, enum wire_kind top,
                   enum wire_kind item, uint32_t max_items);
rs_err wire_check_doc(const char *what, const struct rs_wire_doc *d, enum wire_kind top,
                      enum wire_kind item, uint32_t max_items);

/* Encoder-side checks, mirroring the decoders so every encoded message decodes. */
rs_err wire_check_text(const char *what, const struct rs_wire_str *s, uint32_t max);
rs_err wire_check_ids(const char *what, const struct rs_wire_ids *ids, uint32_t max);
rs_err wire_check_lps(const char *what, const struct rs_wire_lps *lps, uint32_t max);

#endif
