/*
 * The clock probe: prints what each time source reads, for tests/net/server_clock.rs to check which ones the
 * clock shim (clock_shim.c) moves. One line, `name=nanoseconds` pairs:
 *
 *     realtime=... realtime_coarse=... gettimeofday=... time=... monotonic=... monotonic_raw=... boottime=...
 *
 * (gettimeofday and time in ns too, from their microseconds and seconds).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

static long long ns(clockid_t id) {
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) {
        return -1;
    }
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(void) {
    struct timeval tv;
    long long tod = gettimeofday(&tv, NULL) == 0 ? (long long)tv.tv_sec * 1000000000LL + tv.tv_usec * 1000LL : -1;
    long long secs = (long long)time(NULL);
    printf("realtime=%lld realtime_coarse=%lld gettimeofday=%lld time=%lld monotonic=%lld monotonic_raw=%lld "
           "boottime=%lld\n",
           ns(CLOCK_REALTIME), ns(CLOCK_REALTIME_COARSE), tod, secs * 1000000000LL, ns(CLOCK_MONOTONIC),
           ns(CLOCK_MONOTONIC_RAW), ns(CLOCK_BOOTTIME));
    return 0;
}
