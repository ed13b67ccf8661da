/* SIGINT / SIGTERM as a polled stop request (stop_signal.h). */
#include "cli/stop_signal.h"

#include <pthread.h>
#include <time.h>

static void stop_set(sigset_t *s) {
    sigemptyset(s);
    sigaddset(s, SIGINT);
    sigaddset(s, SIGTERM);
}

void tide_stop_signals_block(sigset_t *old) {
    sigset_t s;
    stop_set(&s);
    pthread_sigmask(SIG_BLOCK, &s, old);
}

int tide_stop_signal_taken(void) {
    sigset_t s, pend;
    stop_set(&s);
    if (sigpending(&pend) != 0) return 0;
    if (!sigismember(&pend, SIGINT) && !sigismember(&pend, SIGTERM)) return 0;
    const struct timespec now = {0, 0};
    int sig = sigtimedwait(&s, NULL, &now); /* consume it, so restoring the mask does not kill us */
    return sig > 0 ? sig : 0;
}

int tide_stop_signal_wait(void) {
    sigset_t s;
    stop_set(&s);
    int sig = 0;
    return sigwait(&s, &sig) == 0 ? sig : 0;
}

void tide_stop_signals_restore(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

const char *tide_stop_signal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}
