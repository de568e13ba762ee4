/*
 * Fetch an HTTP resource through an onionmix client running in this
 * process, using the C ABI (include/onionmix.h).
 *
 *   fetch <client.toml> <data_dir|-> <host> <port> <path> <body-out-file>
 *
 * Starts the client from the configuration file (with <data_dir> as its
 * state directory, or the configuration's own for "-"), waits for the
 * bootstrap, opens a stream to <host>:<port>, sends "GET <path>", reads the
 * response, writes its body to <body-out-file>, prints the status line, the
 * body length and the server's X-Onionmix-Sha256 header (the onionmix test
 * sink's digest of the body), closes the stream and stops the client.
 * Exits 0 on a complete 200 response. With ONIONMIX_LOG set (e.g. "info"),
 * the library logs to stderr.
 *
 * Build: see the Makefile beside this file (static or shared library).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "onionmix.h"

/* Time allowed for the bootstrap, in seconds. */
#define BOOTSTRAP_SECONDS 300
/* Time allowed for opening the stream and for each read or write. */
#define IO_TIMEOUT_MS 120000u
/* Largest response accepted. */
#define MAX_RESPONSE (64u * 1024u * 1024u)

static void fail(const char *what, int code) {
    const char *msg = onionmix_last_error_message();
    fprintf(stderr, "fetch: %s: %s (%d): %s\n", what, onionmix_error_name(code), code,
            msg ? msg : "no message");
}

/* The value of header `name` in the response head `head` (NUL-terminated),
 * copied into `out`; 0 if found. */
static int header_value(const char *head, const char *name, char *out, size_t out_len) {
    size_t nlen = strlen(name);
    const char *line = strstr(head, "\r\n");
    while (line && line[2] != '\0') {
        line += 2;
        const char *end = strstr(line, "\r\n");
        if (!end) break;
        if ((size_t)(end - line) > nlen && strncasecmp(line, name, nlen) == 0 &&
            line[nlen] == ':') {
            const char *v = line + nlen + 1;
            while (v < end && (*v == ' ' || *v == '\t')) v++;
            size_t vlen = (size_t)(end - v);
            if (vlen >= out_len) vlen = out_len - 1;
            memcpy(out, v, vlen);
            out[vlen] = '\0';
            return 0;
        }
        line = end;
    }
    return -1;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr,
                "usage: %s <client.toml> <data_dir|-> <host> <port> <path> <body-out-file>\n",
                argv[0]);
        return 2;
    }
    const char *config = argv[1];
    const char *data_dir = strcmp(argv[2], "-") == 0 ? NULL : argv[2];
    const char *host = argv[3];
    char *end = NULL;
    long port = strtol(argv[4], &end, 10);
    if (*argv[4] == '\0' || *end != '\0' || port < 1 || port > 65535) {
        fprintf(stderr, "fetch: bad port %s\n", argv[4]);
        return 2;
    }
    const char *path = argv[5];
    const char *out_path = argv[6];

    fprintf(stderr, "onionmix %s\n", onionmix_version());
    /* ONIONMIX_LOG=info (or debug, ...) shows the library's log on stderr. */
    const char *log = getenv("ONIONMIX_LOG");
    if (log) {
        onionmix_error lrc = onionmix_log_init(log, NULL, NULL);
        if (lrc != ONIONMIX_ERROR_OK) fail("log", lrc);
    }
    onionmix_client *client = NULL;
    onionmix_error rc = onionmix_client_start(config, data_dir, &client);
    if (rc != ONIONMIX_ERROR_OK) {
        fail("start", rc);
        return 1;
    }

    int status = 1;
    onionmix_stream *stream = NULL;
    char *resp = NULL;

    /* Wait for the bootstrap a second at a time, reporting progress. */
    int last = -1;
    for (int waited = 0;; waited++) {
        rc = onionmix_client_wait_bootstrapped(client, 1000);
        int pct = onionmix_client_bootstrap_percent(client);
        if (pct != last) {
            fprintf(stderr, "bootstrapped %d%%\n", pct);
            last = pct;
        }
        if (rc == ONIONMIX_ERROR_OK) break;
        if (rc != ONIONMIX_ERROR_BOOTSTRAP_TIMEOUT || waited >= BOOTSTRAP_SECONDS) {
            fail("bootstrap", rc);
            goto out;
        }
    }

    rc = onionmix_client_connect(client, host, (uint16_t)port, 0, IO_TIMEOUT_MS, &stream);
    if (rc != ONIONMIX_ERROR_OK) {
        fail("connect", rc);
        goto out;
    }
    onionmix_stream_set_timeout(stream, IO_TIMEOUT_MS);

    char req[2048];
    int req_len = snprintf(req, sizeof req,
                           "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host);
    if (req_len < 0 || (size_t)req_len >= sizeof req) {
        fprintf(stderr, "fetch: request too long\n");
        goto out;
    }
    ptrdiff_t n = onionmix_stream_write(stream, (const uint8_t *)req, (size_t)req_len);
    if (n != req_len) {
        fail("write", (int)n);
        goto out;
    }

    /* Read the head, then the body up to its Content-Length (or to the end
     * of the stream when there is none). */
    size_t cap = 64 * 1024, have = 0;
    resp = malloc(cap + 1);
    if (!resp) goto out;
    size_t head_len = 0, want = SIZE_MAX;
    for (;;) {
        if (have == cap) {
            if (cap >= MAX_RESPONSE) {
                fprintf(stderr, "fetch: response over %u bytes\n", MAX_RESPONSE);
                goto out;
            }
            char *bigger = realloc(resp, cap * 2 + 1);
            if (!bigger) goto out;
            resp = bigger;
            cap *= 2;
        }
        n = onionmix_stream_read(stream, (uint8_t *)resp + have, cap - have);
        if (n < 0) {
            fail("read", (int)n);
            goto out;
        }
        if (n == 0) break;
        have += (size_t)n;
        if (head_len == 0) {
            resp[have] = '\0';
            char *sep = strstr(resp, "\r\n\r\n");
            if (sep) {
                head_len = (size_t)(sep - resp) + 4;
                char len_text[32];
                char saved = resp[head_len];
                resp[head_len] = '\0';
                if (header_value(resp, "Content-Length", len_text, sizeof len_text) == 0)
                    want = head_len + (size_t)strtoull(len_text, NULL, 10);
                resp[head_len] = saved;
            }
        }
        if (head_len && have >= want) break;
    }
    if (head_len == 0) {
        fprintf(stderr, "fetch: no HTTP response head\n");
        goto out;
    }
    if (want != SIZE_MAX && have < want) {
        fprintf(stderr, "fetch: stream ended after %zu of %zu bytes\n", have, want);
        goto out;
    }
    if (want != SIZE_MAX) have = want;

    char saved = resp[head_len];
    resp[head_len] = '\0';
    char digest[128] = "";
    header_value(resp, "X-Onionmix-Sha256", digest, sizeof digest);
    char *eol = strstr(resp, "\r\n");
    if (eol) *eol = '\0';
    printf("%s\n", resp);
    int ok = strncmp(resp, "HTTP/1.1 200", 12) == 0 || strncmp(resp, "HTTP/1.0 200", 12) == 0;
    resp[head_len] = saved;

    size_t body_len = have - head_len;
    printf("body bytes: %zu\n", body_len);
    printf("x-onionmix-sha256: %s\n", digest[0] ? digest : "(none)");
    FILE *f = fopen(out_path, "wb");
    if (!f) {
        fprintf(stderr, "fetch: cannot create %s: %s\n", out_path, strerror(errno));
        goto out;
    }
    size_t written = fwrite(resp + head_len, 1, body_len, f);
    if (fclose(f) != 0 || written != body_len) {
        fprintf(stderr, "fetch: cannot write %s\n", out_path);
        goto out;
    }
    status = ok ? 0 : 1;

out:
    free(resp);
    onionmix_stream_close(&stream);
    rc = onionmix_client_stop(&client);
    if (rc != ONIONMIX_ERROR_OK) {
        fail("stop", rc);
        status = 1;
    }
    fprintf(stderr, "client stopped\n");
    return status;
}
