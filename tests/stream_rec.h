/* SPDX-License-Identifier: MIT */
/*
 * What one streamed request delivered to the application, checked as it
 * arrives: the client library's result plus counts of deltas and finals and
 * a flag for anything out of order. Shared by the client, end-to-end and
 * chaos tests, which all hold a delivery to "every delta once, in order,
 * then exactly one final".
 */
#ifndef RS_TEST_STREAM_REC_H
#define RS_TEST_STREAM_REC_H

#include <stdint.h>

#include "client/client.h"

struct stream_rec {
    struct rs_client_result res;
    uint32_t n_deltas, n_finals;
    int out_of_order; /* a delta with an unexpected seq (a repeat or a gap), or anything after
                         the final */
};

/* Records ev (a client callback's event) into r. */
static inline void stream_rec_add(struct stream_rec *r, const struct rs_client_event *ev)
{
    if (r->n_finals > 0 || (ev->kind == RS_CLIENT_EV_DELTA && ev->seq != r->n_deltas) ||
        (ev->kind == RS_CLIENT_EV_FINAL && ev->status == RS_CLIENT_OK && ev->seq != r->n_deltas))
        r->out_of_order = 1;
    r->n_deltas += ev->kind == RS_CLIENT_EV_DELTA;
    r->n_finals += ev->kind == RS_CLIENT_EV_FINAL;
    if (rs_client_result_add(&r->res, ev) != RS_OK)
        r->out_of_order = 1;
}

#endif
