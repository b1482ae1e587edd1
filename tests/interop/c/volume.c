/* A fast burst of small messages, and a subscriber checking per-origin order and integrity. */
#include "interop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Message i of a burst: origin letter, 8-digit sequence, ':' and i%100 padding bytes. */
static int burst_payload(char *buf, char origin, int i) {
    int n = snprintf(buf, 16, "%c%08d:", origin, i);
    memset(buf + n, 'x', i % 100);
    return n + i % 100;
}

natsStatus run_burst(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *subject = args[0];
    int count = atoi(args[1]);
    char buf[128];
    natsConnection *nc = NULL;
    natsStatus s = connect_plain(&nc, url);
    for (int i = 0; i < count && s == NATS_OK; i++)
        s = natsConnection_Publish(nc, subject, buf, burst_payload(buf, 'c', i));
    TRY(natsConnection_Flush(nc));
    natsConnection_Destroy(nc);
    return s;
}

natsStatus run_tally(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *subject = args[0];
    int count = atoi(args[1]);
    int next[256] = {0};
    int bad = 0;
    char first_bad[256] = "", expect[128];
    natsConnection *nc = NULL;
    natsSubscription *sub = NULL;
    natsStatus s = connect_plain(&nc, url);
    TRY(natsConnection_SubscribeSync(&sub, nc, subject));
    TRY(natsSubscription_SetPendingLimits(sub, -1, -1));
    TRY(natsConnection_Flush(nc));
    if (s == NATS_OK)
        out_event("ready");
    for (int n = 0; n < count && s == NATS_OK; n++) {
        natsMsg *m = NULL;
        TRY(natsSubscription_NextMsg(&m, sub, WAIT_MS));
        if (s != NATS_OK)
            break;
        const char *data = natsMsg_GetData(m);
        int len = natsMsg_GetDataLength(m);
        unsigned char origin = len > 0 ? (unsigned char)data[0] : 0;
        int seq = len >= 10 ? atoi(data + 1) : -1;
        int elen = seq >= 0 ? burst_payload(expect, (char)origin, seq) : -1;
        if (seq != next[origin] || elen != len || memcmp(expect, data, len) != 0) {
            if (bad++ == 0)
                snprintf(first_bad, sizeof(first_bad), "message %d: origin %c seq %d len %d (expected seq %d)", n,
                         origin, seq, len, next[origin]);
        }
        next[origin] = seq + 1;
        natsMsg_Destroy(m);
    }
    if (s == NATS_OK) {
        out_begin("tally");
        out_int("received", count);
        out_int("bad", bad);
        out_str("first_bad", first_bad);
        out_end();
    }
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    return s;
}
