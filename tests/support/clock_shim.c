/*
 * The clock shim: an LD_PRELOAD library that moves a server's wall clock and nothing else
 * (tests/support/clock.rs builds it with `cc` and drives it).
 *
 * Overrides gettimeofday(), time() and clock_gettime() for CLOCK_REALTIME and CLOCK_REALTIME_COARSE.
 * Every other clock (CLOCK_MONOTONIC, CLOCK_BOOTTIME, the CPU-time clocks...) goes to the real
 * clock_gettime untouched, so the server's timers and latency figures stay real (CLOCK_MONOTONIC unless
 * asked otherwise: see the end of this comment).
 *
 * The fake wall clock is read from the file named by $MUXLOCK_CLOCK_FILE, on every call (three
 * system calls: a change is seen by the very next call, and there is no cache to keep coherent
 * between the server's threads or its signal handlers). The file holds one line of three integers:
 *
 *     <offset ns> <anchor ns> <rate ppm>
 *
 * and the fake time at real time `real` (ns since the epoch) is
 *
 *     real + offset + (real - anchor) * (rate - 1000000) / 1000000
 *
 * i.e. `real + offset` at the anchor, running at rate/1e6 real speed from there. The writer replaces the
 * file whole (a temporary file, then rename), so a read sees the old line or the new one, never half.
 * With no variable, or a file that cannot be read or parsed, the clock is the real one.
 *
 * One more, for a server whose monotonic clock is broken: with $MUXLOCK_MONOTONIC_PPM set to a rate in parts
 * per million, CLOCK_MONOTONIC runs at that rate from its first read in the process (a crawl: Valkey calibrates
 * its processor counter against it at start, and so calibrates it wrong). Without it, CLOCK_MONOTONIC is real.
 *
 * No allocation and no dlsym() inside an override: jemalloc (Debian's redis-server) reads the clock while
 * it initialises, before this library's constructor may have run; an override called then reaches the
 * kernel through syscall(). The constructor resolves the real clock_gettime with dlsym(RTLD_NEXT) once.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime;
/* A copy of $MUXLOCK_CLOCK_FILE: redis-server overwrites its environment's memory with its process title
 * (setproctitle), so a pointer into the environment would later point at the title. */
static char clock_file[4096];
/* 1 once clock_file holds the path, -1 when there is no (usable) path, 0 before the first look. */
static int clock_file_state;

/* Copies the path; called by the constructor, or by an override called before it (start-up is then
 * single-threaded: the loader and malloc's initialisation). */
static void load_clock_file(void) {
    const char *path = getenv("MUXLOCK_CLOCK_FILE");
    size_t len = 0;
    while (path && path[len] && len < sizeof clock_file) {
        len++;
    }
    if (!path || len == 0 || len >= sizeof clock_file) {
        __atomic_store_n(&clock_file_state, -1, __ATOMIC_RELEASE);
        return;
    }
    for (size_t i = 0; i <= len; i++) {
        clock_file[i] = path[i];
    }
    __atomic_store_n(&clock_file_state, 1, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void muxlock_clock_init(void) {
    if (__atomic_load_n(&clock_file_state, __ATOMIC_ACQUIRE) == 0) {
        load_clock_file();
    }
    clock_gettime_fn real = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    __atomic_store_n(&real_clock_gettime, real, __ATOMIC_RELEASE);
}

static int call_real(clockid_t id, struct timespec *ts) {
    clock_gettime_fn real = __atomic_load_n(&real_clock_gettime, __ATOMIC_ACQUIRE);
    if (real) {
        return real(id, ts);
    }
    return (int)syscall(SYS_clock_gettime, id, ts);
}

/* $MUXLOCK_MONOTONIC_PPM's rate; mono_state is 1 once it is read, -1 without one, 0 before the first look. */
static int64_t mono_ppm;
static int mono_state;
/* The first real CLOCK_MONOTONIC reading (ns) of the process, once taken; the crawl starts there. */
static int64_t mono_origin = INT64_MIN;

static int parse_i64(const char **p, const char *end, int64_t *out);

static void load_mono(void) {
    const char *v = getenv("MUXLOCK_MONOTONIC_PPM");
    const char *end = v;
    while (end && *end) {
        end++;
    }
    int64_t ppm;
    const char *p = v;
    if (v && parse_i64(&p, end, &ppm) && ppm >= 0) {
        mono_ppm = ppm;
        __atomic_store_n(&mono_state, 1, __ATOMIC_RELEASE);
    } else {
        __atomic_store_n(&mono_state, -1, __ATOMIC_RELEASE);
    }
}

/* CLOCK_MONOTONIC, crawling if $MUXLOCK_MONOTONIC_PPM says so. */
static int monotonic(clockid_t id, struct timespec *ts) {
    int rc = call_real(id, ts);
    int state = __atomic_load_n(&mono_state, __ATOMIC_ACQUIRE);
    if (state == 0) {
        load_mono();
        state = __atomic_load_n(&mono_state, __ATOMIC_ACQUIRE);
    }
    if (rc != 0 || state != 1) {
        return rc;
    }
    int64_t real = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
    int64_t origin = INT64_MIN;
    if (__atomic_compare_exchange_n(&mono_origin, &origin, real, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        origin = real;
    }
    int64_t fake = origin + (int64_t)((__int128)(real - origin) * mono_ppm / 1000000);
    ts->tv_sec = fake / 1000000000;
    ts->tv_nsec = fake % 1000000000;
    return 0;
}

/* Parses a signed decimal integer at *p, skipping leading blanks; 0 if there is none. */
static int parse_i64(const char **p, const char *end, int64_t *out) {
    const char *s = *p;
    while (s < end && (*s == ' ' || *s == '\t')) {
        s++;
    }
    int negative = 0;
    if (s < end && (*s == '-' || *s == '+')) {
        negative = *s == '-';
        s++;
    }
    if (s >= end || *s < '0' || *s > '9') {
        return 0;
    }
    uint64_t value = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        if (value > (UINT64_MAX - 9) / 10) {
            return 0;
        }
        value = value * 10 + (uint64_t)(*s - '0');
        s++;
    }
    if (value > (uint64_t)INT64_MAX) {
        return 0;
    }
    *out = negative ? -(int64_t)value : (int64_t)value;
    *p = s;
    return 1;
}

/* The fake wall time for the real one, both in ns since the epoch. */
static int64_t fake_ns(int64_t real) {
    int state = __atomic_load_n(&clock_file_state, __ATOMIC_ACQUIRE);
    if (state == 0) {
        load_clock_file();
        state = __atomic_load_n(&clock_file_state, __ATOMIC_ACQUIRE);
    }
    if (state != 1) {
        return real;
    }
    int saved_errno = errno;
    char buf[128];
    ssize_t n = -1;
    int fd = open(clock_file, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, buf, sizeof buf);
        close(fd);
    }
    errno = saved_errno;
    if (n <= 0) {
        return real;
    }
    const char *p = buf, *end = buf + n;
    int64_t offset, anchor, rate;
    if (!parse_i64(&p, end, &offset) || !parse_i64(&p, end, &anchor) || !parse_i64(&p, end, &rate) || rate < 0) {
        return real;
    }
    __int128 fake = (__int128)real + offset + ((__int128)real - anchor) * (rate - 1000000) / 1000000;
    if (fake < 0) {
        return 0;
    }
    if (fake > INT64_MAX) {
        return INT64_MAX;
    }
    return (int64_t)fake;
}

static int fake_realtime(clockid_t id, struct timespec *ts) {
    struct timespec real;
    int rc = call_real(id, &real);
    if (rc != 0) {
        return rc;
    }
    int64_t fake = fake_ns((int64_t)real.tv_sec * 1000000000 + real.tv_nsec);
    ts->tv_sec = fake / 1000000000;
    ts->tv_nsec = fake % 1000000000;
    return 0;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) {
        return fake_realtime(id, ts);
    }
    if (id == CLOCK_MONOTONIC) {
        return monotonic(id, ts);
    }
    return call_real(id, ts);
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    if (tz) {
        /* Obsolete; glibc reports no time zone. */
        struct timezone *zone = tz;
        zone->tz_minuteswest = 0;
        zone->tz_dsttime = 0;
    }
    struct timespec ts;
    int rc = fake_realtime(CLOCK_REALTIME, &ts);
    if (rc != 0) {
        return rc;
    }
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (fake_realtime(CLOCK_REALTIME, &ts) != 0) {
        return (time_t)-1;
    }
    if (out) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}
