/* Fallbacks: an op given the device's memory in a case its kernel does not serve (ops.h, ops/fallback.h). */
#include "ops/fallback.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define FALLBACK_CASES 64 /* distinct (op, case) pairs: attention's 2 x 7 and the 8 convolutions fit */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static op_fallback cases[FALLBACK_CASES];
static int n_cases;
static bool (*device_holds)(const void *p);

const char *fallback_attention_case(const attn_shape *s, const attn_mask *mask)
{
    if (s->mechanism == ATTN_LINEAR) return "linear";
    if (s->mechanism == ATTN_MATH) return "math";
    if (s->kv_tokens && s->kv_tokens != s->tokens) return "cross (Tq != Tk)";
    if (s->kv_heads && s->kv_heads != s->heads) return "grouped-query";
    if (s->window) return "window";
    if (mask) return "mask";
    if (s->head_dim > 128) return "head_dim > 128";
    return NULL;
}

void ops_fallback_device(bool (*holds)(const void *p)) { device_holds = holds; }

static bool strict(void)
{
    const char *env = getenv("SEGTRAIN_STRICT_OPS"); /* read at each fallback: they are few, and slow anyway */
    return env && !strcmp(env, "1");
}

st_status fallback_enter(const char *op, const char *why, const void *data)
{
    if (!device_holds || !data || !device_holds(data)) return ST_OK;
    if (strict())
        return st_fail(ST_ERR_UNSUPPORTED, "%s: %s: no device kernel serves this case, and the strict setting "
                       "(SEGTRAIN_STRICT_OPS=1) refuses to run it on the CPU over the device's memory", op, why);
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < n_cases && (strcmp(cases[i].op, op) || strcmp(cases[i].why, why))) i++;
    if (i == n_cases && n_cases < FALLBACK_CASES) cases[n_cases++] = (op_fallback){op, why, 0};
    if (i < n_cases) cases[i].calls++;
    pthread_mutex_unlock(&lock);
    return ST_OK;
}

const op_fallback *ops_fallbacks(int *n)
{
    *n = n_cases;
    return cases;
}

void ops_fallback_reset(void)
{
    pthread_mutex_lock(&lock);
    n_cases = 0;
    pthread_mutex_unlock(&lock);
}
