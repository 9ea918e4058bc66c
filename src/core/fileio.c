#include "segtrain/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The file a write to path lands in: path, or the end of its chain of symlinks (which may not exist yet), so that
 * a link stays a link and its target gets the new contents. NULL with errno set on failure. */
static char *final_target(const char *path)
{
    char *cur = strdup(path);
    for (int hops = 0; cur; hops++) {
        struct stat st;
        if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) return cur;
        char link[4096];
        ssize_t n = hops < 40 ? readlink(cur, link, sizeof link - 1) : -1;
        if (n < 0) {
            if (hops >= 40) errno = ELOOP;
            free(cur);
            return NULL;
        }
        link[n] = 0;
        const char *slash = strrchr(cur, '/');
        const int keep = link[0] == '/' || !slash ? 0 : (int)(slash - cur) + 1; /* a relative link: from its folder */
        char *next = malloc((size_t)keep + (size_t)n + 1);
        if (next) snprintf(next, (size_t)keep + (size_t)n + 1, "%.*s%s", keep, cur, link);
        free(cur);
        cur = next;
    }
    return NULL;
}

static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? "a folder" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

st_status atomic_file_open(atomic_file *af, const char *path)
{
    *af = (atomic_file){0};
    char *target = final_target(path);
    if (!target && errno == ENOMEM) return st_host_oom("the name of the file %s writes to", path);
    if (!target) return st_fail(ST_ERR_IO, "%s: cannot follow the link: %s", path, strerror(errno));
    struct stat st;
    const bool exists = stat(target, &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) {
        st_status s = st_fail(ST_ERR_IO, "%s: is %s, not a regular file; outputs are written only to regular files "
                              "(or to a new path)", path, kind_of(st.st_mode));
        free(target);
        return s;
    }
    size_t n = strlen(target) + 32;
    char *tmp = malloc(n);
    if (tmp) snprintf(tmp, n, "%s.tmp.%ld", target, (long)getpid());
    af->path = target;
    if (!tmp) {
        atomic_file_abort(af);
        return st_host_oom("the temporary file name of %s", path);
    }
    af->fp = fopen(tmp, "wb");
    if (!af->fp) {
        st_status s = st_fail(ST_ERR_IO, "%s: cannot write there: %s", path, strerror(errno));
        free(tmp);
        atomic_file_abort(af);
        return s;
    }
    if (exists) fchmod(fileno(af->fp), st.st_mode & 07777); /* the replacement keeps the file's permissions */
    af->tmp_path = tmp; /* from here on, abort removes it */
    return ST_OK;
}

/* Cuts path to its folder in place (the caller frees it next): no allocation that could fail after the rename. */
static void fsync_folder_of(char *dir)
{
    char *slash = strrchr(dir, '/');
    if (slash == dir) slash[1] = 0;
    else if (slash) *slash = 0;
    else strcpy(dir, ".");
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd); /* makes the rename itself durable */
        close(fd);
    }
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
        s = st_fail(ST_ERR_IO, "%s: cannot put the new file in place: %s", af->path, strerror(errno));
    if (s == ST_OK) {
        fsync_folder_of(af->path);
        free(af->tmp_path);
        af->tmp_path = NULL;
    }
    atomic_file_abort(af);
    return s;
}

st_status atomic_file_check(const char *path)
{
    atomic_file af;
    st_status s = atomic_file_open(&af, path);
    if (!s) atomic_file_abort(&af);
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

static st_status open_input(const char *path, bool pipes, int *fd)
{
    *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (*fd < 0) {
        const int err = errno;
        st_status s = st_fail(ST_ERR_IO, "%s: cannot open: %s", path, strerror(err));
        errno = err;
        return s;
    }
    struct stat st;
    st_status s = ST_OK;
    if (fstat(*fd, &st) != 0) s = st_fail(ST_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode) && !(pipes && S_ISFIFO(st.st_mode)))
        s = st_fail(ST_ERR_IO, "%s: is %s, not a regular file; only regular files%s are read", path,
                    kind_of(st.st_mode), pipes ? " and pipes" : "");
    else if (fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK) != 0)
        s = st_fail(ST_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (s) {
        close(*fd);
        *fd = -1;
        errno = EINVAL;
    }
    return s;
}

st_status file_open_regular(const char *path, int *fd) { return open_input(path, false, fd); }

static st_status fopen_input(const char *path, bool pipes, FILE **fp)
{
    int fd;
    *fp = NULL;
    st_status s = open_input(path, pipes, &fd);
    if (s) return s;
    if (!(*fp = fdopen(fd, "rb"))) {
        const int err = errno;
        s = err == ENOMEM ? st_host_oom("reading %s", path) : st_fail(ST_ERR_IO, "%s: cannot open: %s", path, strerror(err));
        close(fd);
        errno = err;
    }
    return s;
}

st_status file_fopen_regular(const char *path, FILE **fp) { return fopen_input(path, false, fp); }
st_status file_fopen_stream(const char *path, FILE **fp) { return fopen_input(path, true, fp); }

st_status file_make_dirs(const char *path, char *created)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    if (created) created[0] = 0;
    for (char *p = buf + 1;; p++)
        if (*p == '/' || !*p) {
            const char c = *p;
            *p = 0;
            const bool made = mkdir(buf, 0755) == 0;
            if (!made && errno != EEXIST) return st_fail(ST_ERR_IO, "%s: cannot create: %s", buf, strerror(errno));
            if (made && created && !created[0]) snprintf(created, 4096, "%s", buf);
            if (!(*p = c)) break;
        }
    return ST_OK;
}
