/*
 * delayq.testing's clock shim: preloaded into the private redis-server of a test session
 * (LD_PRELOAD), it adds an offset to the wall clock that server reads, so that the test
 * can let queue time pass (delayq.testing.run_due) while Redis, and every delayq script
 * in it, reads its clock with TIME as in production.
 *
 * The offset is a little-endian int64 of nanoseconds in the file named by
 * $DELAYQ_CLOCK_OFFSET_FILE, mapped shared, so a write by the test process is seen by the
 * next clock read.  Only CLOCK_REALTIME(_COARSE), gettimeofday() and time() move;
 * monotonic clocks (Redis's timers, timeouts) do not.
 *
 * No dlsym() and no allocation: the real clock is read with the clock_gettime system call.
 * (libfaketime, which resolves the real functions with dlsym, cannot start in a
 * redis-server linked with jemalloc: jemalloc's initialisation reads the clock first.)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile const int64_t *offset_ns;
static int loaded;

static void load(void) {
    loaded = 1;
    const char *path = getenv("DELAYQ_CLOCK_OFFSET_FILE");
    if (path == NULL) {
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return;
    }
    void *map = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map != MAP_FAILED) {
        offset_ns = map;
    }
}

__attribute__((constructor)) static void init(void) { load(); }

static int64_t offset(void) {
    if (!loaded) {
        load();
    }
    return offset_ns != NULL ? *offset_ns : 0;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    long rc = syscall(SYS_clock_gettime, clock, ts);
    if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + offset();
        ts->tv_sec = ns / 1000000000;
        ts->tv_nsec = ns % 1000000000;
    }
    return (int)rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return -1;
    }
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}
