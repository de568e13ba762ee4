#!/usr/bin/env python3
"""HSFETCH and HSPOST through a Tor control port with stem; report what
happened as JSON (last line of stdout).

The same script runs against stock tor and the onionmix client; the Rust
test (crates/cli/tests/control_onion.rs) compares the two reports.

Checks: HSFETCH / HSPOST argument errors (code and text, against relays
of the running network too); an ephemeral service is published
(await_publication=True), then stem's get_hidden_service_descriptor
(HSFETCH, waiting for HS_DESC_CONTENT) returns its descriptor, which
parses as a v3 descriptor, with one HS_DESC REQUESTED and one RECEIVED;
the same with SERVER= naming the HSDir that answered; an address nobody
runs gives HS_DESC FAILED REASON=NOT_FOUND (stem raises
DescriptorUnavailable) from every responsible HSDir, asked one after the
other; HSPOST of the fetched descriptor answers 250 and
every responsible HSDir answers with an HS_DESC event (no UPLOAD event,
as tor; those that hold that revision already refuse it with
UPLOAD_REJECTED); HSPOST with SERVER= naming an HSDir that does not hold
it gets one answer, UPLOADED, from that HSDir.
"""

import argparse
import json
import queue
import re
import sys
import time

import stem
import stem.descriptor.hidden_service
from stem.control import Controller, EventType

ADDR = r"[a-z2-7]{56}"
LONGNAME = r"\$[0-9A-F]{40}(~[A-Za-z0-9]{1,19})?"
DESCID = r"[A-Za-z0-9+/]{43}"
INDEX = r"[0-9A-F]{64}"
FORMATS = {
    "REQUESTED": r"^HS_DESC REQUESTED %s NO_AUTH %s %s HSDIR_INDEX=%s$" % (ADDR, LONGNAME, DESCID, INDEX),
    "RECEIVED": r"^HS_DESC RECEIVED %s NO_AUTH %s %s$" % (ADDR, LONGNAME, DESCID),
    "FAILED": r"^HS_DESC FAILED %s NO_AUTH %s %s REASON=[A-Z_]+$" % (ADDR, LONGNAME, DESCID),
    "UPLOADED": r"^HS_DESC UPLOADED %s UNKNOWN %s$" % (ADDR, LONGNAME),
}

# An onion address nobody runs (tor's unit-test key), and one with a bad
# checksum.
UNKNOWN_ID = "25njqamcweflpvkl73j4szahhihoc4xt3ktcgjnpaingr5yhkenl5sid"
BAD_SUM = UNKNOWN_ID[:52] + "aaid"
ZERO_FP = "$" + "0" * 40


def errors(relay_fp, relay_nick):
    """Commands whose error replies must be byte-identical to tor's."""
    u = UNKNOWN_ID
    return {
        "fetch_no_arg": "HSFETCH",
        "fetch_bad_address": "HSFETCH notanaddress",
        "fetch_onion_suffix": "HSFETCH %s.onion" % u,
        "fetch_bad_checksum": "HSFETCH %s" % BAD_SUM,
        "fetch_unknown_server": "HSFETCH %s SERVER=%s" % (u, ZERO_FP),
        "fetch_nickname_server": "HSFETCH %s SERVER=%s" % (u, relay_nick),
        "fetch_wrong_nickname": "HSFETCH %s SERVER=$%s~wrongnick" % (u, relay_fp),
        "fetch_named_server": "HSFETCH %s SERVER=$%s=%s" % (u, relay_fp, relay_nick),
        "fetch_unknown_keyword": "HSFETCH %s Bogus=1" % u,
        "fetch_bare_word": "HSFETCH %s b" % u,
        "fetch_bad_then_server": "HSFETCH bad SERVER=%s" % ZERO_FP,
        # stem sends a message with a newline as a `+` command with data.
        "post_single_line": "HSPOST HSADDRESS=%s" % u,
        "post_bad_address": "HSPOST HSADDRESS=bad\nfoo",
        "post_onion_suffix": "HSPOST HSADDRESS=%s.onion\nfoo" % u,
        "post_invalid_descriptor": "HSPOST HSADDRESS=%s\nfoo" % u,
        "post_unknown_server": "HSPOST HSADDRESS=%s SERVER=%s\nfoo" % (u, ZERO_FP),
        "post_server_then_bad": "HSPOST SERVER=%s HSADDRESS=bad\nfoo" % ZERO_FP,
        "post_unknown_keyword": "HSPOST HSADDRESS=%s Bogus=1\nfoo" % u,
        "post_bare_word": "HSPOST extra\nfoo",
    }


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


def action(line):
    f = line.split(" ")
    return f[1] if len(f) > 1 else ""


def fetch(c, address, servers=None, timeout=120):
    """stem's HSFETCH with await_result: (descriptor text, error)."""
    try:
        d = c.get_hidden_service_descriptor(address, servers=servers, await_result=True, timeout=timeout)
        return str(d), None
    except stem.DescriptorUnavailable as e:
        return None, str(e).replace(address, "<id>")
    except Exception as e:  # noqa: BLE001 - report whatever went wrong
        return None, repr(e)


def wait_answers(q, sid, want, limit):
    """HS_DESC events about `sid` until `want` upload answers (UPLOADED or
    FAILED) came, or `limit` seconds; every event line seen."""
    got = []
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            line = q.get(timeout=1)
        except queue.Empty:
            continue
        if sid in line:
            got.append(line)
        if len([l for l in got if action(l) in ("UPLOADED", "FAILED")]) >= want:
            break
    time.sleep(2)
    got += [l for l in drain(q) if sid in l]
    return got


def quiet(q, window, limit):
    """Events until none came for `window` seconds (at most `limit`)."""
    got = []
    deadline = time.time() + limit
    last = time.time()
    while time.time() < deadline and time.time() - last < window:
        try:
            got.append(q.get(timeout=1))
            last = time.time()
        except queue.Empty:
            pass
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--control", required=True, help="host:port of the client's control port")
    ap.add_argument("--password", required=True)
    ap.add_argument("--sink", required=True, help="host:port of the sink's HTTP server")
    ap.add_argument("--publish-timeout", type=float, default=300)
    ap.add_argument("--hsdirs", type=int, default=0, help="HSDirs to wait for in the consensus")
    a = ap.parse_args()
    r = {}
    chost, cport = hostport(a.control)

    with Controller.from_port(address=chost, port=cport) as c:
        c.authenticate(password=a.password)
        # A young network adds HSDirs for a while: wait until the
        # consensus lists them all, so the hash ring stays put.
        deadline = time.time() + 300
        while True:
            statuses = list(c.get_network_statuses())
            hsdirs = {s.fingerprint: s.nickname for s in statuses if "HSDir" in s.flags}
            if len(hsdirs) >= a.hsdirs or time.time() > deadline:
                break
            time.sleep(5)
        r["hsdirs_known"] = len(hsdirs) >= max(a.hsdirs, 1)
        fp0 = sorted(hsdirs)[0] if hsdirs else "0" * 40

        ev = queue.Queue()
        seen = []
        c.add_event_listener(lambda e: ev.put(str(e)), EventType.HS_DESC)
        c.add_event_listener(lambda e: seen.append(str(e)), EventType.HS_DESC)
        try:
            svc = c.create_ephemeral_hidden_service(
                {80: a.sink}, await_publication=True, timeout=a.publish_timeout
            )
            r["published"] = True
        except Exception as e:  # noqa: BLE001
            r["published"] = False
            r["publish_error"] = repr(e)
            print(json.dumps(r, sort_keys=True))
            return
        sid = svc.service_id
        time.sleep(2)
        drain(ev)

        # HSFETCH of the running service: its descriptor, v3, with one
        # REQUESTED and one RECEIVED.
        text, err = fetch(c, sid)
        r["fetch_ok"] = text is not None
        if err:
            r["fetch_error"] = err
        time.sleep(1)
        got = [l for l in drain(ev) if sid in l]
        for act in ("REQUESTED", "RECEIVED", "FAILED"):
            g = [l for l in got if action(l) == act]
            r["fetch_%s_count" % act.lower()] = len(g)
            if g:
                r["fetch_%s_format" % act.lower()] = all(re.match(FORMATS[act], l) for l in g)
                r["fetch_%s_example" % act.lower()] = g[0]
        answered = [l.split(" ")[4] for l in got if action(l) == "RECEIVED"]
        desc_ids = {l.split(" ")[5] for l in got if action(l) == "RECEIVED"}
        if text:
            try:
                v3 = stem.descriptor.hidden_service.HiddenServiceDescriptorV3(
                    text.encode(), validate=True
                )
                r["fetch_v3_parses"] = True
                r["fetch_desc_version"] = v3.version
                r["fetch_desc_lifetime"] = v3.lifetime
                r["fetch_desc_has_signature"] = bool(v3.signature)
            except Exception as e:  # noqa: BLE001
                r["fetch_v3_parses"] = False
                r["fetch_parse_error"] = repr(e)

        # The same from the HSDir that answered, named with SERVER=.
        if answered:
            server = answered[0]
            text2, err2 = fetch(c, sid, servers=[server])
            r["fetch_server_ok"] = text2 is not None
            if err2:
                r["fetch_server_error"] = err2
            time.sleep(1)
            got2 = [l for l in drain(ev) if sid in l]
            r["fetch_server_asked"] = sorted(
                {l.split(" ")[4] == server for l in got2 if action(l) in ("REQUESTED", "RECEIVED")}
            )

        # An address nobody runs: FAILED NOT_FOUND, stem raises; tor then
        # asks the other responsible HSDirs, one after the other.
        text3, err3 = fetch(c, UNKNOWN_ID)
        r["unknown_fetch_returned"] = text3 is not None
        r["unknown_fetch_error"] = err3
        got3 = [l for l in quiet(ev, 15, 180) if UNKNOWN_ID in l]
        failed = [l for l in got3 if action(l) == "FAILED"]
        r["unknown_failed_count"] = len(failed)
        r["unknown_failed_format"] = bool(failed) and all(re.match(FORMATS["FAILED"], l) for l in failed)
        r["unknown_failed_reasons"] = sorted({l.rsplit("REASON=", 1)[-1] for l in failed})
        asked = [l.split(" ")[4] for l in got3 if action(l) == "REQUESTED"]
        r["unknown_requested_count"] = len(asked)
        # Robust on a busy machine (an HSDir may be asked again once the
        # 5 s requery period of a testing network has passed): who was
        # asked, and that every request failed.
        r["unknown_distinct_hsdirs_asked"] = len(set(asked))
        r["unknown_every_request_failed"] = len(asked) == len(failed)
        if failed:
            r["unknown_failed_example"] = failed[0]

        # HSPOST of the fetched descriptor to the responsible HSDirs
        # (hsdir_n_replicas * hsdir_spread_store = 8 of them): 250, then
        # one answer from each. Those that hold this revision already
        # refuse it (UPLOAD_REJECTED); which ones do depends on where in
        # the time period the network is, so only the count is compared.
        responsible = min(8, len(hsdirs))
        if text:
            drain(ev)
            r["post_reply"] = raw(c, "HSPOST HSADDRESS=%s\n%s" % (sid, text))
            got4 = wait_answers(ev, sid, responsible, 180)
            answers = [l for l in got4 if action(l) in ("UPLOADED", "FAILED")]
            r["post_answers_from_every_responsible"] = len(
                {l.split(" ")[4].split("~")[0].lstrip("$") for l in answers}
            ) == responsible
            r["post_answer_count"] = len(answers)
            r["post_upload_events"] = len([l for l in got4 if action(l) == "UPLOAD"])
            r["post_outcomes"] = sorted(
                {
                    action(l) + ("" if action(l) != "FAILED" else " " + l.rsplit("REASON=", 1)[-1])
                    for l in answers
                }
            )
            r["post_format"] = bool(answers) and all(re.match(FORMATS[action(l)], l) for l in answers)
            r["post_descid_is_fetched"] = all(
                l.split(" ")[5] in desc_ids for l in answers if action(l) == "FAILED"
            )
            if answers:
                r["post_example"] = answers[0]

            # With SERVER=: one answer, from that HSDir; an HSDir that does
            # not hold the descriptor stores it (UPLOADED).
            # Who holds it: every HSDir that answered the post above (it
            # stored this revision or already had it), and those the
            # service's UPLOAD events of it went to.
            held = {l.split(" ")[4].split("~")[0].lstrip("$") for l in answers}
            for l in list(seen):
                f = l.split(" ")
                if sid in l and action(l) == "UPLOAD" and len(f) > 5 and f[5] in desc_ids:
                    held.add(f[4].split("~")[0].lstrip("$"))
            others = sorted(set(hsdirs) - held)
            r["post_nonholder_exists"] = bool(held) and bool(others)
            target = others[0] if others else fp0
            drain(ev)
            r["post_server_reply"] = raw(
                c, "HSPOST SERVER=$%s HSADDRESS=%s\n%s" % (target, sid, text)
            )
            got5 = wait_answers(ev, sid, 1, 120)
            answers5 = [l for l in got5 if action(l) in ("UPLOADED", "FAILED")]
            r["post_server_answers"] = sorted(
                {l.split(" ")[4].split("~")[0].lstrip("$") == target for l in answers5}
            )
            r["post_server_answer_count"] = len(answers5)
            r["post_server_outcomes"] = sorted({action(l) for l in answers5})
            r["post_server_format"] = bool(answers5) and all(
                re.match(FORMATS[action(l)], l) for l in answers5
            )
            if answers5:
                r["post_server_example"] = answers5[0]
        c.remove_ephemeral_hidden_service(sid)

        # Last, as some of them start fetches (tor does not compare the
        # nickname after `~`).
        r["errors"] = {k: raw(c, v) for k, v in errors(fp0, hsdirs.get(fp0, "x")).items()}
    print(json.dumps(r, sort_keys=True))


if __name__ == "__main__":
    sys.exit(main())
