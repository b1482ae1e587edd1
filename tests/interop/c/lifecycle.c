/* Drain, reconnect with buffered publishes, and a client-reported slow consumer. */
#include "interop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile int closed_flag, disconnected_flag, reconnected_flag, slow_flag, release_flag;
static volatile int processed;

static void on_closed(natsConnection *nc, void *closure) {
    (void)nc;
    (void)closure;
    set_flag(&closed_flag);
}

static void on_disconnected(natsConnection *nc, void *closure) {
    (void)nc;
    (void)closure;
    set_flag(&disconnected_flag);
}

static void on_reconnected(natsConnection *nc, void *closure) {
    (void)nc;
    (void)closure;
    set_flag(&reconnected_flag);
}

static void on_error(natsConnection *nc, natsSubscription *sub, natsStatus err, void *closure) {
    (void)nc;
    (void)sub;
    (void)closure;
    if (err == NATS_SLOW_CONSUMER)
        set_flag(&slow_flag);
}

static void slow_handler(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
    (void)nc;
    (void)sub;
    (void)closure;
    nats_Sleep(1);
    __atomic_add_fetch(&processed, 1, __ATOMIC_SEQ_CST);
    natsMsg_Destroy(msg);
}

static void blocked_handler(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
    (void)nc;
    (void)sub;
    (void)closure;
    wait_flag(&release_flag);
    natsMsg_Destroy(msg);
}

static natsStatus publish_seqs(natsConnection *nc, const char *subject, int count) {
    natsStatus s = NATS_OK;
    for (int i = 0; i < count && s == NATS_OK; i++) {
        char seq[16];
        snprintf(seq, sizeof(seq), "%d", i);
        s = natsConnection_PublishString(nc, subject, seq);
    }
    return s;
}

/* A slow async handler falls behind, then the connection drains: all delivered messages get processed. */
natsStatus run_drain(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *subject = args[0];
    int count = atoi(args[1]);
    natsConnection *nc = NULL, *pub = NULL;
    natsSubscription *sub = NULL;
    natsOptions *opts = NULL;
    natsStatus s = natsOptions_Create(&opts);
    TRY(natsOptions_SetClosedCB(opts, on_closed, NULL));
    TRY(connect_with(&nc, url, opts, NULL));
    TRY(natsConnection_Subscribe(&sub, nc, subject, slow_handler, NULL));
    TRY(natsConnection_Flush(nc));
    TRY(connect_plain(&pub, url));
    TRY(publish_seqs(pub, subject, count));
    TRY(natsConnection_Flush(pub));
    TRY(natsConnection_Flush(nc));
    int at_drain = __atomic_load_n(&processed, __ATOMIC_SEQ_CST);
    TRY(natsConnection_Drain(nc));
    if (s == NATS_OK && !wait_flag(&closed_flag))
        s = fail_text("timed out waiting for close after drain");
    if (s == NATS_OK) {
        natsStatus after = natsConnection_PublishString(nc, subject, "late");
        out_begin("drain");
        out_int("processed", __atomic_load_n(&processed, __ATOMIC_SEQ_CST));
        out_int("processed_at_drain", at_drain);
        out_bool("closed", natsConnection_IsClosed(nc));
        out_str("publish_after", natsStatus_GetText(after));
        out_end();
    }
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    natsConnection_Destroy(pub);
    natsOptions_Destroy(opts);
    return s;
}

/* Survives a broker restart on the same port (same harness protocol as the Go driver's runReconnect). */
natsStatus run_reconnect(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *subject = args[0];
    int count = atoi(args[1]);
    natsConnection *nc = NULL;
    natsSubscription *sub = NULL;
    natsOptions *opts = NULL;
    natsStatistics *stats = NULL;
    uint64_t reconnects = 0;
    natsStatus s = natsOptions_Create(&opts);
    TRY(natsOptions_SetMaxReconnect(opts, 1000));
    TRY(natsOptions_SetReconnectWait(opts, 100));
    TRY(natsOptions_SetReconnectJitter(opts, 0, 0));
    TRY(natsOptions_SetDisconnectedCB(opts, on_disconnected, NULL));
    TRY(natsOptions_SetReconnectedCB(opts, on_reconnected, NULL));
    TRY(connect_with(&nc, url, opts, NULL));
    TRY(natsConnection_SubscribeSync(&sub, nc, subject));
    TRY(natsConnection_Flush(nc));
    if (s == NATS_OK)
        out_event("ready");
    if (s == NATS_OK && !wait_flag(&disconnected_flag))
        s = fail_text("timed out waiting for disconnect");
    if (s == NATS_OK)
        out_event("disconnected");
    TRY(publish_seqs(nc, subject, count));
    if (s == NATS_OK) {
        out_begin("buffered");
        out_int("bytes", natsConnection_Buffered(nc));
        out_end();
    }
    if (s == NATS_OK && !wait_flag(&reconnected_flag))
        s = fail_text("timed out waiting for reconnect");
    TRY(natsStatistics_Create(&stats));
    TRY(natsConnection_GetStats(nc, stats));
    TRY(natsStatistics_GetCounts(stats, NULL, NULL, NULL, NULL, &reconnects));
    if (s == NATS_OK) {
        out_begin("reconnected");
        out_int("reconnects", (int64_t)reconnects);
        out_end();
    }
    const char **seqs = calloc(count + 1, sizeof(char *));
    int n = 0;
    for (; n < count && s == NATS_OK; n++) {
        natsMsg *m = NULL;
        TRY(natsSubscription_NextMsg(&m, sub, WAIT_MS));
        if (s == NATS_OK)
            seqs[n] = strdup(natsMsg_GetData(m));
        natsMsg_Destroy(m);
    }
    if (s == NATS_OK) {
        out_begin("delivered");
        out_strs("seqs", seqs, n);
        out_end();
    }
    free(seqs);
    natsStatistics_Destroy(stats);
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    natsOptions_Destroy(opts);
    return s;
}

/* A blocked handler overflows a 5-message pending limit: the client reports NATS_SLOW_CONSUMER. */
natsStatus run_slow(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *subject = args[0];
    const int count = 50;
    natsConnection *nc = NULL, *pub = NULL;
    natsSubscription *sub = NULL;
    natsOptions *opts = NULL;
    int64_t dropped = 0;
    natsStatus s = natsOptions_Create(&opts);
    TRY(natsOptions_SetErrorHandler(opts, on_error, NULL));
    TRY(connect_with(&nc, url, opts, NULL));
    TRY(natsConnection_Subscribe(&sub, nc, subject, blocked_handler, NULL));
    TRY(natsSubscription_SetPendingLimits(sub, 5, 1 << 20));
    TRY(natsConnection_Flush(nc));
    TRY(connect_plain(&pub, url));
    TRY(publish_seqs(pub, subject, count));
    TRY(natsConnection_Flush(pub));
    TRY(natsConnection_Flush(nc));
    bool reported = s == NATS_OK && wait_flag(&slow_flag);
    set_flag(&release_flag);
    TRY(natsSubscription_GetDropped(sub, &dropped));
    if (s == NATS_OK && !reported)
        s = fail_text("timed out waiting for the slow consumer error");
    if (s == NATS_OK) {
        out_begin("slow");
        out_bool("reported", reported);
        out_int("dropped", dropped);
        out_int("published", count);
        out_end();
    }
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    natsConnection_Destroy(pub);
    natsOptions_Destroy(opts);
    return s;
}
