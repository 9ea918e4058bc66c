#include "segtrain/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

st_status atomic_file_open(atomic_file *af, const char *path)
{
    *af = (atomic_file){0};
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (tmp) snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    af->path = dup_str(path);
    if (!af->path || !tmp) {
        free(tmp);
        atomic_file_abort(af);
        return st_fail(ST_ERR_IO, "%s: out of memory", path);
    }
    af->fp = fopen(tmp, "wb");
    if (!af->fp) {
        st_status s = st_fail(ST_ERR_IO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        free(tmp);
        atomic_file_abort(af);
        return s;
    }
    af->tmp_path = tmp; /* from here on, abort removes it */
    return ST_OK;
}

static void fsync_folder_of(const char *path)
{
    char *dir = dup_str(path);
    if (!dir) return;
    char *slash = strrchr(dir, '/');
    if (slash == dir) slash[1] = 0;
    else if (slash) *slash = 0;
    else strcpy(dir, ".");
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd); /* makes the rename itself durable */
        close(fd);
    }
    free(dir);
}

st_status atomic_file_commit(atomic_file *af)
{
    st_status s = ST_OK;
    if (fflush(af->fp) != 0 || fsync(fileno(af->fp)) != 0)
        s = st_fail(ST_ERR_IO, "%s: cannot write: %s", af->path, strerror(errno));
    if (fclose(af->fp) != 0 && s == ST_OK) s = st_fail(ST_ERR_IO, "%s: cannot write: %s", af->path, strerror(errno));
    af->fp = NULL;
    /* Fault injection for the crash test: die where a crash hurts most, with the new file complete but not yet
     * in place. */
    const char *fault = getenv("SEGTRAIN_FAULT");
    if (s == ST_OK && fault && !strcmp(fault, "crash-before-rename")) raise(SIGKILL);
    if (s == ST_OK && rename(af->tmp_path, af->path) != 0)
        s = st_fail(ST_ERR_IO, "%s: cannot rename %s into place: %s", af->path, af->tmp_path, strerror(errno));
    if (s == ST_OK) {
        fsync_folder_of(af->path);
        free(af->tmp_path);
        af->tmp_path = NULL;
    }
    atomic_file_abort(af);
    return s;
}

void atomic_file_abort(atomic_file *af)
{
    if (af->fp) fclose(af->fp);
    if (af->tmp_path) unlink(af->tmp_path);
    free(af->tmp_path);
    free(af->path);
    *af = (atomic_file){0};
}
