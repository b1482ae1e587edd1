/* Generic publisher and subscriber used by the cross-client tests. */
#include "interop.h"

#include <stdlib.h>

/* Publishes count messages with the spec headers and payloads. */
natsStatus run_pub(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *subject = args[0];
    int count = atoi(args[1]);
    natsConnection *nc = NULL;
    natsStatus s = connect_plain(&nc, url);
    for (int i = 0; i < count && s == NATS_OK; i++) {
        natsMsg *m = NULL;
        char *data = payload(i);
        TRY(natsMsg_Create(&m, subject, NULL, data, payload_size(i)));
        TRY(add_spec_headers(m, i, "c"));
        TRY(natsConnection_PublishMsg(nc, m));
        natsMsg_Destroy(m);
        free(data);
    }
    TRY(natsConnection_Flush(nc));
    natsConnection_Destroy(nc);
    return s;
}

/* Prints "ready" once subscribed, then the next count messages as they arrive. */
natsStatus run_sub(const char *url, char **args, int nargs) {
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
