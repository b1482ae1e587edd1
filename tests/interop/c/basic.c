/* Connect options, pub/sub, wildcards, queue groups, auto-unsubscribe, flush and RTT. */
#include "interop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEEN 8

/* Collects payloads from sub until the sentinel arrives. */
static natsStatus collect_until_sentinel(natsSubscription *sub, const char **seen, int *n) {
    natsStatus s = NATS_OK;
    for (*n = 0; *n < MAX_SEEN;) {
        natsMsg *m = NULL;
        TRY(natsSubscription_NextMsg(&m, sub, WAIT_MS));
        if (s != NATS_OK)
            return s;
        seen[*n] = strndup(natsMsg_GetData(m), natsMsg_GetDataLength(m));
        natsMsg_Destroy(m);
        if (strcmp(seen[(*n)++], "sentinel") == 0)
            return NATS_OK;
    }
    return fail_text("sentinel not seen");
}

static natsStatus publish_flush(natsConnection *nc, const char *subject, const char *data) {
    natsStatus s = natsConnection_PublishString(nc, subject, data);
    TRY(natsConnection_Flush(nc));
    return s;
}

/* Connect options: name, echo off vs on, header support, INFO values (see the Go driver's runConnect). */
natsStatus run_connect(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *subject = args[0];
    natsConnection *noecho = NULL, *echo = NULL, *other = NULL;
    natsSubscription *sub_noecho = NULL, *sub_echo = NULL;
    natsOptions *opts = NULL;
    const char *seen_noecho[MAX_SEEN], *seen_echo[MAX_SEEN];
    int n_noecho = 0, n_echo = 0;
    uint64_t cid = 0;

    natsStatus s = natsOptions_Create(&opts);
    TRY(natsOptions_SetNoEcho(opts, true));
    TRY(connect_with(&noecho, url, opts, "interop-c-noecho"));
    TRY(connect_with(&echo, url, NULL, "interop-c-echo"));
    TRY(connect_plain(&other, url));
    TRY(natsConnection_SubscribeSync(&sub_noecho, noecho, subject));
    TRY(natsConnection_Flush(noecho));
    TRY(natsConnection_SubscribeSync(&sub_echo, echo, subject));
    TRY(natsConnection_Flush(echo));
    TRY(publish_flush(noecho, subject, "from-noecho"));
    TRY(publish_flush(echo, subject, "from-echo"));
    TRY(publish_flush(other, subject, "sentinel"));
    TRY(collect_until_sentinel(sub_noecho, seen_noecho, &n_noecho));
    TRY(collect_until_sentinel(sub_echo, seen_echo, &n_echo));
    TRY(natsConnection_GetClientID(noecho, &cid));
    if (s == NATS_OK) {
        out_begin("connect");
        out_bool("headers", natsConnection_HasHeaderSupport(noecho) == NATS_OK);
        out_int("max_payload", natsConnection_GetMaxPayload(noecho));
        out_int("client_id", (int64_t)cid);
        out_strs("noecho_seen", seen_noecho, n_noecho);
        out_strs("echo_seen", seen_echo, n_echo);
        out_end();
        /* The harness inspects /connz while the connections are open, then releases us. */
        out_event("ready");
        wait_stdin();
    }
    natsSubscription_Destroy(sub_noecho);
    natsSubscription_Destroy(sub_echo);
    natsConnection_Destroy(noecho);
    natsConnection_Destroy(echo);
    natsConnection_Destroy(other);
    natsOptions_Destroy(opts);
    return s;
}

/* Publishes count payloads of assorted sizes to its own subscription and prints them. */
natsStatus run_pubsub(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *subject = args[0];
    int count = atoi(args[1]);
    natsConnection *nc = NULL;
    natsSubscription *sub = NULL;
    natsStatus s = connect_plain(&nc, url);
    TRY(natsConnection_SubscribeSync(&sub, nc, subject));
    for (int i = 0; i < count && s == NATS_OK; i++) {
        char *data = payload(i);
        s = natsConnection_Publish(nc, subject, data, payload_size(i));
        free(data);
    }
    for (int i = 0; i < count && s == NATS_OK; i++) {
        natsMsg *m = NULL;
        TRY(natsSubscription_NextMsg(&m, sub, WAIT_MS));
        if (s == NATS_OK)
            out_msg("msg", m);
        natsMsg_Destroy(m);
    }
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    return s;
}

static const char *wildcard_patterns[] = {"*", ">", "a.*", "*.c", "a.>"};
static const char *wildcard_subjects[] = {"a", "a.b", "x.c", "a.b.c", "a.c"};
#define NPATTERNS (int)(sizeof(wildcard_patterns) / sizeof(wildcard_patterns[0]))
#define NSUBJECTS (int)(sizeof(wildcard_subjects) / sizeof(wildcard_subjects[0]))

/* For each pattern, every subject it received (after a flush all are queued). */
natsStatus run_wildcards(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *prefix = args[0];
    char subj[256];
    natsConnection *nc = NULL;
    natsSubscription *subs[NPATTERNS] = {0};
    natsStatus s = connect_plain(&nc, url);
    for (int i = 0; i < NPATTERNS; i++) {
        snprintf(subj, sizeof(subj), "%s.%s", prefix, wildcard_patterns[i]);
        TRY(natsConnection_SubscribeSync(&subs[i], nc, subj));
    }
    for (int i = 0; i < NSUBJECTS; i++) {
        snprintf(subj, sizeof(subj), "%s.%s", prefix, wildcard_subjects[i]);
        TRY(natsConnection_PublishString(nc, subj, wildcard_subjects[i]));
    }
    /* The bare prefix matches none of the patterns ('>' needs at least one more token). */
    TRY(natsConnection_PublishString(nc, prefix, "bare"));
    TRY(natsConnection_Flush(nc));
    for (int i = 0; i < NPATTERNS && s == NATS_OK; i++) {
        natsMsg **msgs = NULL;
        int n = 0;
        TRY(drain_pending(subs[i], &msgs, &n));
        if (s == NATS_OK) {
            const char *got[16];
            for (int k = 0; k < n && k < 16; k++)
                got[k] = natsMsg_GetSubject(msgs[k]);
            out_begin("wildcard");
            out_str("pattern", wildcard_patterns[i]);
            out_strs("subjects", got, n < 16 ? n : 16);
            out_end();
        }
        free_msgs(msgs, n);
    }
    for (int i = 0; i < NPATTERNS; i++)
        natsSubscription_Destroy(subs[i]);
    natsConnection_Destroy(nc);
    return s;
}

/* Spreads count messages over three queue members and one plain subscriber on one connection. */
natsStatus run_queue(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *subject = args[0];
    int count = atoi(args[1]);
    natsConnection *nc = NULL;
    natsSubscription *subs[4] = {0};
    natsStatus s = connect_plain(&nc, url);
    for (int i = 0; i < 3; i++)
        TRY(natsConnection_QueueSubscribeSync(&subs[i], nc, subject, "workers"));
    TRY(natsConnection_SubscribeSync(&subs[3], nc, subject));
    for (int i = 0; i < count && s == NATS_OK; i++) {
        char seq[16];
        snprintf(seq, sizeof(seq), "%d", i);
        s = natsConnection_PublishString(nc, subject, seq);
    }
    TRY(natsConnection_Flush(nc));
    for (int i = 0; i < 4 && s == NATS_OK; i++) {
        natsMsg **msgs = NULL;
        int n = 0;
        TRY(drain_pending(subs[i], &msgs, &n));
        if (s == NATS_OK) {
            const char **seqs = calloc(n + 1, sizeof(char *));
            for (int k = 0; k < n; k++)
                seqs[k] = natsMsg_GetData(msgs[k]); /* libnats NUL-terminates message data */
            char member[8];
            snprintf(member, sizeof(member), "q%d", i);
            out_begin("queue");
            out_str("member", i == 3 ? "plain" : member);
            out_strs("seqs", seqs, n);
            out_end();
            free(seqs);
        }
        free_msgs(msgs, n);
    }
    for (int i = 0; i < 4; i++)
        natsSubscription_Destroy(subs[i]);
    natsConnection_Destroy(nc);
    return s;
}

/* Auto-unsubscribe after max messages; the receiving connection's in_msgs counts what the server sent. */
natsStatus run_autounsub(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *subject = args[0];
    int max = atoi(args[1]), count = atoi(args[2]);
    natsConnection *nc = NULL, *pub = NULL;
    natsSubscription *sub = NULL;
    natsStatistics *stats = NULL;
    uint64_t in_msgs = 0;
    const char *received[64];
    int n = 0;
    natsStatus s = connect_plain(&nc, url);
    TRY(connect_plain(&pub, url));
    TRY(natsConnection_SubscribeSync(&sub, nc, subject));
    TRY(natsSubscription_AutoUnsubscribe(sub, max));
    TRY(natsConnection_Flush(nc));
    for (int i = 0; i < count && s == NATS_OK; i++) {
        char seq[16];
        snprintf(seq, sizeof(seq), "%d", i);
        s = natsConnection_PublishString(pub, subject, seq);
    }
    TRY(natsConnection_Flush(pub));
    /* A flush on the receiving side guarantees everything the server routed to us has been read. */
    TRY(natsConnection_Flush(nc));
    for (; s == NATS_OK && n < max && n < count && n < 64; n++) {
        natsMsg *m = NULL;
        TRY(natsSubscription_NextMsg(&m, sub, WAIT_MS));
        if (s == NATS_OK)
            received[n] = strdup(natsMsg_GetData(m));
        natsMsg_Destroy(m);
    }
    if (s != NATS_OK)
        n--;
    /* One more read must fail at once: the limit is reached and the subscription is gone. */
    natsMsg *extra = NULL;
    natsStatus extra_s = s == NATS_OK ? natsSubscription_NextMsg(&extra, sub, WAIT_MS) : NATS_OK;
    natsMsg_Destroy(extra);
    TRY(natsStatistics_Create(&stats));
    TRY(natsConnection_GetStats(nc, stats));
    TRY(natsStatistics_GetCounts(stats, &in_msgs, NULL, NULL, NULL, NULL));
    if (s == NATS_OK) {
        out_begin("autounsub");
        out_strs("received", received, n);
        out_int("in_msgs", (int64_t)in_msgs);
        out_bool("valid", natsSubscription_IsValid(sub));
        out_str("extra_err", natsStatus_GetText(extra_s));
        out_end();
    }
    natsStatistics_Destroy(stats);
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    natsConnection_Destroy(pub);
    return s;
}

/* Flush, FlushTimeout and RTT. */
natsStatus run_flush(const char *url, char **args, int nargs) {
    (void)args;
    (void)nargs;
    natsConnection *nc = NULL;
    natsStatistics *stats = NULL;
    int64_t rtt = 0;
    uint64_t out_msgs = 0;
    natsStatus s = connect_plain(&nc, url);
    for (int i = 0; i < 100; i++)
        TRY(natsConnection_PublishString(nc, "interop.flush", "x"));
    TRY(natsConnection_Flush(nc));
    TRY(natsConnection_FlushTimeout(nc, 5000));
    TRY(natsConnection_GetRTT(nc, &rtt));
    TRY(natsStatistics_Create(&stats));
    TRY(natsConnection_GetStats(nc, stats));
    TRY(natsStatistics_GetCounts(stats, NULL, NULL, &out_msgs, NULL, NULL));
    if (s == NATS_OK) {
        out_begin("flush");
        out_int("rtt_ns", rtt);
        out_int("buffered", natsConnection_Buffered(nc));
        out_int("out_msgs", (int64_t)out_msgs);
        out_end();
    }
    natsStatistics_Destroy(stats);
    natsConnection_Destroy(nc);
    return s;
}

/* Against a server with no_header_support: headers unsupported, a message with headers refused,
 * plain messages still delivered (see the Go driver's runNoHeaders). */
natsStatus run_noheaders(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *subject = args[0];
    natsConnection *nc = NULL;
    natsSubscription *sub = NULL;
    natsMsg *m = NULL, *got = NULL;
    natsStatus s = connect_plain(&nc, url);
    TRY(natsMsg_Create(&m, subject, NULL, "h", 1));
    TRY(natsMsgHeader_Set(m, "X-Test", "1"));
    if (s != NATS_OK)
        return s;
    natsStatus has = natsConnection_HasHeaderSupport(nc);
    natsStatus with_headers = natsConnection_PublishMsg(nc, m);
    natsStatus trip = natsConnection_SubscribeSync(&sub, nc, subject);
    if (trip == NATS_OK)
        trip = natsConnection_PublishString(nc, subject, "secret");
    if (trip == NATS_OK)
        trip = natsSubscription_NextMsg(&got, sub, WAIT_MS);
    out_begin("noheaders");
    out_bool("headers", has == NATS_OK);
    out_str("publish_with_headers", with_headers == NATS_OK ? "ok" : natsStatus_GetText(with_headers));
    out_str("round_trip", trip == NATS_OK ? "ok" : natsStatus_GetText(trip));
    out_end();
    natsMsg_Destroy(got);
    natsMsg_Destroy(m);
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    return NATS_OK;
}
