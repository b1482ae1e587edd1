/* Request/reply (old and new style), a responder, and no-responders errors. */
#include "interop.h"

#include <stdlib.h>
#include <string.h>

static natsStatus copy_headers(natsMsg *from, natsMsg *to) {
    const char **keys = NULL;
    int nkeys = 0;
    natsStatus s = natsMsgHeader_Keys(from, &keys, &nkeys);
    if (s == NATS_NOT_FOUND)
        return NATS_OK; /* no headers at all */
    for (int k = 0; k < nkeys && s == NATS_OK; k++) {
        const char **vals = NULL;
        int nvals = 0;
        s = natsMsgHeader_Values(from, keys[k], &vals, &nvals);
        for (int v = 0; v < nvals && s == NATS_OK; v++)
            s = natsMsgHeader_Add(to, keys[k], vals[v]);
        free((void *)vals);
    }
    free((void *)keys);
    return s;
}

/* Answers count requests with "re:" + payload, the request headers, X-Responder and X-Reply-To. */
natsStatus run_respond(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *subject = args[0];
    int count = atoi(args[1]);
    natsConnection *nc = NULL;
    natsSubscription *sub = NULL;
    natsStatus s = connect_plain(&nc, url);
    TRY(natsConnection_SubscribeSync(&sub, nc, subject));
    TRY(natsConnection_Flush(nc));
    if (s == NATS_OK)
        out_event("ready");
    for (int i = 0; i < count && s == NATS_OK; i++) {
        natsMsg *m = NULL, *reply = NULL;
        TRY(natsSubscription_NextMsg(&m, sub, WAIT_MS));
        if (s != NATS_OK)
            break;
        out_msg("request", m);
        int len = natsMsg_GetDataLength(m);
        char *data = malloc(len + 3);
        memcpy(data, "re:", 3);
        memcpy(data + 3, natsMsg_GetData(m), len);
        TRY(natsMsg_Create(&reply, natsMsg_GetReply(m), NULL, data, len + 3));
        TRY(copy_headers(m, reply));
        TRY(natsMsgHeader_Set(reply, "X-Responder", "c"));
        TRY(natsMsgHeader_Set(reply, "X-Reply-To", natsMsg_GetReply(m)));
        TRY(natsConnection_PublishMsg(nc, reply));
        free(data);
        natsMsg_Destroy(reply);
        natsMsg_Destroy(m);
    }
    TRY(natsConnection_Flush(nc));
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    return s;
}

static natsStatus connect_style(natsConnection **nc, const char *url, const char *style) {
    natsOptions *opts = NULL;
    natsStatus s = natsOptions_Create(&opts);
    TRY(natsOptions_UseOldRequestStyle(opts, strcmp(style, "old") == 0));
    TRY(connect_with(nc, url, opts, NULL));
    natsOptions_Destroy(opts);
    return s;
}

/* Sends count requests with headers in the old (inbox per request) or new (muxed inbox) style. */
natsStatus run_request(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *subject = args[0], *style = args[2];
    int count = atoi(args[1]);
    natsConnection *nc = NULL;
    natsStatus s = connect_style(&nc, url, style);
    for (int i = 0; i < count && s == NATS_OK; i++) {
        natsMsg *req = NULL, *resp = NULL;
        char *data = payload(i);
        TRY(natsMsg_Create(&req, subject, NULL, data, payload_size(i)));
        TRY(add_spec_headers(req, i, "c"));
        TRY(natsConnection_RequestMsg(&resp, nc, req, WAIT_MS));
        if (s == NATS_OK)
            out_msg("reply", resp);
        free(data);
        natsMsg_Destroy(req);
        natsMsg_Destroy(resp);
    }
    natsConnection_Destroy(nc);
    return s;
}

/* Requests a subject nobody listens on, in both request styles. */
natsStatus run_noresp(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *styles[] = {"new", "old"};
    natsStatus s = NATS_OK;
    for (int i = 0; i < 2 && s == NATS_OK; i++) {
        natsConnection *nc = NULL;
        natsMsg *reply = NULL;
        s = connect_style(&nc, url, styles[i]);
        if (s != NATS_OK)
            break;
        natsStatus r = natsConnection_RequestString(&reply, nc, args[0], "anyone?", WAIT_MS);
        natsMsg_Destroy(reply);
        natsConnection_Destroy(nc);
        out_begin("noresp");
        out_str("style", styles[i]);
        out_str("result", r == NATS_NO_RESPONDERS ? "no_responders" : r == NATS_OK ? "ok" : natsStatus_GetText(r));
        out_end();
    }
    return s;
}
