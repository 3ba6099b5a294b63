/* SPDX-License-Identifier: MIT */
/*
 * The constraint fields' readers and writers, for wire_client.c's generate
 * table (ipc/wire*.c only). Each reads or writes one value; errors name the
 * field through r->field as every wire reader does.
 */
#ifndef RS_WIRE_CONSTRAINT_IMPL_H
#define RS_WIRE_CONSTRAINT_IMPL_H

#include "ipc/wire_constraint.h"
#include "ipc/wire_impl.h"

rs_err wire_rd_constraint(struct wire_rd *r, struct rs_wire_constraint *c);
rs_err wire_rd_logit_bias(struct wire_rd *r, struct rs_wire_constraint *c);
rs_err wire_rd_allowed_ids(struct wire_rd *r, struct rs_wire_constraint *c);

void wire_wr_constraint(struct wire_wr *w, const struct rs_wire_constraint *c);
void wire_wr_logit_bias(struct wire_wr *w, const struct rs_wire_constraint *c);

/* Encoder-side mirror of the readers (RS_EINVAL, logged). */
rs_err wire_check_constraint(const struct rs_wire_constraint *c, int has_cx, int has_bias,
                             int has_allowed);

#endif
