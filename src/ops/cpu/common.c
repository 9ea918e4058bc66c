/* Threads and kept state, shared by every CPU op. */
#include <cblas.h>
#include <omp.h>

#include "segtrain/ops.h"

void op_state_release(op_state *s)
{
    if (s->data) pool_free(s->pool, s->data);
    *s = (op_state){0};
}

/* OpenBLAS's OpenMP build runs on this same OpenMP pool: inside our parallel regions it runs single-threaded,
 * outside them it uses omp_get_max_threads(). One setting therefore governs both. */
void ops_set_threads(int n)
{
    if (n < 1) n = 1;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int ops_threads(void) { return omp_get_max_threads(); }

const char *ops_blas_info(void) { return openblas_get_config(); }
