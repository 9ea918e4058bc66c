/* The op cases a device backend's kernels leave to the CPU code, shared by both backends: which cases those are
 * (so that the CUDA build's dispatch and the CPU build's tests decide alike) and the one place that counts or
 * refuses them (ops/cpu/fallback.c, compiled in both builds). The public side is in ops.h: ops_fallbacks and
 * ops_fallback_device. */
#ifndef SEGTRAIN_OPS_FALLBACK_H
#define SEGTRAIN_OPS_FALLBACK_H

#include "segtrain/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NULL when the CUDA attention kernels serve shape s with mask (NULL: none), else the case they leave to the CPU
 * ("mask", "cross (Tq != Tk)", ...). Shapes out of the kernels' grid, or invalid, are not cases: the CUDA op checks
 * those itself. */
const char *fallback_attention_case(const attn_shape *s, const attn_mask *mask);

/* The CPU code of op `op` about to run case `why` (both string literals: they are kept): when data lies in the device's memory (ops_fallback_device) the
 * call is a fallback, counted under (op, why), or, under the strict setting, refused (ST_ERR_UNSUPPORTED, one line
 * naming the op and the case) before it computes anything. ST_OK otherwise. */
st_status fallback_enter(const char *op, const char *why, const void *data);

#ifdef __cplusplus
}
#endif

#endif
