/* Shared helpers for natsinterop-c: JSON-lines output, the payload/header spec, connection set-up.
 * Mirrors tests/interop/go/natsinterop and tests/interop/spec.py. */
#ifndef INTEROP_H
#define INTEROP_H

#include <nats/nats.h>
#include <stdbool.h>
#include <stdint.h>

/* Upper bound (ms) for any single expected event: a message, a reply, a reconnect. */
#define WAIT_MS 10000
/* The whole run is bounded too (seconds). */
#define WATCHDOG_S 25

typedef natsStatus (*scenario_fn)(const char *url, char **args, int nargs);

/* JSON lines: out_begin("ev") ... out_end() prints one object per line and flushes. */
void out_begin(const char *ev);
void out_str(const char *key, const char *val);
void out_int(const char *key, int64_t val);
void out_bool(const char *key, bool val);
void out_hex(const char *key, const char *data, int len);
void out_strs(const char *key, const char **vals, int n);
void out_end(void);
void out_event(const char *ev); /* an object with only "ev" */
void out_msg(const char *ev, natsMsg *m);

/* spec: payload i has size payload_size(i) and byte j == (i + 7*j) % 256. */
int payload_size(int i);
char *payload(int i); /* malloc'ed, payload_size(i) bytes (at least 1 allocated) */
natsStatus add_spec_headers(natsMsg *m, int i, const char *origin);

/* Runs x only while everything so far succeeded (s is the caller's natsStatus). */
#define TRY(x)                                                                                               \
    do {                                                                                                     \
        if (s == NATS_OK)                                                                                    \
            s = (x);                                                                                         \
    } while (0)

/* Connects with the given name ("interop-c" when NULL) plus whatever opts holds (may be NULL). */
natsStatus connect_with(natsConnection **nc, const char *url, natsOptions *opts, const char *name);
natsStatus connect_plain(natsConnection **nc, const char *url);
/* Reads exactly the messages already queued on a sync subscription; fills msgs (caller frees). */
natsStatus drain_pending(natsSubscription *sub, natsMsg ***msgs, int *n);
void free_msgs(natsMsg **msgs, int n);
void free_strs(char **strs, int n);
/* Polls an int flag set by a callback thread, up to WAIT_MS. */
bool wait_flag(volatile int *flag);
void set_flag(volatile int *flag);
int get_flag(volatile int *flag);
void wait_stdin(void);
natsStatus fail_text(const char *msg); /* records a message for the final error line */

natsStatus run_connect(const char *url, char **args, int nargs);
natsStatus run_pubsub(const char *url, char **args, int nargs);
natsStatus run_wildcards(const char *url, char **args, int nargs);
natsStatus run_queue(const char *url, char **args, int nargs);
natsStatus run_autounsub(const char *url, char **args, int nargs);
natsStatus run_flush(const char *url, char **args, int nargs);
natsStatus run_respond(const char *url, char **args, int nargs);
natsStatus run_request(const char *url, char **args, int nargs);
natsStatus run_noresp(const char *url, char **args, int nargs);
natsStatus run_drain(const char *url, char **args, int nargs);
natsStatus run_reconnect(const char *url, char **args, int nargs);
natsStatus run_slow(const char *url, char **args, int nargs);
natsStatus run_auth(const char *url, char **args, int nargs);
natsStatus run_tls(const char *url, char **args, int nargs);
natsStatus run_mtls(const char *url, char **args, int nargs);
natsStatus run_pub(const char *url, char **args, int nargs);
natsStatus run_sub(const char *url, char **args, int nargs);
natsStatus run_burst(const char *url, char **args, int nargs);
natsStatus run_tally(const char *url, char **args, int nargs);
natsStatus run_noheaders(const char *url, char **args, int nargs);
natsStatus run_ldm(const char *url, char **args, int nargs);
natsStatus run_js(const char *url, char **args, int nargs); /* jetstream.c: commands on stdin */

#endif
