/* Memory pools: the ground truth for every peak segtrain reports.
 *
 * Every allocation of a training step comes from a pool and carries a tag saying what it holds. A pool
 * tracks live and peak bytes, in total and per tag; peak is the largest sum of live allocation sizes
 * (the requested sizes, exactly: the notion of a GPU framework's max-memory-allocated). A pool with a
 * capacity refuses an allocation that would exceed it with ST_ERR_OOM (device) or ST_ERR_HOST_OOM (host)
 * and stays usable. All functions are thread-safe (a copy engine frees from its own thread). */
#ifndef SEGTRAIN_POOL_H
#define SEGTRAIN_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include "segtrain/status.h"

typedef enum mem_tag {
    MEM_WEIGHTS,
    MEM_GRADIENTS,
    MEM_OPTIMIZER,   /* optimizer state */
    MEM_ACTIVATIONS, /* tensors kept for backward, and states passed between blocks */
    MEM_BOUNDARIES,  /* saved segment inputs of checkpointed segments */
    MEM_WORKSPACE,   /* transient buffers freed before the op that took them returns */
    MEM_TAG_COUNT
} mem_tag;

typedef enum pool_kind { POOL_DEVICE, POOL_HOST } pool_kind;

typedef struct pool pool;

typedef struct pool_stats {
    size_t live, peak;                      /* bytes */
    size_t live_by_tag[MEM_TAG_COUNT];
    size_t peak_by_tag[MEM_TAG_COUNT];      /* each tag's own highest live */
    size_t at_peak_by_tag[MEM_TAG_COUNT];   /* live per tag at the moment the total peak was reached */
    size_t allocations;                     /* live allocation count */
} pool_stats;

/* capacity 0 means unlimited. Returns NULL only if the pool's own bookkeeping cannot be allocated. */
pool *pool_create(pool_kind kind, size_t capacity);

/* A dry pool: the same accounting (tags, live, peak, the capacity and its out-of-memory status, leak reports)
 * with no memory behind it. Its allocations are unique, non-NULL addresses that fault on any access; the ops,
 * the copy engine and every loop over data do nothing on them (pool_is_dry_ptr), so running a step's real code
 * on dry pools measures its memory without its memory or its arithmetic. */
pool *pool_create_dry(pool_kind kind, size_t capacity);
bool pool_is_dry(const pool *p);

/* A pool that sub-allocates one block of memory it is given, [base, base + bytes), which it never reads or writes (a
 * GPU's memory): the same tags and accounting, with capacity = bytes, each allocation aligned to align (a power of two
 * dividing base's address) and placed in the smallest free range that holds it. Headers live in a host-side table.
 * Alignment and fragmentation can refuse an allocation that the capacity would allow: ST_ERR_OOM (or HOST_OOM) that
 * says so. ops (may be NULL, as may each function): release(base) at pool_destroy, and zero(ptr, bytes), which
 * zero_bytes and pool_alloc_zero call for the arena's memory instead of a memset. NULL on bad arguments or no host
 * memory for the table, and when the range overlaps a live arena pool's; at most 16 live at once. */
typedef struct pool_arena_ops {
    void (*release)(void *base, void *ctx);
    void (*zero)(void *ptr, size_t bytes, void *ctx);
    void *ctx;
} pool_arena_ops;
pool *pool_create_arena(pool_kind kind, void *base, size_t bytes, size_t align, const pool_arena_ops *ops);
/* The arena pool whose block holds ptr (anywhere inside an allocation or between them), or NULL: how a backend tells
 * its device memory from the host's without a registry of its own. Cheap when no arena pool exists. */
pool *pool_arena_of(const void *ptr);
/* An arena pool's footprint: the end of the highest range it ever handed out, from base (0 for other pools). It is
 * peak plus what alignment and fragmentation cost, the arena size a step needs. */
size_t pool_arena_high(pool *p);
/* Whether ptr (NULL: no) lies in the address range dry pools hand out: an allocation or a view into one. */
bool pool_is_dry_ptr(const void *ptr);

/* Frees the pool. Anything still live is a leak: each one is reported on stderr (size, tag, what) and
 * freed. Returns the number of leaked allocations, so tests can assert zero. */
size_t pool_destroy(pool *p);

/* Allocates `bytes` (64-byte aligned, uninitialised) for `what` (a static string naming the tensor, shown
 * in OOM and leak reports). On failure *out is NULL and the status says why; the pool is unchanged. */
st_status pool_alloc(pool *p, size_t bytes, mem_tag tag, const char *what, void **out);

/* As pool_alloc, zero-filled. */
st_status pool_alloc_zero(pool *p, size_t bytes, mem_tag tag, const char *what, void **out);
/* memset(ptr, 0, bytes) (nothing for a dry ptr, the arena's zero for an arena's), with every OpenMP thread for
 * large buffers: a lone memset of a backward's gradient buffers leaves the other cores waiting (3.7 % of a dit-s2
 * step, twice that in wall time on 2 cores). */
void zero_bytes(void *ptr, size_t bytes);

/* Frees a pointer returned by pool_alloc on this pool. NULL is a no-op. */
void pool_free(pool *p, void *ptr);

/* Moves a live allocation to another tag (a block's output that becomes a checkpoint boundary). */
void pool_retag(pool *p, void *ptr, mem_tag tag);

/* The requested size of a live allocation. */
size_t pool_size_of(const void *ptr);

void pool_get_stats(pool *p, pool_stats *out);
size_t pool_live(pool *p);
size_t pool_peak(pool *p);

/* Starts a new peak window: peak becomes the current live bytes (per tag too). */
void pool_reset_peak(pool *p);

/* What was live at the peak, by name, for `segtrain plan --parts`. With recording on, each new peak (and
 * pool_reset_peak) copies the live list's (what, tag, bytes): O(live) per new peak, so it is off by default.
 * pool_peak_parts aggregates that copy by name and tag, largest first, writes up to max of them and returns how
 * many there are in all (0 with recording off, or when the copy could not be allocated). */
typedef struct pool_part {
    const char *what;
    mem_tag tag;
    size_t bytes, count;
} pool_part;
void pool_record_peak_parts(pool *p, bool on);
size_t pool_peak_parts(pool *p, pool_part *out, size_t max);

size_t pool_capacity(const pool *p);
void pool_set_capacity(pool *p, size_t capacity);
/* What this machine can still give without swapping (Linux's MemAvailable), in bytes; 0 when it does not say. The
 * system grants more than it has (overcommit) and kills the process that touches too much, so a plan past this is
 * refused before it allocates, not left to the kernel. */
size_t pool_system_available(void);
pool_kind pool_get_kind(const pool *p);

const char *mem_tag_name(mem_tag tag);

#endif
