/* qjournal's clock-fault shim, preloaded before libfaketime (LD_PRELOAD="shim.so libfaketime.so.1").
 *
 * Why: the hosts' clock faults (issue 28, src/qjournal/hosts/clock.py) move only the WALL clock of a
 * process: libfaketime with FAKETIME_DONT_FAKE_MONOTONIC=1. Two things of libfaketime 0.9.10 get in the way:
 *   1. clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...) answers EINVAL, and Python's time.sleep uses
 *      exactly that call: every sleep of a daemon would raise.
 *   2. with a clock rate ("x2", "x0.5") it scales the timeouts of poll/select/epoll_wait and relative
 *      sleeps by the rate, so a "slow wall clock" would also make every asyncio timer (monotonic) late.
 *   3. its pthread_cond_timedwait mistranslates the deadline of a condition variable on CLOCK_MONOTONIC (the
 *      JVM's timed waits): the waits return at once, and an idle ZooKeeper server spun at 140 % CPU, too
 *      slow to answer its clients' pings.
 * A real machine whose wall clock jumps or drifts keeps its timers, so this shim sends every sleep and wait
 * on a monotonic or relative timeout straight to the C library, past libfaketime. Only the reading of the
 * wall clock (clock_gettime(CLOCK_REALTIME), gettimeofday, time) and sleeps until a wall-clock instant
 * (clock_nanosleep on CLOCK_REALTIME with TIMER_ABSTIME) stay libfaketime's.
 *
 * Built by scripts/setup.sh: gcc -shared -fPIC -O2 -o .venv/lib/qjournal-faketime-shim.so scripts/faketime-shim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

static void *libc_symbol(const char *name) {
    static void *libc;
    if (libc == NULL)
        libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    return libc ? dlsym(libc, name) : NULL;
}

#define REAL(name) static __typeof__(name) *real; if (real == NULL) real = (__typeof__(name) *)libc_symbol(#name)

int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *req, struct timespec *rem) {
    if (clock_id == CLOCK_REALTIME && (flags & TIMER_ABSTIME)) {
        /* a wall-clock deadline: libfaketime translates it (the next definition after this one) */
        static __typeof__(clock_nanosleep) *next;
        if (next == NULL)
            next = (__typeof__(clock_nanosleep) *)dlsym(RTLD_NEXT, "clock_nanosleep");
        return next(clock_id, flags, req, rem);
    }
    REAL(clock_nanosleep);
    return real(clock_id, flags, req, rem);
}

int nanosleep(const struct timespec *req, struct timespec *rem) {
    REAL(nanosleep);
    return real(req, rem);
}

int usleep(useconds_t usec) {
    REAL(usleep);
    return real(usec);
}

unsigned int sleep(unsigned int seconds) {
    REAL(sleep);
    return real(seconds);
}

int poll(struct pollfd *fds, nfds_t nfds, int timeout) {
    REAL(poll);
    return real(fds, nfds, timeout);
}

int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *tmo, const sigset_t *sigmask) {
    REAL(ppoll);
    return real(fds, nfds, tmo, sigmask);
}

int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *timeout) {
    REAL(select);
    return real(nfds, r, w, e, timeout);
}

int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout, const sigset_t *sigmask) {
    REAL(pselect);
    return real(nfds, r, w, e, timeout, sigmask);
}

int pthread_cond_timedwait(pthread_cond_t *cond, pthread_mutex_t *mutex, const struct timespec *abstime) {
    /* glibc keeps a condition variable's clock in bit 1 of __data.__wrefs (nptl/pthread_cond_common.c: 1 is
     * CLOCK_MONOTONIC, set by pthread_condattr_setclock): a monotonic deadline is the C library's, a
     * wall-clock one libfaketime's (it translates the faked wall time back) */
    if ((cond->__data.__wrefs >> 1) & 1) {
        REAL(pthread_cond_timedwait);
        return real(cond, mutex, abstime);
    }
    static __typeof__(pthread_cond_timedwait) *next;
    if (next == NULL)
        next = (__typeof__(pthread_cond_timedwait) *)dlsym(RTLD_NEXT, "pthread_cond_timedwait");
    return next(cond, mutex, abstime);
}

int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout) {
    REAL(epoll_wait);
    return real(epfd, events, maxevents, timeout);
}

int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout, const sigset_t *sigmask) {
    REAL(epoll_pwait);
    return real(epfd, events, maxevents, timeout, sigmask);
}
