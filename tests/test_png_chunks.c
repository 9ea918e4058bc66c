/* The PNG loader caps what a chunk may make libpng allocate: libpng allocates a chunk's declared length before it
 * reads the chunk, so a 57-byte file (fuzz/repro/png/splt-claims-1.1GB.png) whose sPLT claims 1.1 GB made it
 * allocate 1.1 GB. The largest single allocation is watched by a malloc hook, so the check is deterministic (such a
 * mapping is never touched, so neither time nor resident memory shows it). A real metadata chunk below the cap
 * still loads. */
#include <fcntl.h>
#include <png.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "segtrain/data.h"
#include "testkit.h"

/* The largest malloc since the last reset: libpng calls malloc for chunk buffers. Under ASan through its hooks,
 * else by interposing malloc over glibc's. */
static _Atomic size_t largest;
static void note_malloc(size_t n)
{
    size_t was = atomic_load(&largest);
    while (n > was && !atomic_compare_exchange_weak(&largest, &was, n)) {
    }
}
#if defined(__SANITIZE_ADDRESS__)
int __sanitizer_install_malloc_and_free_hooks(void (*m)(const volatile void *, size_t), void (*f)(const volatile void *));
static void asan_malloc_hook(const volatile void *p, size_t n) { note_malloc(n); }
static void install_hook(void) { __sanitizer_install_malloc_and_free_hooks(asan_malloc_hook, NULL); }
#else
void *__libc_malloc(size_t n);
void *malloc(size_t n)
{
    note_malloc(n);
    return __libc_malloc(n);
}
static void install_hook(void) {}
#endif

static char root[256];

static unsigned long crc32_of(const unsigned char *p, size_t n, unsigned long c)
{
    c ^= 0xffffffffUL;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320UL ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffUL;
}

static void put_be32(unsigned char *p, unsigned long v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (24 - 8 * i));
}

/* dir/x.png: a valid 4x4 RGB PNG with, after IHDR, a `type` chunk of `len` bytes of which only `have` are
 * written (have < len: the file claims more than it holds). */
static void write_with_chunk(const char *dir, const char *type, size_t len, size_t have)
{
    unsigned char px[4 * 4 * 3];
    memset(px, 0x80, sizeof px);
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = img.height = 4;
    img.format = PNG_FORMAT_RGB;
    static unsigned char png[4096];
    png_alloc_size_t n = sizeof png;
    CHECK(png_image_write_to_memory(&img, png, &n, 0, px, 0, NULL));
    mkdir(tk_path(root, dir), 0755);
    char name[64];
    snprintf(name, sizeof name, "%s/x.png", dir);
    FILE *f = fopen(tk_path(root, name), "wb");
    CHECK(f != NULL);
    if (!f) return;
    const size_t ihdr_end = 8 + 25;
    fwrite(png, 1, ihdr_end, f);
    unsigned char head[8], *data = calloc(len ? len : 1, 1), crc[4];
    put_be32(head, (unsigned long)len);
    memcpy(head + 4, type, 4);
    memcpy(data, "Comment", 8); /* a tEXt keyword and its NUL; the rest of the text is zeros */
    put_be32(crc, crc32_of(data, len, crc32_of(head + 4, 4, 0)));
    fwrite(head, 1, 8, f);
    fwrite(data, 1, have, f);
    if (have == len) {
        fwrite(crc, 1, 4, f);
        fwrite(png + ihdr_end, 1, n - ihdr_end, f);
    }
    free(data);
    fclose(f);
}

/* Opens dir as a dataset with stderr captured; returns the status and what was reported in *log. */
static st_status open_folder(const char *dir, char *log, size_t log_size)
{
    fflush(stderr);
    int saved = dup(2), fd = open(tk_path(root, "stderr.log"), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    dup2(fd, 2);
    close(fd);
    dataset *ds = NULL;
    atomic_store(&largest, 0);
    st_status st = dataset_open_folder(tk_path(root, dir), 4, &ds);
    dataset_close(ds);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(tk_path(root, "stderr.log"), "rb");
    size_t n = f ? fread(log, 1, log_size - 1, f) : 0;
    log[n] = 0;
    if (f) fclose(f);
    printf("  %s: status %d, largest allocation %zu bytes, reported: %s", dir, (int)st, atomic_load(&largest),
           n ? log : "nothing\n");
    return st;
}

/* Copies fuzz/repro/png/name (of `size` bytes) into repro/x.png and opens that folder. */
static st_status open_repro(const char *name, size_t size, char *log, size_t log_size)
{
    char src[512], buf[128];
    snprintf(src, sizeof src, "%s/fuzz/repro/png/%s", SEGTRAIN_SOURCE_DIR, name);
    FILE *f = fopen(src, "rb");
    CHECKF(f != NULL, "cannot open %s", src);
    const size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    CHECKF(n == size, "%s: %zu bytes, expected %zu", name, n, size);
    mkdir(tk_path(root, "repro"), 0755);
    f = fopen(tk_path(root, "repro/x.png"), "wb");
    if (f) fwrite(buf, 1, n, f), fclose(f);
    return open_folder("repro", log, log_size);
}

int main(void)
{
    install_hook();
    snprintf(root, sizeof root, "/tmp/segtrain-test-png-XXXXXX");
    if (!mkdtemp(root)) return 1;
    char log[4096];
    const size_t cap = 8u << 20; /* PNG_CHUNK_MAX in data.c */

    /* the reproducers: refused by name, and nothing near their claims is allocated. The second one's sPLT header
     * sits in the file's last 11 bytes, with no room left for its CRC: the check once stopped before it. */
    CHECK(open_repro("splt-claims-1.1GB.png", 57, log, sizeof log) == ST_ERR_FORMAT);
    CHECKF(atomic_load(&largest) < cap, "largest allocation %zu bytes for a 57-byte file", atomic_load(&largest));
    CHECK(strstr(log, "chunk sPLT at byte 33 claims 1100000000 bytes") != NULL);
    CHECK(open_repro("splt-header-in-last-11-bytes-1.3GB.png", 43, log, sizeof log) == ST_ERR_FORMAT);
    CHECKF(atomic_load(&largest) < cap, "largest allocation %zu bytes for a 43-byte file", atomic_load(&largest));
    CHECK(strstr(log, "chunk sPLT at byte 33 claims 1313123906 bytes") != NULL);

    /* a metadata chunk that claims more than the file holds, though below the cap: refused before libpng reads it */
    write_with_chunk("short", "tEXt", 4u << 20, 100);
    CHECK(open_folder("short", log, sizeof log) == ST_ERR_FORMAT);
    CHECKF(atomic_load(&largest) < (1u << 20), "largest allocation %zu bytes", atomic_load(&largest));
    CHECK(strstr(log, "chunk tEXt at byte 33 claims 4194304 bytes, but only 100 follow its header") != NULL);

    /* a real 200 KB text chunk: the image loads */
    write_with_chunk("text", "tEXt", 200u << 10, 200u << 10);
    CHECK(open_folder("text", log, sizeof log) == ST_OK);
    CHECK(log[0] == 0);

    /* a real chunk over the cap: refused by name */
    write_with_chunk("big", "tEXt", cap + 1, cap + 1);
    CHECK(open_folder("big", log, sizeof log) == ST_ERR_FORMAT);
    CHECK(strstr(log, "chunk tEXt at byte 33 claims 8388609 bytes; the limit is 8388608") != NULL);

    const char *files[] = {"repro/x.png", "short/x.png", "text/x.png", "big/x.png", "stderr.log"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) unlink(tk_path(root, files[i]));
    const char *dirs[] = {"repro", "short", "text", "big"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) rmdir(tk_path(root, dirs[i]));
    rmdir(root);
    return tk_finish();
}
