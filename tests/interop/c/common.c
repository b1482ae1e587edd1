/* Output, spec and connection helpers shared by every scenario. */
#include "interop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool first_field;

static void put_json_string(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

static void put_key(const char *key) {
    if (!first_field)
        putchar(',');
    first_field = false;
    put_json_string(key);
    putchar(':');
}

void out_begin(const char *ev) {
    first_field = true;
    putchar('{');
    out_str("ev", ev);
}

void out_str(const char *key, const char *val) {
    put_key(key);
    put_json_string(val ? val : "");
}

void out_int(const char *key, int64_t val) {
    put_key(key);
    printf("%lld", (long long)val);
}

void out_bool(const char *key, bool val) {
    put_key(key);
    fputs(val ? "true" : "false", stdout);
}

void out_hex(const char *key, const char *data, int len) {
    put_key(key);
    putchar('"');
    for (int i = 0; i < len; i++)
        printf("%02x", (unsigned char)data[i]);
    putchar('"');
}

void out_strs(const char *key, const char **vals, int n) {
    put_key(key);
    putchar('[');
    for (int i = 0; i < n; i++) {
        if (i)
            putchar(',');
        put_json_string(vals[i]);
    }
    putchar(']');
}

void out_end(void) {
    fputs("}\n", stdout);
    fflush(stdout);
}

void out_event(const char *ev) {
    out_begin(ev);
    out_end();
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Headers as [key, value] pairs: keys sorted, values in wire order (as the Go driver prints them). */
static void out_headers(natsMsg *m) {
    const char **keys = NULL;
    int nkeys = 0;
    put_key("hdr");
    putchar('[');
    if (natsMsgHeader_Keys(m, &keys, &nkeys) == NATS_OK) {
        qsort(keys, nkeys, sizeof(*keys), cmp_str);
        bool first = true;
        for (int k = 0; k < nkeys; k++) {
            const char **vals = NULL;
            int nvals = 0;
            if (natsMsgHeader_Values(m, keys[k], &vals, &nvals) != NATS_OK)
                continue;
            for (int v = 0; v < nvals; v++) {
                printf("%s[", first ? "" : ",");
                first = false;
                put_json_string(keys[k]);
                putchar(',');
                put_json_string(vals[v]);
                putchar(']');
            }
            free((void *)vals);
        }
        free((void *)keys);
    }
    putchar(']');
}

void out_msg(const char *ev, natsMsg *m) {
    out_begin(ev);
    out_str("subject", natsMsg_GetSubject(m));
    out_str("reply", natsMsg_GetReply(m));
    out_hex("data", natsMsg_GetData(m), natsMsg_GetDataLength(m));
    out_headers(m);
    out_end();
}

static const int sizes[] = {0, 1, 2, 10, 127, 128, 1000, 4095, 4096, 65536};

int payload_size(int i) { return sizes[i % (int)(sizeof(sizes) / sizeof(sizes[0]))]; }

char *payload(int i) {
    int n = payload_size(i);
    char *b = malloc(n + 1);
    for (int j = 0; j < n; j++)
        b[j] = (char)((i + 7 * j) % 256);
    return b;
}

natsStatus add_spec_headers(natsMsg *m, int i, const char *origin) {
    char seq[16];
    snprintf(seq, sizeof(seq), "%d", i);
    natsStatus s = NATS_OK;
    TRY(natsMsgHeader_Add(m, "X-Seq", seq));
    TRY(natsMsgHeader_Add(m, "X-Multi", "one"));
    TRY(natsMsgHeader_Add(m, "X-Multi", "two"));
    TRY(natsMsgHeader_Add(m, "X-Spaces", "a  b c"));
    TRY(natsMsgHeader_Add(m, "X-Colon", "k:v:w"));
    TRY(natsMsgHeader_Add(m, "x-lower", "MiXeD"));
    TRY(natsMsgHeader_Add(m, "X-Origin", origin));
    return s;
}

natsStatus connect_with(natsConnection **nc, const char *url, natsOptions *opts, const char *name) {
    natsOptions *own = NULL;
    natsStatus s = NATS_OK;
    if (opts == NULL) {
        s = natsOptions_Create(&own);
        opts = own;
    }
    TRY(natsOptions_SetURL(opts, url));
    TRY(natsOptions_SetName(opts, name ? name : "interop-c"));
    TRY(natsOptions_SetTimeout(opts, 5000));
    TRY(natsConnection_Connect(nc, opts));
    natsOptions_Destroy(own);
    return s;
}

natsStatus connect_plain(natsConnection **nc, const char *url) { return connect_with(nc, url, NULL, NULL); }

natsStatus drain_pending(natsSubscription *sub, natsMsg ***msgs, int *n) {
    int bytes = 0;
    natsStatus s = natsSubscription_GetPending(sub, n, &bytes);
    if (s != NATS_OK)
        return s;
    *msgs = calloc(*n + 1, sizeof(natsMsg *));
    for (int i = 0; i < *n && s == NATS_OK; i++)
        s = natsSubscription_NextMsg(&(*msgs)[i], sub, WAIT_MS);
    return s;
}

void free_msgs(natsMsg **msgs, int n) {
    for (int i = 0; i < n; i++)
        natsMsg_Destroy(msgs[i]);
    free(msgs);
}

void set_flag(volatile int *flag) { __atomic_store_n(flag, 1, __ATOMIC_SEQ_CST); }

int get_flag(volatile int *flag) { return __atomic_load_n(flag, __ATOMIC_SEQ_CST); }

bool wait_flag(volatile int *flag) {
    for (int waited = 0; waited < WAIT_MS; waited += 5) {
        if (get_flag(flag))
            return true;
        nats_Sleep(5);
    }
    return get_flag(flag) != 0;
}

void wait_stdin(void) {
    char line[64];
    (void)!fgets(line, sizeof(line), stdin);
}

natsStatus fail_text(const char *msg) {
    out_begin("error");
    out_str("msg", msg);
    out_end();
    return NATS_ERR;
}
