/*
 * outfile.h: the one way rankplan and rankrun write a file (plans, node
 * plans, reports, calibration files).
 *
 * A regular file (or a name that does not exist yet) is written to a
 * temporary file in the same directory, created with O_EXCL|O_NOFOLLOW
 * under an unpredictable name, then flushed (fsync) and renamed over the
 * target: readers see the old file or the whole new one, never a part, and
 * a symlink planted under a guessable temporary name cannot redirect the
 * write. A symlink as the target itself is followed: the file it names is
 * replaced, the link stays. The temporary is removed on every error, on
 * exit() and on SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGABRT (for a
 * process that left those signals at their default action; one with its
 * own handlers calls rp_out_cleanup() from them).
 *
 * "-" writes to standard output. An existing target that is not a regular
 * file or a directory (/dev/null, a FIFO, a terminal) is written through in
 * place, never replaced, and a failed write (/dev/full) is an error; a
 * directory is refused (EISDIR). docs/architecture.md, "Output files".
 */
#ifndef RANKPLAN_OUTFILE_H
#define RANKPLAN_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
  char *target; /* what is replaced: the path, or the file a symlink names */
  char *tmp;    /* the temporary; NULL when written through */
  int fd;       /* -1 once closed */
  int err;      /* the first write error */
  bool through; /* standard output or a non-regular file: written in place */
} RpOut;

/* Starts writing path. Returns 0 or an errno value (nothing is left
 * behind on failure). */
int rp_out_open(RpOut *o, const char *path);
/* Appends n bytes; an error is kept and returned by rp_out_commit too. */
int rp_out_write(RpOut *o, const void *data, size_t n);
/* Closes the file, flushing it to disk first when sync is true. The
 * temporary stays (for rp_out_publish); on error it is removed. */
int rp_out_close(RpOut *o, bool sync);
/* Renames the closed temporary over the target (nothing for a file written
 * through) and frees o. On error the temporary is removed. */
int rp_out_publish(RpOut *o);
/* rp_out_close(o, true) then rp_out_publish(o). */
int rp_out_commit(RpOut *o);
/* Removes the temporary, if any, and frees o. */
void rp_out_abort(RpOut *o);

/* Writes data to path through the above: the whole file or nothing. */
int rp_write_file_atomic(const char *path, const char *data, size_t len);

/* True when out names an existing file that is also one of the inputs
 * (the same device and inode, whatever the spelling), so that writing it
 * would destroy an input; *which is then that input. "-" is never one. */
bool rp_out_is_input(const char *out, const char *const *inputs, size_t n, const char **which);

/* Creates directory dir (0777 less the umask) when it does not exist, for output files
 * to go into; ENOTDIR when dir is something else. A directory created here
 * is removed again, if still empty, on exit or a signal, until
 * rp_out_dir_keep() says the files in it are complete: a failed command
 * leaves no empty output directory behind. One such directory at a time. */
int rp_out_dir(const char *dir);
void rp_out_dir_keep(void);

/* Removes every temporary still open (and the directory rp_out_dir
 * created, when empty). Async-signal-safe. */
void rp_out_cleanup(void);

#endif
