/* Files that survive a crash: written to a temporary file beside the target, fsync'd, renamed over it, and the
 * folder fsync'd, so the target holds either its old contents or the new ones, never a mix.
 * A symlink is written through: the target is the end of its chain, so the link stays. A path that exists but is
 * not a regular file (a folder, a FIFO, a device, /dev/null included) is refused: renaming over it would replace
 * the device or pipe, and writing into it would not be atomic. */
#ifndef SEGTRAIN_FILEIO_H
#define SEGTRAIN_FILEIO_H

#include <stdio.h>

#include "segtrain/status.h"

typedef struct atomic_file {
    FILE *fp; /* write here between atomic_file_open and atomic_file_commit */
    char *path, *tmp_path;
} atomic_file;

st_status atomic_file_open(atomic_file *af, const char *path);
/* Flushes, fsyncs and renames into place. On failure the temporary file is removed and path is untouched.
 * SEGTRAIN_FAULT=crash-before-rename in the environment kills the process just before the rename (tests). */
st_status atomic_file_commit(atomic_file *af);
/* Abandons the write: removes the temporary file. */
void atomic_file_abort(atomic_file *af);
/* Whether path can be written as atomic_file_open writes it (a temporary file made and removed again): for a
 * command to find out before the work whose result goes there, not after. */
st_status atomic_file_check(const char *path);

/* Every input file is opened through these: path opened to read, refused with one line naming it unless it is a
 * regular file (after symlinks). The open itself never blocks: a FIFO would block open() until a writer came.
 * On failure *fd is -1 (*fp NULL) and errno is open()'s (ENOENT for a missing file), or EINVAL for a path that is
 * not a regular file. */
st_status file_open_regular(const char *path, int *fd);
st_status file_fopen_regular(const char *path, FILE **fp);
/* As file_fopen_regular, and a pipe or FIFO too, for the small text inputs that a shell's <(...) or /dev/stdin
 * may give (a config, data_backend_config). Still never blocks: a FIFO that no writer holds open reads as empty. */
st_status file_fopen_stream(const char *path, FILE **fp);

/* mkdir -p; *created (when not NULL, 4096 bytes) receives the top-most folder it made ("" if none). */
st_status file_make_dirs(const char *path, char *created);

#endif
