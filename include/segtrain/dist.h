/* Data-parallel training over MPI: which rank this process is, and the one reduction a step needs.
 *
 * A build without MPI (or a process not started by mpirun) is one rank of one, and every call is a no-op. The
 * reductions are deterministic: each rank sums its share of the vector over the ranks in rank order (a
 * reduce-scatter by MPI_Alltoallv), then every rank gathers every share (MPI_Allgatherv); the bits depend on the
 * number of ranks, never on message timing, and every rank ends with the same bits. */
#ifndef SEGTRAIN_DIST_H
#define SEGTRAIN_DIST_H

#include <stdbool.h>
#include <stdint.h>

#include "segtrain/status.h"

/* Joins the MPI job when launched by mpirun (OpenMPI's or PMI's environment), else stays one rank. Errors
 * return as statuses (MPI_ERRORS_RETURN) rather than aborting. */
st_status dist_init(int *argc, char ***argv);
void dist_finalize(void);
int dist_rank(void);
int dist_size(void);
/* Whether this build can join an MPI job. */
bool dist_built(void);

/* This rank's share of n floats: first .. first + count - 1 (the ranks' shares in order cover all n). */
void dist_share(int64_t n, int64_t *first, int64_t *count);
/* The share of rank `rank` of `ranks` (what dist_share gives that rank), and the lowest rank with the largest share:
 * a plan for any rank of a job (the shares differ by at most one float). */
void dist_share_of(int64_t n, int rank, int ranks, int64_t *first, int64_t *count);
int dist_largest_share(int64_t n, int ranks);
/* Sums x (n floats, the same n on every rank) over the ranks, in place, by the deterministic order above: the
 * reduce-scatter leaves the sum in this rank's share of x alone, the all-gather fills every share from its rank,
 * dist_sum does both. scratch holds dist_scratch_floats(n) floats. */
st_status dist_reduce_scatter(float *x, int64_t n, float *scratch);
st_status dist_allgather(float *x, int64_t n);
st_status dist_sum(float *x, int64_t n, float *scratch);
/* Rank 0 receives every rank's share (mine: its count floats) into all (n floats; unused elsewhere). */
st_status dist_gather_root(const float *mine, int64_t n, float *all);
int64_t dist_scratch_floats(int64_t n);
/* The same for a job of `ranks` ranks (0 for one). */
int64_t dist_scratch_floats_for(int64_t n, int ranks);
/* The sum over ranks of one double, added in rank order. */
st_status dist_sum_double(double *v);
/* Whether every rank holds rank 0's n values (n the same on every rank): *index -1 when all do, else the lowest index
 * at which a rank differs, and *rank the lowest rank that differs there (the same answer on every rank). */
st_status dist_compare(const uint64_t *v, int n, int *index, int *rank);
/* Seconds spent in dist_sum since the last call (for the step's log). */
double dist_take_seconds(void);

#endif
