/* natsinterop-c: drives one NATS scenario with libnats and prints JSON lines for tests/interop.
 * Usage: natsinterop-c <scenario> <url> [args...] (the same scenarios and arguments as the Go driver). */
#include "interop.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct {
    const char *name;
    scenario_fn fn;
    int nargs;
} scenarios[] = {
    {"connect", run_connect, 1},     {"pubsub", run_pubsub, 2},   {"wildcards", run_wildcards, 1},
    {"queue", run_queue, 2},         {"autounsub", run_autounsub, 3}, {"flush", run_flush, 0},
    {"respond", run_respond, 2},     {"request", run_request, 3}, {"noresp", run_noresp, 1},
    {"drain", run_drain, 2},         {"reconnect", run_reconnect, 2}, {"slow", run_slow, 1},
    {"auth", run_auth, 3},           {"tls", run_tls, 1},         {"pub", run_pub, 2},
    {"sub", run_sub, 2},             {"burst", run_burst, 2},     {"tally", run_tally, 2},
    {"noheaders", run_noheaders, 1}, {"ldm", run_ldm, 0},        {"mtls", run_mtls, 3},
    {"js", run_js, 0},
};

static void on_alarm(int sig) {
    (void)sig;
    static const char line[] = "{\"ev\":\"error\",\"msg\":\"watchdog: scenario did not finish in time\"}\n";
    (void)!write(STDOUT_FILENO, line, sizeof(line) - 1);
    _exit(1);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: natsinterop-c <scenario> <url> [args...]\n");
        return 2;
    }
    signal(SIGALRM, on_alarm);
    alarm(WATCHDOG_S);
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
        if (strcmp(argv[1], scenarios[i].name) != 0)
            continue;
        if (argc - 3 < scenarios[i].nargs) {
            fprintf(stderr, "%s needs %d arguments\n", argv[1], scenarios[i].nargs);
            return 2;
        }
        natsStatus s = scenarios[i].fn(argv[2], argv + 3, argc - 3);
        if (s != NATS_OK) {
            out_begin("error");
            out_str("msg", natsStatus_GetText(s));
            out_str("detail", nats_GetLastError(NULL));
            out_end();
            return 1;
        }
        out_event("done");
        /* Exit without nats_Close(): its wait for library threads is not needed by a one-shot driver. */
        fflush(stdout);
        _exit(0);
    }
    fprintf(stderr, "unknown scenario %s\n", argv[1]);
    return 2;
}
