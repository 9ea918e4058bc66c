/* Data-parallel ranks over MPI (dist.h). Without SEGTRAIN_MPI every process is rank 0 of 1. */
#include "segtrain/dist.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"

static int rank_, size_ = 1;
static double comm_seconds;

int dist_rank(void) { return rank_; }
int dist_size(void) { return size_; }

double dist_take_seconds(void)
{
    const double s = comm_seconds;
    comm_seconds = 0;
    return s;
}

void dist_share_of(int64_t n, int rank, int ranks, int64_t *first, int64_t *count)
{
    *first = n * rank / ranks;
    *count = n * (rank + 1) / ranks - *first;
}

void dist_share(int64_t n, int64_t *first, int64_t *count) { dist_share_of(n, rank_, size_, first, count); }

int dist_largest_share(int64_t n, int ranks)
{
    int64_t first, count, most = -1;
    int at = 0;
    for (int r = 0; r < ranks; r++)
        if (dist_share_of(n, r, ranks, &first, &count), count > most) most = count, at = r;
    return at;
}

int64_t dist_scratch_floats_for(int64_t n, int ranks)
{
    int64_t first, count;
    dist_share_of(n, dist_largest_share(n, ranks), ranks, &first, &count);
    return ranks > 1 ? count * ranks : 0;
}

int64_t dist_scratch_floats(int64_t n) { return dist_scratch_floats_for(n, size_); }

#ifdef SEGTRAIN_MPI
#include <mpi.h>

bool dist_built(void) { return true; }

static st_status mpi_fail(int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return st_fail(ST_ERR_IO, "rank %d of %d: %s failed: %s (another rank has probably died)", rank_, size_, what,
                   text);
}

st_status dist_init(int *argc, char ***argv)
{
    /* a plain `segtrain train` stays a single process with no MPI runtime started */
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_SIZE") && !getenv("PMIX_RANK")) return ST_OK;
    int rc = MPI_Init(argc, argv);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Init");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    return ST_OK;
}

void dist_finalize(void)
{
    int on = 0, off = 0;
    MPI_Initialized(&on);
    MPI_Finalized(&off);
    if (on && !off) MPI_Finalize();
}

/* Every rank's share as MPI's counts and offsets. */
static st_status layout(int64_t n, int *counts, int *displs)
{
    if (n > INT_MAX) /* MPI's counts and offsets are ints */
        return st_fail(ST_ERR_UNSUPPORTED, "data-parallel training reduces at most %d trainable floats, and this run "
                       "trains %lld (train LoRA, or fewer parameters)", INT_MAX, (long long)n);
    for (int r = 0; r < size_; r++) {
        int64_t first, count;
        dist_share_of(n, r, size_, &first, &count);
        counts[r] = (int)count, displs[r] = (int)first;
    }
    return ST_OK;
}

st_status dist_reduce_scatter(float *x, int64_t n, float *scratch)
{
    if (size_ == 1) return ST_OK;
    const double t0 = clock_seconds();
    int send_counts[size_], send_displs[size_], recv_counts[size_], recv_displs[size_];
    st_status st = layout(n, send_counts, send_displs);
    if (st) return st;
    const int mine = send_counts[rank_];
    for (int r = 0; r < size_; r++) recv_counts[r] = mine, recv_displs[r] = mine * r;
    /* every rank's copy of my share, side by side, then summed in rank order */
    const int rc = MPI_Alltoallv(x, send_counts, send_displs, MPI_FLOAT, scratch, recv_counts, recv_displs, MPI_FLOAT,
                                 MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "the gradients' reduce-scatter");
    float *out = x + send_displs[rank_];
    for (int64_t e = 0; e < mine; e++) {
        float acc = scratch[e];
        for (int r = 1; r < size_; r++) acc += scratch[(int64_t)mine * r + e];
        out[e] = acc;
    }
    comm_seconds += clock_seconds() - t0;
    return ST_OK;
}

st_status dist_allgather(float *x, int64_t n)
{
    if (size_ == 1) return ST_OK;
    const double t0 = clock_seconds();
    int counts[size_], displs[size_];
    st_status st = layout(n, counts, displs);
    if (st) return st;
    const int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, x, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "an all-gather");
    comm_seconds += clock_seconds() - t0;
    return ST_OK;
}

st_status dist_gather_root(const float *mine, int64_t n, float *all)
{
    if (size_ == 1) return ST_OK;
    int counts[size_], displs[size_];
    st_status st = layout(n, counts, displs);
    if (st) return st;
    const int rc = MPI_Gatherv(mine, counts[rank_], MPI_FLOAT, all, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? ST_OK : mpi_fail(rc, "a gather to rank 0");
}

st_status dist_sum(float *x, int64_t n, float *scratch)
{
    st_status st = dist_reduce_scatter(x, n, scratch);
    return st ? st : dist_allgather(x, n);
}

st_status dist_sum_double(double *v)
{
    if (size_ == 1) return ST_OK;
    double all[size_];
    const int rc = MPI_Allgather(v, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "a scalar's all-gather");
    double acc = all[0];
    for (int r = 1; r < size_; r++) acc += all[r];
    *v = acc;
    return ST_OK;
}

st_status dist_compare(const uint64_t *v, int n, int *index, int *rank)
{
    *index = -1, *rank = 0;
    if (size_ == 1 || n < 1) return ST_OK;
    uint64_t *root = malloc((size_t)n * sizeof *root);
    if (!root) return st_host_oom("the ranks' comparison");
    if (!rank_) memcpy(root, v, (size_t)n * sizeof *root);
    int rc = MPI_Bcast(root, n, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    int mine = n, all[size_];
    for (int i = 0; i < n && mine == n; i++)
        if (root[i] != v[i]) mine = i;
    free(root);
    if (rc == MPI_SUCCESS) rc = MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "the ranks' comparison of their configs");
    for (int r = 0; r < size_; r++)
        if (all[r] < n && (*index < 0 || all[r] < *index)) *index = all[r], *rank = r;
    return ST_OK;
}

#else

bool dist_built(void) { return false; }
st_status dist_compare(const uint64_t *v, int n, int *index, int *rank)
{
    (void)v, (void)n;
    *index = -1, *rank = 0;
    return ST_OK;
}
st_status dist_init(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (getenv("OMPI_COMM_WORLD_SIZE") && atoi(getenv("OMPI_COMM_WORLD_SIZE")) > 1)
        return st_fail(ST_ERR_UNSUPPORTED, "started by mpirun with %s ranks, but this segtrain was built without MPI "
                       "(install libopenmpi-dev, then rebuild: scripts/install-deps.sh does)",
                       getenv("OMPI_COMM_WORLD_SIZE"));
    return ST_OK;
}
void dist_finalize(void) {}
st_status dist_sum(float *x, int64_t n, float *scratch)
{
    (void)x, (void)n, (void)scratch;
    return ST_OK;
}
st_status dist_reduce_scatter(float *x, int64_t n, float *scratch)
{
    (void)x, (void)n, (void)scratch;
    return ST_OK;
}
st_status dist_allgather(float *x, int64_t n)
{
    (void)x, (void)n;
    return ST_OK;
}
st_status dist_gather_root(const float *mine, int64_t n, float *all)
{
    (void)mine, (void)n, (void)all;
    return ST_OK;
}
st_status dist_sum_double(double *v)
{
    (void)v;
    return ST_OK;
}

#endif
