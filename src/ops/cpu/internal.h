/* Helpers private to the CPU ops. */
#ifndef SEGTRAIN_OPS_CPU_INTERNAL_H
#define SEGTRAIN_OPS_CPU_INTERNAL_H

#include <cblas.h>
#include <stdint.h>

#include "segtrain/ops.h"

/* Allocates the op's kept state of `bytes` (MEM_ACTIVATIONS) into keep; a NULL keep keeps nothing. */
static inline st_status op_state_alloc(op_state *keep, pool *p, size_t bytes, const char *what)
{
    if (!keep) return ST_OK;
    *keep = (op_state){.pool = p, .bytes = bytes};
    return pool_alloc(p, bytes, MEM_ACTIVATIONS, what, &keep->data);
}

#endif
