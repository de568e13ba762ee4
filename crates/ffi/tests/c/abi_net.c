/*
 * The C ABI on a live network, from C (run by crates/cli/tests/ffi_c_example.rs):
 * isolation tokens, a read blocked in one thread while another writes,
 * new identity, a read timeout, and streams outliving their client (reads
 * end, writes fail with ONIONMIX_ERROR_CLOSED, close is still needed and
 * harmless twice).
 *
 *   abi_net <client.toml> <data_dir> <sink-ip> <sink-port>
 *
 * Prints "abi_net: all checks passed" and exits 0, or names the failed check.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onionmix.h"

#define IO_TIMEOUT_MS 120000u

static int failures = 0;

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            const char *m = onionmix_last_error_message();                            \
            fprintf(stderr, "abi_net: FAILED %s (line %d): ", #cond, __LINE__);       \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, " [last error: %s]\n", m ? m : "none");                   \
            failures++;                                                               \
        }                                                                             \
    } while (0)

/* Read one response with a Content-Length body from `s`; returns the body
 * length, or -1. */
static long read_response(onionmix_stream *s) {
    static char buf[1 << 18];
    size_t have = 0, head = 0;
    long want = -1;
    for (;;) {
        if (have == sizeof buf - 1) return -1;
        ptrdiff_t n = onionmix_stream_read(s, (uint8_t *)buf + have, sizeof buf - 1 - have);
        if (n <= 0) return -1;
        have += (size_t)n;
        buf[have] = '\0';
        if (!head) {
            char *sep = strstr(buf, "\r\n\r\n");
            if (!sep) continue;
            head = (size_t)(sep - buf) + 4;
            if (strncmp(buf, "HTTP/1.1 200", 12) != 0) return -1;
            char *cl = strstr(buf, "Content-Length: ");
            if (!cl || cl > sep) return -1;
            want = strtol(cl + 16, NULL, 10);
        }
        if (head && have >= head + (size_t)want) return (long)(have - head);
    }
}

/* GET /bytes/<n> on `s` (keep-alive); returns 0 when <n> body bytes came. */
static int get(onionmix_stream *s, const char *host, long n) {
    char req[256];
    int len = snprintf(req, sizeof req, "GET /bytes/%ld HTTP/1.1\r\nHost: %s\r\n\r\n", n, host);
    if (onionmix_stream_write(s, (const uint8_t *)req, (size_t)len) != len) return -1;
    return read_response(s) == n ? 0 : -1;
}

struct reader {
    onionmix_stream *s;
    long got;
};

static void *read_thread(void *arg) {
    struct reader *r = arg;
    r->got = read_response(r->s);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s <client.toml> <data_dir> <sink-ip> <sink-port>\n", argv[0]);
        return 2;
    }
    const char *host = argv[3];
    uint16_t port = (uint16_t)atoi(argv[4]);
    onionmix_client *client = NULL;
    onionmix_stream *a = NULL, *b = NULL, *c = NULL, *idle = NULL;

    if (onionmix_client_start(argv[1], argv[2], &client) != ONIONMIX_ERROR_OK) {
        fprintf(stderr, "abi_net: start: %s\n", onionmix_last_error_message());
        return 1;
    }
    onionmix_error rc = onionmix_client_wait_bootstrapped(client, 300000);
    CHECK(rc == ONIONMIX_ERROR_OK, "bootstrap: %s", onionmix_error_name(rc));
    CHECK(onionmix_client_bootstrap_percent(client) == 100, "percent");
    if (failures) goto stop;

    /* Three streams: no isolation, and two tokens. */
    rc = onionmix_client_connect(client, host, port, 0, IO_TIMEOUT_MS, &a);
    CHECK(rc == ONIONMIX_ERROR_OK && a, "connect token 0: %s", onionmix_error_name(rc));
    rc = onionmix_client_connect(client, host, port, 1, IO_TIMEOUT_MS, &b);
    CHECK(rc == ONIONMIX_ERROR_OK && b, "connect token 1: %s", onionmix_error_name(rc));
    rc = onionmix_client_connect(client, host, port, 0xfeedface12345678ull, IO_TIMEOUT_MS, &c);
    CHECK(rc == ONIONMIX_ERROR_OK && c, "connect token 2: %s", onionmix_error_name(rc));
    if (failures) goto stop;
    onionmix_stream_set_timeout(a, IO_TIMEOUT_MS);
    onionmix_stream_set_timeout(b, IO_TIMEOUT_MS);
    onionmix_stream_set_timeout(c, IO_TIMEOUT_MS);
    CHECK(get(a, host, 1000) == 0, "GET on token 0");
    CHECK(get(b, host, 1000) == 0, "GET on token 1");
    CHECK(get(c, host, 2000) == 0, "GET on token 2");

    /* A read blocked in another thread does not hold up a write. */
    struct reader r = {b, -2};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, read_thread, &r) == 0, "thread");
    char req[256];
    int len = snprintf(req, sizeof req, "GET /bytes/65536 HTTP/1.1\r\nHost: %s\r\n\r\n", host);
    CHECK(onionmix_stream_write(b, (const uint8_t *)req, (size_t)len) == len, "write");
    pthread_join(t, NULL);
    CHECK(r.got == 65536, "the reading thread got %ld bytes", r.got);

    /* New identity; a new stream works. */
    rc = onionmix_client_new_identity(client);
    CHECK(rc == ONIONMIX_ERROR_OK, "new identity: %s", onionmix_error_name(rc));
    rc = onionmix_client_connect(client, host, port, 0, IO_TIMEOUT_MS, &idle);
    CHECK(rc == ONIONMIX_ERROR_OK && idle, "connect after new identity");
    if (idle) {
        onionmix_stream_set_timeout(idle, IO_TIMEOUT_MS);
        CHECK(get(idle, host, 1000) == 0, "GET after new identity");
        /* Nothing more to read: the read timeout expires. */
        onionmix_stream_set_timeout(idle, 300);
        uint8_t byte;
        ptrdiff_t n = onionmix_stream_read(idle, &byte, 1);
        CHECK(n == ONIONMIX_ERROR_TIMEOUT, "idle read returned %td", n);
    }
    onionmix_stream_close(&c);
    CHECK(c == NULL, "close clears the pointer");

stop:
    rc = onionmix_client_stop(&client);
    CHECK(rc == ONIONMIX_ERROR_OK && client == NULL, "stop: %s", onionmix_error_name(rc));
    CHECK(onionmix_client_stop(&client) == ONIONMIX_ERROR_OK, "stop twice");
    /* Streams outlive their client: reads end, writes fail, close works. */
    if (idle) {
        onionmix_stream_set_timeout(idle, 30000);
        uint8_t byte;
        ptrdiff_t n = onionmix_stream_read(idle, &byte, 1);
        CHECK(n == 0, "read after stop returned %td", n);
        n = onionmix_stream_write(idle, (const uint8_t *)"x", 1);
        CHECK(n == ONIONMIX_ERROR_CLOSED, "write after stop returned %td", n);
    }
    CHECK(onionmix_stream_close(&idle) == ONIONMIX_ERROR_OK && idle == NULL, "close");
    CHECK(onionmix_stream_close(&idle) == ONIONMIX_ERROR_OK, "close twice");
    onionmix_stream_close(&a);
    onionmix_stream_close(&b);
    onionmix_stream_close(&c);
    if (failures) {
        fprintf(stderr, "abi_net: %d checks failed\n", failures);
        return 1;
    }
    printf("abi_net: all checks passed\n");
    return 0;
}
