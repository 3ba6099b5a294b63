/* SPDX-License-Identifier: MIT */
/*
 * Conversation documents on the wire (PROTOCOL.md §3.1): the `messages`,
 * `tools` and `chat_template_kwargs` fields of generate are free-form JSON
 * values packed as msgpack, because chat templates read whatever keys a
 * conversation carries (tool_calls, reasoning_content, content parts, ...).
 * The decoder checks such a value in place (JSON-representable types only,
 * valid UTF-8, bounded depth, item and node counts) and keeps a view of its
 * bytes; tokenizerd turns the view into JSON for the renderer. Packing from
 * JSON serves the clients that hold conversations as JSON (ringserve-cli,
 * gatewayd). Rendering is not here (common/jinja.h).
 */
#ifndef RS_WIRE_DOC_H
#define RS_WIRE_DOC_H

#include <jansson.h>

#include "ipc/wire.h"

#define RS_WIRE_MESSAGES_MAX 1024u   /* messages in one conversation */
#define RS_WIRE_TOOLS_MAX 256u       /* tool definitions */
#define RS_WIRE_KWARGS_MAX 64u       /* chat_template_kwargs entries */
#define RS_WIRE_DOC_DEPTH_MAX 32     /* nesting inside one document value */
#define RS_WIRE_DOC_NODES_MAX 32768u /* values (keys included) in one document */
#define RS_WIRE_DOC_KEY_MAX 256u     /* bytes of one map key */

/*
 * A document: the msgpack bytes of one array or map value. Decoders set it
 * to a view into the message buffer (valid as long as it is); for encoding
 * it views bytes rs_wire_doc_pack wrote (or any packed value: the encoder
 * checks them as the decoder would).
 */
struct rs_wire_doc {
    uint32_t n;            /* items of the top array, or pairs of the top map */
    const uint8_t *packed; /* the whole value's bytes */
    size_t len;            /* bytes at packed */
};

/*
 * Packs JSON value j (an array or object; nested at most RS_WIRE_DOC_DEPTH_MAX)
 * into out (reset first; out's limit bounds the size) and points *doc at the
 * bytes (borrowing out: valid until out is written again or freed). Object
 * keys keep their order; integers stay integers, reals become float64.
 * RS_OK, RS_EINVAL (not an array/object, too deep, over RS_WIRE_DOC_NODES_MAX
 * values, a key over RS_WIRE_DOC_KEY_MAX bytes, a non-finite real: what the
 * decoder would refuse) or
 * RS_ERANGE (does not fit out). Any thread.
 */
rs_err rs_wire_doc_pack(const json_t *j, struct rs_wire_buf *out, struct rs_wire_doc *doc);

/*
 * Converts a decoded (or packed) document into a new JSON value (*out owns
 * it: json_decref). Map key order is kept. RS_OK, RS_EINVAL when a map holds
 * a key twice (msg says which), RS_ENOMEM. msg (msg_size bytes) gets the
 * reason on failure. Any thread.
 */
rs_err rs_wire_doc_to_json(const struct rs_wire_doc *d, json_t **out, char *msg,
                           size_t msg_size);

#endif
