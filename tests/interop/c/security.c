/* User/password and token auth, and TLS with a test CA. */
#include "interop.h"

#include <stdlib.h>
#include <string.h>

/* Publishes one message to its own subscription and checks it comes back. */
static natsStatus round_trip(natsConnection *nc, const char *subject) {
    natsSubscription *sub = NULL;
    natsMsg *m = NULL;
    natsStatus s = natsConnection_SubscribeSync(&sub, nc, subject);
    TRY(natsConnection_PublishString(nc, subject, "secret"));
    TRY(natsSubscription_NextMsg(&m, sub, WAIT_MS));
    if (s == NATS_OK && strcmp(natsMsg_GetData(m), "secret") != 0)
        s = fail_text("round trip payload differs");
    natsMsg_Destroy(m);
    natsSubscription_Destroy(sub);
    return s;
}

static void out_result(const char *ev, const char *name, natsStatus s) {
    out_begin(ev);
    out_str("case", name);
    out_str("result", s == NATS_OK ? "ok" : natsStatus_GetText(s));
    out_str("detail", s == NATS_OK ? "" : nats_GetLastError(NULL));
    out_end();
}

/* "user:pass" (mode user), "token" (mode token) or a creds file (mode creds: user JWT and nkey seed), or
   nothing when cred is NULL. */
static natsStatus connect_cred(natsConnection **nc, const char *url, const char *mode, const char *cred) {
    natsOptions *opts = NULL;
    natsStatus s = natsOptions_Create(&opts);
    TRY(natsOptions_SetAllowReconnect(opts, false));
    if (cred && strcmp(mode, "creds") == 0) {
        TRY(natsOptions_SetUserCredentialsFromFiles(opts, cred, NULL));
    } else if (cred && strcmp(mode, "user") == 0) {
        char *user = strdup(cred), *pass = strchr(user, ':');
        if (pass)
            *pass++ = '\0';
        TRY(natsOptions_SetUserInfo(opts, user, pass ? pass : ""));
        free(user);
    } else if (cred) {
        TRY(natsOptions_SetToken(opts, cred));
    }
    TRY(connect_with(nc, url, opts, NULL));
    natsOptions_Destroy(opts);
    return s;
}

/* Good credentials (with a round trip), bad ones, and none. */
natsStatus run_auth(const char *url, char **args, int nargs) {
    (void)nargs;
    const char *mode = args[0];
    const char *names[] = {"good", "bad", "none"};
    const char *creds[] = {args[1], args[2], NULL};
    for (int i = 0; i < 3; i++) {
        natsConnection *nc = NULL;
        natsStatus s = connect_cred(&nc, url, mode, creds[i]);
        if (s == NATS_OK && i == 0)
            s = round_trip(nc, "interop.auth");
        natsConnection_Destroy(nc);
        out_result("auth", names[i], s);
    }
    return NATS_OK;
}

/* Over TLS trusting the test CA (with a round trip), then without trusting it. */
natsStatus run_tls(const char *url, char **args, int nargs) {
    (void)nargs;
    for (int trusted = 1; trusted >= 0; trusted--) {
        natsConnection *nc = NULL;
        natsOptions *opts = NULL;
        natsStatus s = natsOptions_Create(&opts);
        TRY(natsOptions_SetSecure(opts, true));
        TRY(natsOptions_SetAllowReconnect(opts, false));
        if (trusted)
            TRY(natsOptions_LoadCATrustedCertificates(opts, args[0]));
        TRY(connect_with(&nc, url, opts, NULL));
        if (trusted)
            TRY(round_trip(nc, "interop.tls"));
        natsConnection_Destroy(nc);
        natsOptions_Destroy(opts);
        out_result("tls", trusted ? "trusted" : "untrusted", s);
    }
    return NATS_OK;
}

/* Mutual TLS: with a client certificate (with a round trip), then without one. */
natsStatus run_mtls(const char *url, char **args, int nargs) {
    (void)nargs;
    for (int with_cert = 1; with_cert >= 0; with_cert--) {
        natsConnection *nc = NULL;
        natsOptions *opts = NULL;
        natsStatus s = natsOptions_Create(&opts);
        TRY(natsOptions_SetSecure(opts, true));
        TRY(natsOptions_SetAllowReconnect(opts, false));
        TRY(natsOptions_LoadCATrustedCertificates(opts, args[0]));
        if (with_cert)
            TRY(natsOptions_LoadCertificatesChain(opts, args[1], args[2]));
        TRY(connect_with(&nc, url, opts, NULL));
        TRY(round_trip(nc, "interop.mtls"));
        natsConnection_Destroy(nc);
        natsOptions_Destroy(opts);
        out_result("mtls", with_cert ? "with_cert" : "without_cert", s);
    }
    return NATS_OK;
}
