/* Stopping a long command cleanly on SIGINT / SIGTERM without a signal
 * handler (and so without global state): the signals are blocked in the
 * calling thread before any worker thread starts (threads inherit the mask),
 * stay pending, and the command polls for them between units of work.
 *
 *   sigset_t old;
 *   tide_stop_signals_block(&old);
 *   while (work) { if (tide_stop_signal_taken()) break; ... }
 *   tide_stop_signals_restore(&old);
 *
 * A blocking read (a terminal on stdin) is not interrupted: the stop is seen
 * when it returns. */
#ifndef TIDE_CLI_STOP_SIGNAL_H
#define TIDE_CLI_STOP_SIGNAL_H

#include <signal.h>

/* Blocks SIGINT and SIGTERM; *old gets the previous mask. */
void tide_stop_signals_block(sigset_t *old);
/* The pending SIGINT or SIGTERM (consumed), or 0 when none is. */
int tide_stop_signal_taken(void);
void tide_stop_signals_restore(const sigset_t *old);
/* Waits for SIGINT or SIGTERM (blocked first) and returns it. */
int tide_stop_signal_wait(void);
/* "SIGINT" / "SIGTERM" / "signal N". */
const char *tide_stop_signal_name(int sig);

#endif
