/* The "js" scenario: libnats' JetStream and KV API driven by commands read from stdin, one per line
 * (tests/interop/test_jetstream_c.py writes them), each answered by one JSON line: what the call returned,
 * or its error (natsStatus text, JetStream error code, libnats' last error text).
 *
 *   stream|update NAME SUBJECT [storage=memory retention=interest|workqueue discard=new max_msgs=N
 *                               max_bytes=N max_per=N max_size=N sealed=1 dnps=1 deny_delete=1
 *                               deny_purge=1 rollup=1 direct=1]
 *   pub SUBJECT DATA [msgid=ID stream=NAME els=N elss=N elmi=ID]
 *   info NAME | get NAME SEQ | last NAME SUBJECT | del NAME SEQ | purge NAME | delstream NAME | account
 *   consumer NAME DURABLE [filter=SUBJECT ack=all|none] | fetch NAME DURABLE BATCH | cinfo NAME DURABLE
 *   kv BUCKET HISTORY [storage=memory max_bytes=N] | kvput|kvcreate B KEY VALUE | kvupdate B KEY VALUE LAST
 *   kvget B KEY | kvgetrev B KEY REV | kvdel B KEY | kvpurge B KEY | kvstatus B | kvkeys B | kvhist B KEY
 */
#include "interop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 24
#define MAX_BUCKETS 8

static jsCtx *js;
static struct {
    char name[64];
    kvStore *kv;
} buckets[MAX_BUCKETS];

/* The value of key=... among the command's options, or NULL. */
static const char *opt(char **toks, int n, const char *key) {
    size_t len = strlen(key);
    for (int i = 0; i < n; i++)
        if (strncmp(toks[i], key, len) == 0 && toks[i][len] == '=')
            return toks[i] + len + 1;
    return NULL;
}

static int64_t opt_int(char **toks, int n, const char *key, int64_t dflt) {
    const char *v = opt(toks, n, key);
    return v ? strtoll(v, NULL, 10) : dflt;
}

static void out_result(const char *cmd, natsStatus s, jsErrCode jerr) {
    out_begin(cmd);
    out_str("status", natsStatus_GetText(s));
    if (s != NATS_OK) {
        out_int("code", (int64_t)jerr);
        out_str("text", nats_GetLastError(NULL));
    }
}

static kvStore *bucket(const char *name) {
    for (int i = 0; i < MAX_BUCKETS; i++)
        if (buckets[i].kv != NULL && strcmp(buckets[i].name, name) == 0)
            return buckets[i].kv;
    return NULL;
}

static void out_state(jsStreamState *st) {
    out_int("msgs", (int64_t)st->Msgs);
    out_int("bytes", (int64_t)st->Bytes);
    out_int("first_seq", (int64_t)st->FirstSeq);
    out_int("last_seq", (int64_t)st->LastSeq);
    out_int("num_subjects", st->NumSubjects);
    out_int("num_deleted", (int64_t)st->NumDeleted);
    out_int("consumers", st->Consumers);
}

static void do_stream(char **t, int n, bool update) {
    jsStreamConfig cfg;
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    const char *subjects[1] = {t[2]};
    const char *v;
    jsStreamConfig_Init(&cfg);
    cfg.Name = t[1];
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    if ((v = opt(t, n, "storage")) && strcmp(v, "memory") == 0)
        cfg.Storage = js_MemoryStorage;
    if ((v = opt(t, n, "retention")))
        cfg.Retention = strcmp(v, "interest") == 0 ? js_InterestPolicy : js_WorkQueuePolicy;
    if ((v = opt(t, n, "discard")) && strcmp(v, "new") == 0)
        cfg.Discard = js_DiscardNew;
    cfg.MaxMsgs = opt_int(t, n, "max_msgs", -1);
    cfg.MaxBytes = opt_int(t, n, "max_bytes", -1);
    cfg.MaxMsgsPerSubject = opt_int(t, n, "max_per", -1);
    cfg.MaxMsgSize = (int32_t)opt_int(t, n, "max_size", -1);
    cfg.Sealed = opt_int(t, n, "sealed", 0) != 0;
    cfg.DiscardNewPerSubject = opt_int(t, n, "dnps", 0) != 0;
    cfg.DenyDelete = opt_int(t, n, "deny_delete", 0) != 0;
    cfg.DenyPurge = opt_int(t, n, "deny_purge", 0) != 0;
    cfg.AllowRollup = opt_int(t, n, "rollup", 0) != 0;
    cfg.AllowDirect = opt_int(t, n, "direct", 0) != 0;
    natsStatus s = update ? js_UpdateStream(&si, js, &cfg, NULL, &jerr) : js_AddStream(&si, js, &cfg, NULL, &jerr);
    out_result(t[0], s, jerr);
    if (s == NATS_OK) {
        out_int("discard", si->Config->Discard);
        out_bool("sealed", si->Config->Sealed);
        out_bool("deny_delete", si->Config->DenyDelete);
        out_int("max_msgs", si->Config->MaxMsgs);
        out_state(&si->State);
        jsStreamInfo_Destroy(si);
    }
    out_end();
}

static void do_pub(char **t, int n) {
    jsPubOptions po;
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    jsPubOptions_Init(&po);
    po.MsgId = opt(t, n, "msgid");
    po.ExpectStream = opt(t, n, "stream");
    po.ExpectLastMsgId = opt(t, n, "elmi");
    po.ExpectLastSeq = (uint64_t)opt_int(t, n, "els", 0);
    po.ExpectLastSubjectSeq = (uint64_t)opt_int(t, n, "elss", 0);
    natsStatus s = js_Publish(&pa, js, t[1], t[2], (int)strlen(t[2]), &po, &jerr);
    out_result("pub", s, jerr);
    if (s == NATS_OK) {
        out_str("stream", pa->Stream);
        out_int("seq", (int64_t)pa->Sequence);
        out_bool("duplicate", pa->Duplicate);
        jsPubAck_Destroy(pa);
    }
    out_end();
}

static void out_stored(natsMsg *m) {
    out_str("subject", natsMsg_GetSubject(m));
    out_hex("data", natsMsg_GetData(m), natsMsg_GetDataLength(m));
    const char *seq = NULL;
    if (natsMsgHeader_Get(m, "Nats-Sequence", &seq) == NATS_OK)
        out_str("seq", seq);
}

static void do_get(char **t, bool last) {
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    natsStatus s = last ? js_GetLastMsg(&m, js, t[1], t[2], NULL, &jerr)
                        : js_GetMsg(&m, js, t[1], (uint64_t)strtoull(t[2], NULL, 10), NULL, &jerr);
    out_result(t[0], s, jerr);
    if (s == NATS_OK) {
        out_stored(m);
        natsMsg_Destroy(m);
    }
    out_end();
}

static void do_info(char **t) {
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, js, t[1], NULL, &jerr);
    out_result("info", s, jerr);
    if (s == NATS_OK) {
        out_state(&si->State);
        jsStreamInfo_Destroy(si);
    }
    out_end();
}

static void do_consumer(char **t, int n) {
    jsConsumerConfig cc;
    jsConsumerInfo *ci = NULL;
    jsErrCode jerr = 0;
    const char *v;
    jsConsumerConfig_Init(&cc);
    cc.Durable = t[2];
    cc.AckPolicy = js_AckExplicit;
    if ((v = opt(t, n, "ack")))
        cc.AckPolicy = strcmp(v, "all") == 0 ? js_AckAll : js_AckNone;
    cc.FilterSubject = opt(t, n, "filter");
    natsStatus s = js_AddConsumer(&ci, js, t[1], &cc, NULL, &jerr);
    out_result("consumer", s, jerr);
    if (s == NATS_OK) {
        out_int("num_pending", (int64_t)ci->NumPending);
        jsConsumerInfo_Destroy(ci);
    }
    out_end();
}

static void do_cinfo(char **t) {
    jsConsumerInfo *ci = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetConsumerInfo(&ci, js, t[1], t[2], NULL, &jerr);
    out_result("cinfo", s, jerr);
    if (s == NATS_OK) {
        out_int("delivered_consumer", (int64_t)ci->Delivered.Consumer);
        out_int("delivered_stream", (int64_t)ci->Delivered.Stream);
        out_int("ack_floor_consumer", (int64_t)ci->AckFloor.Consumer);
        out_int("ack_floor_stream", (int64_t)ci->AckFloor.Stream);
        out_int("num_ack_pending", ci->NumAckPending);
        out_int("num_redelivered", ci->NumRedelivered);
        out_int("num_pending", (int64_t)ci->NumPending);
        jsConsumerInfo_Destroy(ci);
    }
    out_end();
}

/* A pull subscription bound to the durable, one fetch (what is there within a short wait), each message
 * acknowledged synchronously (the server confirms it), then the subscription goes (the durable stays). */
static void do_fetch(char **t) {
    natsSubscription *sub = NULL;
    natsMsgList list = {0};
    jsSubOptions so;
    jsErrCode jerr = 0;
    jsSubOptions_Init(&so);
    so.Stream = t[1];
    so.Consumer = t[2];
    natsStatus s = js_PullSubscribe(&sub, js, NULL, t[2], NULL, &so, &jerr);
    if (s == NATS_OK)
        s = natsSubscription_Fetch(&list, sub, atoi(t[3]), 500, &jerr);
    out_result("fetch", s, jerr);
    if (s == NATS_OK) {
        out_int("count", list.Count);
        for (int i = 0; i < list.Count; i++) {
            jsMsgMetaData *meta = NULL;
            char key[32];
            snprintf(key, sizeof(key), "subject%d", i);
            out_str(key, natsMsg_GetSubject(list.Msgs[i]));
            if (natsMsg_GetMetaData(&meta, list.Msgs[i]) == NATS_OK) {
                snprintf(key, sizeof(key), "seq%d", i);
                out_int(key, (int64_t)meta->Sequence.Stream);
                snprintf(key, sizeof(key), "pending%d", i);
                out_int(key, (int64_t)meta->NumPending);
                jsMsgMetaData_Destroy(meta);
            }
            snprintf(key, sizeof(key), "ack%d", i);
            out_str(key, natsStatus_GetText(natsMsg_AckSync(list.Msgs[i], NULL, &jerr)));
        }
        natsMsgList_Destroy(&list);
    }
    out_end();
    natsSubscription_Destroy(sub);
}

static void do_account(void) {
    jsAccountInfo *ai = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetAccountInfo(&ai, js, NULL, &jerr);
    out_result("account", s, jerr);
    if (s == NATS_OK) {
        out_int("streams", ai->Streams);
        out_int("consumers", ai->Consumers);
        jsAccountInfo_Destroy(ai);
    }
    out_end();
}

static void do_kv(char **t, int n) {
    kvConfig kc;
    kvStore *kv = NULL;
    const char *v;
    kvConfig_Init(&kc);
    kc.Bucket = t[1];
    kc.History = (uint8_t)atoi(t[2]);
    kc.MaxBytes = opt_int(t, n, "max_bytes", -1);
    if ((v = opt(t, n, "storage")) && strcmp(v, "memory") == 0)
        kc.StorageType = js_MemoryStorage;
    natsStatus s = js_CreateKeyValue(&kv, js, &kc);
    out_result("kv", s, 0);
    out_end();
    for (int i = 0; s == NATS_OK && i < MAX_BUCKETS; i++) {
        if (buckets[i].kv == NULL) {
            snprintf(buckets[i].name, sizeof(buckets[i].name), "%s", t[1]);
            buckets[i].kv = kv;
            return;
        }
    }
    kvStore_Destroy(kv);
}

static void out_entry(kvEntry *e) {
    out_str("key", kvEntry_Key(e));
    out_hex("value", kvEntry_Value(e), kvEntry_ValueLen(e));
    out_int("revision", (int64_t)kvEntry_Revision(e));
    out_int("delta", (int64_t)kvEntry_Delta(e));
    out_int("op", kvEntry_Operation(e));
}

static void do_kvop(char **t, int n) {
    kvStore *kv = bucket(t[1]);
    uint64_t rev = 0;
    natsStatus s;
    if (kv == NULL) {
        out_begin(t[0]);
        out_str("status", "no bucket");
        out_end();
        return;
    }
    const char *cmd = t[0], *key = n > 2 ? t[2] : "", *val = n > 3 ? t[3] : "";
    if (strcmp(cmd, "kvput") == 0 || strcmp(cmd, "kvcreate") == 0 || strcmp(cmd, "kvupdate") == 0) {
        if (strcmp(cmd, "kvput") == 0)
            s = kvStore_PutString(&rev, kv, key, val);
        else if (strcmp(cmd, "kvcreate") == 0)
            s = kvStore_CreateString(&rev, kv, key, val);
        else
            s = kvStore_UpdateString(&rev, kv, key, val, (uint64_t)strtoull(t[4], NULL, 10));
        out_result(cmd, s, 0);
        out_int("revision", (int64_t)rev);
    } else if (strcmp(cmd, "kvget") == 0 || strcmp(cmd, "kvgetrev") == 0) {
        kvEntry *e = NULL;
        s = strcmp(cmd, "kvget") == 0 ? kvStore_Get(&e, kv, key)
                                      : kvStore_GetRevision(&e, kv, key, (uint64_t)strtoull(t[3], NULL, 10));
        out_result(cmd, s, 0);
        if (s == NATS_OK) {
            out_entry(e);
            kvEntry_Destroy(e);
        }
    } else if (strcmp(cmd, "kvdel") == 0) {
        out_result(cmd, kvStore_Delete(kv, key), 0);
    } else if (strcmp(cmd, "kvpurge") == 0) {
        out_result(cmd, kvStore_Purge(kv, key, NULL), 0);
    } else if (strcmp(cmd, "kvstatus") == 0) {
        kvStatus *st = NULL;
        s = kvStore_Status(&st, kv);
        out_result(cmd, s, 0);
        if (s == NATS_OK) {
            out_int("values", (int64_t)kvStatus_Values(st));
            out_int("history", kvStatus_History(st));
            kvStatus_Destroy(st);
        }
    } else if (strcmp(cmd, "kvkeys") == 0) {
        kvKeysList keys = {0};
        s = kvStore_Keys(&keys, kv, NULL);
        out_result(cmd, s, 0);
        if (s == NATS_OK) {
            out_int("count", keys.Count);
            kvKeysList_Destroy(&keys);
        }
    } else if (strcmp(cmd, "kvhist") == 0) {
        kvEntryList list = {0};
        s = kvStore_History(&list, kv, key, NULL);
        out_result(cmd, s, 0);
        if (s == NATS_OK) {
            out_int("count", list.Count);
            for (int i = 0; i < list.Count; i++) {
                char k[32];
                snprintf(k, sizeof(k), "op%d", i);
                out_int(k, kvEntry_Operation(list.Entries[i]));
                snprintf(k, sizeof(k), "rev%d", i);
                out_int(k, (int64_t)kvEntry_Revision(list.Entries[i]));
            }
            kvEntryList_Destroy(&list);
        }
    } else {
        out_begin(cmd);
        out_str("status", "unknown command");
    }
    out_end();
}

static void do_simple(char **t) {
    jsErrCode jerr = 0;
    natsStatus s;
    if (strcmp(t[0], "del") == 0)
        s = js_DeleteMsg(js, t[1], (uint64_t)strtoull(t[2], NULL, 10), NULL, &jerr);
    else if (strcmp(t[0], "purge") == 0)
        s = js_PurgeStream(js, t[1], NULL, &jerr);
    else
        s = js_DeleteStream(js, t[1], NULL, &jerr);
    out_result(t[0], s, jerr);
    out_end();
}

natsStatus run_js(const char *url, char **args, int nargs) {
    (void)args;
    (void)nargs;
    natsConnection *nc = NULL;
    natsStatus s = connect_plain(&nc, url);
    TRY(natsConnection_JetStream(&js, nc, NULL));
    char line[1024];
    while (s == NATS_OK && fgets(line, sizeof(line), stdin) != NULL) {
        char *t[MAX_TOKENS];
        int n = 0;
        for (char *tok = strtok(line, " \r\n"); tok != NULL && n < MAX_TOKENS; tok = strtok(NULL, " \r\n"))
            t[n++] = tok;
        if (n == 0)
            continue;
        if (strcmp(t[0], "stream") == 0 || strcmp(t[0], "update") == 0)
            do_stream(t, n, t[0][0] == 'u');
        else if (strcmp(t[0], "pub") == 0)
            do_pub(t, n);
        else if (strcmp(t[0], "get") == 0 || strcmp(t[0], "last") == 0)
            do_get(t, t[0][0] == 'l');
        else if (strcmp(t[0], "info") == 0)
            do_info(t);
        else if (strcmp(t[0], "consumer") == 0)
            do_consumer(t, n);
        else if (strcmp(t[0], "cinfo") == 0)
            do_cinfo(t);
        else if (strcmp(t[0], "fetch") == 0)
            do_fetch(t);
        else if (strcmp(t[0], "account") == 0)
            do_account();
        else if (strcmp(t[0], "kv") == 0)
            do_kv(t, n);
        else if (strncmp(t[0], "kv", 2) == 0)
            do_kvop(t, n);
        else
            do_simple(t);
    }
    for (int i = 0; i < MAX_BUCKETS; i++)
        kvStore_Destroy(buckets[i].kv);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return s;
}
