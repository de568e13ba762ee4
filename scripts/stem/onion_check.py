#!/usr/bin/env python3
"""Ephemeral onion services through a Tor control port with stem; report
what happened as JSON (last line of stdout).

The same script runs against stock tor and the onionmix client; the Rust
test (crates/cli/tests/control_onion.rs) compares the two reports.

Checks: ADD_ONION argument errors (code and text), create_ephemeral_hidden_service
with await_publication=True in front of the sink's HTTP server, the
HS_DESC events of the upload (CREATED, UPLOAD, UPLOADED formats),
list_ephemeral_hidden_services (onions/current, onions/detached), a 1 MiB
download through each fetching client's SOCKS port with SHA-256 verified
(and, with --fetch-control, the HS_DESC REQUESTED/RECEIVED events of that
client and its STREAM events: NEW, SENTCONNECT and SUCCEEDED on one
rendezvous circuit, CLOSED, and that circuit's PURPOSE, HS_STATE and
REND_QUERY in circuit-status; the service's introduction and rendezvous
circuits in its own circuit-status), ADD_ONION with the returned key (same ServiceID), DiscardPK and
Detach, remove_ephemeral_hidden_service (gone from the lists, a second
removal answers 552), and that new connections fail once it is removed.
"""

import argparse
import base64
import os
import hashlib
import json
import queue
import re
import sys
import time

import stem
from stem.control import Controller, EventType

import common

ADDR = r"[a-z2-7]{56}"
LONGNAME = r"\$[0-9A-F]{40}(~[A-Za-z0-9]{1,19})?"
DESCID = r"[A-Za-z0-9+/]{43}"
INDEX = r"[0-9A-F]{64}"
FORMATS = {
    "CREATED": r"^HS_DESC CREATED %s UNKNOWN UNKNOWN %s$" % (ADDR, DESCID),
    "UPLOAD": r"^HS_DESC UPLOAD %s UNKNOWN %s %s HSDIR_INDEX=%s$" % (ADDR, LONGNAME, DESCID, INDEX),
    "UPLOADED": r"^HS_DESC UPLOADED %s UNKNOWN %s$" % (ADDR, LONGNAME),
    "REQUESTED": r"^HS_DESC REQUESTED %s NO_AUTH %s %s HSDIR_INDEX=%s$" % (ADDR, LONGNAME, DESCID, INDEX),
    "RECEIVED": r"^HS_DESC RECEIVED %s NO_AUTH %s %s$" % (ADDR, LONGNAME, DESCID),
}

# An onion address nobody runs (tor's unit-test key).
UNKNOWN_ID = "25njqamcweflpvkl73j4szahhihoc4xt3ktcgjnpaingr5yhkenl5sid"

ERRORS = {
    "missing_port": "ADD_ONION NEW:BEST",
    "rsa_key": "ADD_ONION NEW:RSA1024 Port=80",
    "bad_key_type": "ADD_ONION X25519:abcd Port=80",
    "no_blob": "ADD_ONION NEW Port=80",
    "bad_base64": "ADD_ONION ED25519-V3:*** Port=80",
    "short_key": "ADD_ONION ED25519-V3:%s Port=80" % ("A" * 43),
    "port_zero": "ADD_ONION NEW:BEST Port=0",
    "port_big": "ADD_ONION NEW:BEST Port=65536",
    "bad_target": "ADD_ONION NEW:BEST Port=80,notaport",
    "bad_flag": "ADD_ONION NEW:BEST Flags=DiscardPK,Bogus Port=80",
    "empty_flags": "ADD_ONION NEW:BEST Flags= Port=80",
    "non_anonymous": "ADD_ONION NEW:BEST Flags=NonAnonymous Port=80",
    "bad_maxstreams": "ADD_ONION NEW:BEST MaxStreams=70000 Port=80",
    "unknown_keyword": "ADD_ONION NEW:BEST Port=80 Bogus=1",
    "auth_without_flag": "ADD_ONION NEW:BEST Port=80 ClientAuthV3=%s" % ("A" * 52),
    "flag_without_auth": "ADD_ONION NEW:BEST Flags=V3Auth Port=80",
    "bad_client_key": "ADD_ONION NEW:BEST Flags=V3Auth Port=80 ClientAuthV3=abc",
    "del_unknown": "DEL_ONION %s" % UNKNOWN_ID,
    "del_malformed": "DEL_ONION notanonion",
    "del_no_arg": "DEL_ONION",
}


def x25519_base(secret):
    """X25519(secret, 9) (RFC 7748), for a client-authorization key pair."""
    p = 2 ** 255 - 19
    k = bytearray(secret)
    k[0] &= 248
    k[31] &= 127
    k[31] |= 64
    n = int.from_bytes(bytes(k), "little")
    x1, x2, z2, x3, z3, swap = 9, 1, 0, 9, 1, 0
    for t in reversed(range(255)):
        bit = (n >> t) & 1
        swap ^= bit
        if swap:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b = x2 + z2, x2 - z2
        aa, bb = a * a % p, b * b % p
        e = (aa - bb) % p
        c, d = x3 + z3, x3 - z3
        da, cb = d * a % p, c * b % p
        x3, z3 = (da + cb) ** 2 % p, x1 * (da - cb) ** 2 % p
        x2, z2 = aa * bb % p, e * (aa + 121665 * e) % p
    if swap:
        x2, z2 = x3, z3
    return (x2 * pow(z2, p - 2, p) % p).to_bytes(32, "little")


def socks_get(socks, host, port, path, user=None, timeout=120.0):
    """HTTP GET through SOCKS5 by name; (reply code, headers, body)."""
    return common.socks_get(socks, host, port, path, user=user, timeout=timeout)


def verified_download(socks, host, n, deadline):
    """Retry until a verified download of n bytes or the deadline."""
    last = None
    attempt = 0
    while time.time() < deadline:
        attempt += 1
        try:
            code, headers, body = socks_get(socks, host, 80, "/bytes/%d" % n, user="try%d" % attempt)
            if code == 0:
                want = headers.get("x-onionmix-sha256", "")
                if len(body) == n and hashlib.sha256(body).hexdigest() == want.lower():
                    return True, attempt, None
                last = "bad body (%d bytes)" % len(body)
            else:
                last = "SOCKS reply %#x" % code
        except Exception as e:  # noqa: BLE001 - report whatever went wrong
            last = repr(e)
        time.sleep(3)
    return False, attempt, last


def hostport(s):
    h, p = s.rsplit(":", 1)
    return h, int(p)


def raw(c, line):
    """A command's reply as `CODE TEXT` lines (stem's raw content)."""
    r = c.msg(line)
    return "\n".join("%s %s" % (code, text) for code, _, text in r.content())


def drain(q):
    out = []
    while True:
        try:
            out.append(q.get_nowait())
        except queue.Empty:
            return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--control", required=True, help="host:port of the service's control port")
    ap.add_argument("--password", required=True)
    ap.add_argument("--sink", required=True, help="host:port of the sink's HTTP server")
    ap.add_argument("--fetch-socks", action="append", default=[], help="host:port (repeatable)")
    ap.add_argument("--fetch-control", help="host:port of a fetching client's control port")
    ap.add_argument("--fetch-control-socks", help="that client's SOCKS host:port")
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--publish-timeout", type=float, default=300)
    a = ap.parse_args()
    r = {}
    chost, cport = hostport(a.control)

    with Controller.from_port(address=chost, port=cport) as c:
        c.authenticate(password=a.password)
        r["errors"] = {k: raw(c, v) for k, v in ERRORS.items()}

        ev = queue.Queue()
        c.add_event_listener(lambda e: ev.put(str(e)), EventType.HS_DESC)
        t0 = time.time()
        try:
            resp = c.create_ephemeral_hidden_service(
                {80: a.sink}, await_publication=True, timeout=a.publish_timeout
            )
            r["published"] = True
        except Exception as e:  # noqa: BLE001
            r["published"] = False
            r["publish_error"] = repr(e)
            print(json.dumps(r, sort_keys=True))
            return
        r["publish_secs"] = round(time.time() - t0, 1)
        sid = resp.service_id
        r["service_id"] = sid
        r["private_key_type"] = resp.private_key_type
        r["private_key"] = resp.private_key
        time.sleep(1)
        lines = drain(ev)
        mine = [l for l in lines if sid in l]
        for action in ("CREATED", "UPLOAD", "UPLOADED"):
            got = [l for l in mine if l.split(" ")[1] == action]
            r["event_%s_seen" % action.lower()] = bool(got)
            r["event_%s_format" % action.lower()] = bool(got) and all(
                re.match(FORMATS[action], l) for l in got
            )
            if got:
                r["event_%s_example" % action.lower()] = got[0]
        r["listed_current"] = sid in c.list_ephemeral_hidden_services()
        r["listed_detached"] = sid in c.list_ephemeral_hidden_services(our_services=False, detached=True)

        fq = queue.Queue()
        fc = None
        if a.fetch_control:
            fh, fp = hostport(a.fetch_control)
            fc = Controller.from_port(address=fh, port=fp)
            fc.authenticate(password=a.password)
            fc.add_event_listener(lambda e: fq.put(str(e)), EventType.HS_DESC)
            sq = queue.Queue()
            fc.add_event_listener(lambda e: sq.put(str(e)), EventType.STREAM)
        downloads = []
        for s in a.fetch_socks:
            ok, attempts, err = verified_download(
                hostport(s), sid + ".onion", a.size, time.time() + 300
            )
            downloads.append({"socks": s, "ok": ok, "attempts": attempts, "error": err})
        r["downloads"] = downloads
        r["all_downloads_ok"] = bool(downloads) and all(d["ok"] for d in downloads)
        # The service's own circuits in circuit-status: its introduction
        # circuits established, the rendezvous circuits of those downloads
        # joined, both with the service's address (control-spec §4.1.1).
        own = [l for l in c.get_info("circuit-status", "").splitlines() if "REND_QUERY=%s " % sid in l]
        for name, want in (
            ("service_intro_circuit_status", " PURPOSE=HS_SERVICE_INTRO HS_STATE=HSSI_ESTABLISHED REND_QUERY=%s "),
            ("service_rend_circuit_status", " PURPOSE=HS_SERVICE_REND HS_STATE=HSSR_JOINED REND_QUERY=%s "),
        ):
            r[name] = any(want % sid in l for l in own)
        mine += [l for l in drain(ev) if sid in l]
        if fc is not None:
            time.sleep(1)
            got = [l for l in drain(fq) if sid in l]
            # The fetching client's index of an HSDir must be the one the
            # service used to upload the current descriptor there (the
            # fetch ring is the first store ring): across implementations
            # when host and fetcher differ.
            uploads = {}
            for l in mine:
                f = l.split(" ")
                if f[1] == "UPLOAD" and len(f) == 7:
                    uploads[(f[4].split("~")[0], f[5])] = f[6]
            pairs = []
            for l in got:
                f = l.split(" ")
                if f[1] == "REQUESTED" and len(f) == 7:
                    key = (f[4].split("~")[0], f[5])
                    if key in uploads:
                        pairs.append(uploads[key] == f[6])
            r["hsdir_index_pairs"] = len(pairs)
            r["hsdir_index_agrees"] = bool(pairs) and all(pairs)
            for action in ("REQUESTED", "RECEIVED"):
                g = [l for l in got if l.split(" ")[1] == action]
                r["fetch_event_%s_format" % action.lower()] = bool(g) and all(
                    re.match(FORMATS[action], l) for l in g
                )
                if g:
                    r["fetch_event_%s_example" % action.lower()] = g[0]
            # The fetching client's STREAM events for its onion streams:
            # NEW, SENTCONNECT and SUCCEEDED on the rendezvous circuit,
            # CLOSED (control-spec §4.1.2), as for a stream through an exit.
            streams = {}
            for l in drain(sq):
                f = l.split(" ")
                if len(f) >= 5 and f[4].startswith(sid + ".onion:"):
                    streams.setdefault(f[1], []).append((f[2], f[3]))
            def in_order(seq):
                want = ["NEW", "SENTCONNECT", "SUCCEEDED", "CLOSED"]
                got = [st for st, _ in seq if st in want]
                circs = {c for st, c in seq if st in ("SENTCONNECT", "SUCCEEDED")}
                return got == want and len(circs) == 1 and "0" not in circs
            r["fetch_stream_events"] = bool(streams) and any(in_order(v) for v in streams.values())
            # That rendezvous circuit in `circuit-status`: tor's purpose,
            # state and the service's address (control-spec §4.1.1).
            rend_circs = {c for v in streams.values() for st, c in v if st == "SENTCONNECT"}
            rows = [
                l for l in fc.get_info("circuit-status", "").splitlines()
                if l.split(" ")[0] in rend_circs
            ]
            # NEED_UPTIME shows when the circuit was taken from those built
            # ahead for onion services; stock tor builds a new rendezvous
            # circuit without it (hs_client.c asks IS_INTERNAL and
            # NEED_CAPACITY), so either is tor's shape.
            rend_shape = re.compile(
                r" BUILD_FLAGS=IS_INTERNAL,NEED_CAPACITY(,NEED_UPTIME)? PURPOSE=HS_CLIENT_REND"
                r" HS_STATE=HSCR_JOINED REND_QUERY=%s " % re.escape(sid)
            )
            r["fetch_rend_circuit_status"] = bool(rows) and all(rend_shape.search(l) for l in rows)
            if rows:
                r["fetch_rend_circuit_status_example"] = re.sub(r"^\S+ \S+ \S+ ", "<id> <status> <path> ", rows[0].replace(sid, "<id>"))
            if streams:
                r["fetch_stream_events_example"] = " ".join(
                    st for st, _ in next(iter(streams.values()))
                )
            fc.close()

        # Remove it: gone from the list, a second removal is 552.
        r["removed"] = c.remove_ephemeral_hidden_service(sid)
        r["removed_again"] = c.remove_ephemeral_hidden_service(sid)
        r["unlisted_after_removal"] = sid not in c.list_ephemeral_hidden_services()

        # New connections fail once the introduction circuits are gone
        # (clients may still hold the descriptor).
        if a.fetch_socks:
            deadline = time.time() + 240
            gone = False
            n = 0
            while time.time() < deadline and not gone:
                n += 1
                try:
                    code, _, _ = socks_get(
                        hostport(a.fetch_socks[0]), sid + ".onion", 80, "/bytes/10",
                        user="after%d" % n, timeout=150,
                    )
                    gone = code != 0
                except Exception:  # noqa: BLE001 - a cut connection counts as gone
                    gone = True
                if not gone:
                    time.sleep(5)
            r["unreachable_after_removal"] = gone

        # The returned key gives the same address.
        again = c.create_ephemeral_hidden_service(
            {80: a.sink}, key_type=resp.private_key_type, key_content=resp.private_key
        )
        r["same_id_from_key"] = again.service_id == sid
        r["no_key_when_given"] = again.private_key is None
        r["collision"] = raw(c, "ADD_ONION %s:%s Port=80" % (resp.private_key_type, resp.private_key))
        c.remove_ephemeral_hidden_service(sid)

        # Client authorization: the descriptor is published, the reply
        # echoes the key, and a client without the key cannot connect.
        secret = os.urandom(32)
        client_key = base64.b32encode(x25519_base(secret)).decode().rstrip("=")
        secret_b64 = base64.b64encode(secret).decode()
        try:
            v = c.create_ephemeral_hidden_service(
                {80: a.sink}, discard_key=True, client_auth_v3=client_key,
                await_publication=True, timeout=a.publish_timeout,
            )
            r["v3auth_published"] = True
            r["v3auth_reply"] = str(v).replace(v.service_id, "<id>").replace(client_key, "<key>")
            vid = v.service_id
            if a.fetch_control and a.fetch_control_socks:
                # The watched client gets the key before it ever fetches
                # (tor answers 252 instead of 250 when it holds an
                # undecryptable descriptor already).
                fh, fp = hostport(a.fetch_control)
                with Controller.from_port(address=fh, port=fp) as ac:
                    ac.authenticate(password=a.password)
                    hide = lambda t: t.replace(vid, "<id>").replace(secret_b64, "<key>")
                    r["auth_add"] = hide(raw(ac, "ONION_CLIENT_AUTH_ADD %s x25519:%s ClientName=bob" % (vid, secret_b64)))
                    r["auth_add_again"] = hide(raw(ac, "ONION_CLIENT_AUTH_ADD %s x25519:%s" % (vid, secret_b64)))
                    r["auth_add_permanent"] = hide(raw(ac, "ONION_CLIENT_AUTH_ADD %s x25519:%s Flags=Permanent" % (vid, secret_b64)))
                    r["auth_view"] = hide(raw(ac, "ONION_CLIENT_AUTH_VIEW %s" % vid))
                    r["auth_view_bad"] = raw(ac, "ONION_CLIENT_AUTH_VIEW abc")
                    r["auth_add_zero"] = raw(ac, "ONION_CLIENT_AUTH_ADD %s x25519:%s" % (UNKNOWN_ID, base64.b64encode(bytes(32)).decode()))
                    r["auth_add_bad_type"] = raw(ac, "ONION_CLIENT_AUTH_ADD %s x448:%s" % (UNKNOWN_ID, secret_b64))
                    ok, attempts, err = verified_download(
                        hostport(a.fetch_control_socks), vid + ".onion", 100000, time.time() + 240
                    )
                    r["v3auth_download_with_key"] = ok
                    if not ok:
                        r["v3auth_download_error"] = err
                    r["auth_remove"] = raw(ac, "ONION_CLIENT_AUTH_REMOVE %s" % vid)
                    r["auth_remove_again"] = hide(raw(ac, "ONION_CLIENT_AUTH_REMOVE %s" % vid))
                    r["auth_view_after_remove"] = hide(raw(ac, "ONION_CLIENT_AUTH_VIEW %s" % vid))
            others = [f for f in a.fetch_socks if f != a.fetch_control_socks]
            if others:
                code, _, body = socks_get(
                    hostport(others[0]), vid + ".onion", 80, "/bytes/10",
                    user="noauth", timeout=150,
                )
                r["v3auth_refused_without_key"] = code != 0 and not body
            c.remove_ephemeral_hidden_service(vid)
        except Exception as e:  # noqa: BLE001
            r["v3auth_published"] = False
            r["v3auth_error"] = repr(e)

        # DiscardPK and Detach; several ports.
        d = c.create_ephemeral_hidden_service(
            [81, "82,%s" % a.sink], discard_key=True, detached=True
        )
        r["discard_pk_has_no_key"] = d.private_key is None
        r["detached_listed"] = d.service_id in c.list_ephemeral_hidden_services(
            our_services=False, detached=True
        )
        r["detached_not_current"] = d.service_id not in c.list_ephemeral_hidden_services()
        mine_only = c.create_ephemeral_hidden_service([83], discard_key=True)
        owned = mine_only.service_id

    # A new connection: the detached service is still there (and removable
    # from here), the previous connection's own service is gone.
    with Controller.from_port(address=chost, port=cport) as c:
        c.authenticate(password=a.password)
        r["detached_survives"] = d.service_id in c.list_ephemeral_hidden_services(
            our_services=False, detached=True
        )
        r["owned_gone_with_connection"] = raw(c, "DEL_ONION %s" % owned)
        r["detached_removed"] = c.remove_ephemeral_hidden_service(d.service_id)
        r["onions_current_empty"] = raw(c, "GETINFO onions/current")
        r["onions_detached_empty"] = raw(c, "GETINFO onions/detached")
    print(json.dumps(r, sort_keys=True))


if __name__ == "__main__":
    sys.exit(main())
