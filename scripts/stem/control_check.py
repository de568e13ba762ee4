#!/usr/bin/env python3
"""Drive a Tor control port with stem and report what happened as JSON.

The same script runs against stock tor and the onionmix client; the Rust
test (crates/cli/tests/control_interop.rs) compares the two reports.

Checks: cookie (SAFECOOKIE and COOKIE) and password authentication,
bootstrap status, circuit-status, CIRC and STREAM events during a verified
download, new_circuit with a chosen path, extend_circuit adding the exit
to a built two-hop circuit (and EXTENDCIRCUIT's errors), ATTACHSTREAM to
that circuit with __LeaveStreamsUnattached, NEWNYM (new streams on new circuits, and a
different exit when the network has two), CLOSECIRCUIT, BW events.
"""

import argparse
import hashlib
import json
import os
import queue
import signal
import sys
import threading
import time

import stem
from stem import CircStatus, Signal, StreamStatus
from stem.control import Controller, EventType, Listener

import common


def socks_get(socks, host, port, path, timeout=60.0):
    """HTTP GET through a SOCKS5 proxy; returns (headers dict, body)."""
    code, headers, body = common.socks_get(socks, host, port, path, timeout=timeout)
    if code != 0:
        raise RuntimeError("SOCKS5 CONNECT failed with code %d" % code)
    return headers, body


def verified_download(socks, sink, n):
    headers, body = socks_get(socks, sink[0], sink[1], "/bytes/%d" % n)
    want = headers.get("x-onionmix-sha256", "")
    return len(body) == n and hashlib.sha256(body).hexdigest() == want.lower()


class Events:
    """Collects events of some types from a controller into a queue."""

    def __init__(self, controller, *types):
        self.q = queue.Queue()
        self.seen = []
        self.controller = controller
        self.types = types
        controller.add_event_listener(self.q.put, *types)

    def drain(self):
        while True:
            try:
                self.seen.append(self.q.get_nowait())
            except queue.Empty:
                return self.seen

    def wait_for(self, pred, timeout):
        deadline = time.time() + timeout
        for ev in self.drain():
            if pred(ev):
                return ev
        while time.time() < deadline:
            try:
                ev = self.q.get(timeout=max(0.01, deadline - time.time()))
            except queue.Empty:
                break
            self.seen.append(ev)
            if pred(ev):
                return ev
        return None

    def close(self):
        self.controller.remove_event_listener(self.q.put)


def pick_path(controller, want_exits, timeout=180):
    """A guard, a middle and an exit from the consensus (fingerprints).

    Waits (up to `timeout` s) until the client's consensus lists
    `want_exits` usable exits: on a busy machine a consensus period can
    miss a relay whose upload or reachability test was late, and the
    NEWNYM checks below need both exits."""
    deadline = time.time() + timeout
    while True:
        relays = list(controller.get_network_statuses())
        n = sum(1 for r in relays if "Exit" in r.flags and "BadExit" not in r.flags)
        if n >= want_exits or time.time() > deadline:
            break
        time.sleep(2)
    exits = [r for r in relays if "Exit" in r.flags and "BadExit" not in r.flags]
    guards = [r for r in relays if "Guard" in r.flags and r not in exits]
    exit_fp = exits[0].fingerprint
    guard = (guards or [r for r in relays if r.fingerprint != exit_fp])[0].fingerprint
    middle = [r.fingerprint for r in relays if r.fingerprint not in (guard, exit_fp)][0]
    return [guard, middle, exit_fp], sorted(r.fingerprint for r in exits)


def wait_info(c, key, want, timeout):
    deadline = time.time() + timeout
    while True:
        v = c.get_info(key)
        if v == want or time.time() >= deadline:
            return v
        time.sleep(0.5)


def stream_circuit(events, target, timeout=90):
    ev = events.wait_for(
        lambda e: e.type == "STREAM" and e.status == StreamStatus.SUCCEEDED and e.target == target,
        timeout,
    )
    return ev.circ_id if ev is not None else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--control", required=True, help="host:port")
    ap.add_argument("--socks", required=True, help="host:port")
    ap.add_argument("--sink", required=True, help="host:port of the sink's HTTP server")
    ap.add_argument("--password", required=True)
    ap.add_argument("--max-newnym", type=int, default=6)
    ap.add_argument("--exits", type=int, default=2, help="exits the test network has")
    a = ap.parse_args()
    signal.alarm(900)
    chost, cport = a.control.rsplit(":", 1)
    shost, sport = a.socks.rsplit(":", 1)
    socks = (shost, int(sport))
    khost, kport = a.sink.rsplit(":", 1)
    sink = (khost, int(kport))
    target = "%s:%s" % sink
    r = {}

    # Authentication, each method on its own connection.
    r.update(common.auth_checks(chost, int(cport), a.password))

    with Controller.from_port(address=chost, port=int(cport)) as c:
        c.authenticate(password=a.password)
        r["version_parses"] = c.get_version() >= stem.version.Version("0.4.0.0")
        phase = c.get_info("status/bootstrap-phase")
        r["bootstrap_done"] = "PROGRESS=100" in phase and "TAG=done" in phase
        r["socks_listener"] = ("%s:%d" % socks) in ["%s:%d" % l for l in c.get_listeners(Listener.SOCKS)]
        r["disable_network"] = c.get_conf("DisableNetwork")
        r["pid_matches"] = int(c.get_info("process/pid")) > 0
        try:
            c.get_info("no-such-key")
            r["unknown_key_refused"] = False
        except stem.InvalidArguments:
            r["unknown_key_refused"] = True
        try:
            c.get_conf("NoSuchOption")
            r["unknown_option_refused"] = False
        except stem.InvalidArguments:
            r["unknown_option_refused"] = True
        # CIRC and STREAM events during a verified download.
        ev = Events(c, EventType.CIRC, EventType.STREAM, EventType.BW, EventType.SIGNAL)
        r["download_ok"] = verified_download(socks, sink, 200000)
        # Read after a download has used a circuit. Stock tor clears the
        # flag whenever it briefly doubts it can build circuits (a new
        # consensus in a young test network, a clock jump), so poll for a
        # while as a controller waiting on it would.
        r["circuit_established"] = wait_info(c, "status/circuit-established", "1", 60)
        circ_a = stream_circuit(ev, target)
        r["circuit_status_parses"] = all(circ.id for circ in c.get_circuits())
        r["has_built_circuit"] = any(circ.status == CircStatus.BUILT for circ in c.get_circuits())
        kinds = [e.status for e in ev.drain() if e.type == "STREAM" and e.target == target]
        r["stream_events"] = [k for k in ("NEW", "SENTCONNECT", "SUCCEEDED", "CLOSED") if k in kinds]
        r["bw_events"] = ev.wait_for(lambda e: e.type == "BW", 5) is not None
        r["stream_status_parses"] = isinstance(c.get_streams(), list)

        # A circuit along a chosen path.
        path, exits = pick_path(c, a.exits)
        # Every microdescriptor (GETINFO md/all), as stem parses them.
        mds = list(c.get_microdescriptors())
        r["md_all_parses"] = len(mds) >= 3 and all(md.ntor_onion_key for md in mds)
        # One microdescriptor by identity (GETINFO md/id/...), and the
        # configuration file the client was started with.
        md = c.get_microdescriptor(path[2], None)
        r["md_id_parses"] = md is not None and bool(md.ntor_onion_key)
        config_file = c.get_info("config-file", "")
        r["config_file_exists"] = bool(config_file) and os.path.isfile(config_file)
        ev.drain()
        ev.seen.clear()
        cid = c.new_circuit(path, await_build=True, timeout=90)
        circ = c.get_circuit(cid)
        r["chosen_path_built"] = [fp for fp, _ in circ.path] == path and circ.status == CircStatus.BUILT
        seen = [e.status for e in ev.drain() if e.type == "CIRC" and e.id == cid]
        r["circ_events"] = [k for k in ("LAUNCHED", "EXTENDED", "BUILT") if k in seen]

        # ORCONN: a circuit whose first hop the client has no connection
        # to opens one (LAUNCHED, then CONNECTED).
        connected = set()
        for line in c.get_info("orconn-status", "").splitlines():
            name = line.split(" ")[0]
            if name.startswith("$"):
                connected.add(name[1:41].upper())
        fps = [s.fingerprint for s in c.get_network_statuses()]
        first = next((fp for fp in fps if fp not in connected and fp != path[2]), None)
        if first is None:
            r["orconn_events"] = "every relay already connected"
        else:
            orc = Events(c, EventType.ORCONN)
            mid = next(fp for fp in fps if fp not in (first, path[2]))
            c.new_circuit([first, mid, path[2]], await_build=True, timeout=90)
            orc.wait_for(
                lambda e: e.endpoint_fingerprint == first and e.status == "CONNECTED", 30
            )
            statuses = [e.status for e in orc.drain() if e.endpoint_fingerprint == first]
            r["orconn_events"] = [k for k in ("LAUNCHED", "CONNECTED") if k in statuses]
            orc.close()

        # CIRC_BW: a circuit that carried bytes is reported.
        cbw = Events(c, EventType.CIRC_BW)
        verified_download(socks, sink, 300000)
        r["circ_bw_event"] = cbw.wait_for(lambda e: e.read > 0 and e.written > 0, 10) is not None
        cbw.close()

        # EXTENDCIRCUIT on a built circuit: guard and middle first, then
        # the exit added to the same circuit.
        short = c.new_circuit(path[:2], await_build=True, timeout=90)
        sc = c.get_circuit(short)
        r["short_circuit_built"] = [fp for fp, _ in sc.path] == path[:2] and sc.status == CircStatus.BUILT
        ev.drain()
        ev.seen.clear()
        ext = c.extend_circuit(short, [path[2]], await_build=True, timeout=90)
        sc = c.get_circuit(short)
        r["extend_same_id"] = ext == short
        r["extended_path"] = [fp for fp, _ in sc.path] == path and sc.status == CircStatus.BUILT
        r["extend_events"] = [
            [e.status, len(e.path)] for e in ev.drain() if e.type == "CIRC" and e.id == short
        ]
        r["extend_unknown"] = str(c.msg("EXTENDCIRCUIT 987654 $%s" % path[2]))
        r["extend_no_path"] = str(c.msg("EXTENDCIRCUIT %s" % short))
        r["extend_bad_router"] = str(c.msg("EXTENDCIRCUIT %s $%s" % (short, "AB" * 20)))

        # A stream attached by the controller to the extended circuit.
        c.set_conf("__LeaveStreamsUnattached", "1")
        attached = {}

        def attach(e):
            if e.type == "STREAM" and e.status == StreamStatus.NEW and e.target == target:
                try:
                    c.attach_stream(e.id, short)
                    attached["ok"] = True
                except Exception as exc:  # noqa: BLE001 - reported in the result
                    attached["err"] = str(exc)

        c.add_event_listener(attach, EventType.STREAM)
        ev.drain()
        ev.seen.clear()
        r["attached_download_ok"] = verified_download(socks, sink, 50000)
        c.remove_event_listener(attach)

        # CLOSESTREAM on a stream the controller holds unattached: the
        # application's SOCKS request fails, STREAM reports the end.
        held = queue.Queue()

        def hold(e):
            if e.type == "STREAM" and e.status == StreamStatus.NEW and e.target == target:
                held.put(e.id)

        c.add_event_listener(hold, EventType.STREAM)
        ev.drain()
        ev.seen.clear()
        socks_code = {}

        def fetch():
            try:
                socks_code["code"] = common.socks_get(socks, sink[0], sink[1], "/bytes/1000", timeout=60)[0]
            except Exception as exc:  # noqa: BLE001 - reported in the result
                socks_code["code"] = "error: %s" % exc

        t = threading.Thread(target=fetch)
        t.start()
        try:
            sid = held.get(timeout=30)
        except queue.Empty:
            sid = None
        if sid is not None:
            c.close_stream(sid)
        t.join(60)
        c.remove_event_listener(hold)
        time.sleep(1)
        r["closestream_events"] = [
            e.status for e in ev.drain() if e.type == "STREAM" and e.id == sid and e.status != StreamStatus.NEW
        ]
        r["closestream_socks_code"] = socks_code.get("code")
        c.reset_conf("__LeaveStreamsUnattached")
        r["attach_ok"] = attached.get("ok", False)
        r["attached_to_chosen"] = stream_circuit(ev, target) == short
        r["leave_unattached_reset"] = c.get_conf("__LeaveStreamsUnattached") == "0"

        # NEWNYM: the next stream gets a new circuit; with two exits, a
        # different exit within a few NEWNYMs (ours: the first).
        ev.drain()
        ev.seen.clear()
        c.close_circuit(cid)
        r["close_circuit_event"] = ev.wait_for(
            lambda e: e.type == "CIRC" and e.id == cid and e.status == CircStatus.CLOSED, 30
        ) is not None
        c.close_circuit(short)
        used = {circ_a}
        last_exit = c.get_circuit(circ_a).path[-1][0] if circ_a and c.get_circuit(circ_a, None) else None
        r["newnym_new_circuits"] = True
        r["newnym_exit_changed"] = False
        r["newnym_attempts"] = 0
        for attempt in range(1, a.max_newnym + 1):
            r["newnym_attempts"] = attempt
            c.signal(Signal.NEWNYM)
            got = ev.wait_for(lambda e: e.type == "SIGNAL" and e.signal == Signal.NEWNYM, 20)
            if got is None:
                r["newnym_signal_event"] = False
                break
            r["newnym_signal_event"] = True
            ev.drain()
            ev.seen.clear()
            ok = verified_download(socks, sink, 20000)
            cb = stream_circuit(ev, target)
            if not ok or cb is None or cb in used:
                r["newnym_new_circuits"] = False
                break
            used.add(cb)
            ci = c.get_circuit(cb, None)
            exit_b = ci.path[-1][0] if ci else None
            if last_exit is not None and exit_b is not None and exit_b != last_exit:
                r["newnym_exit_changed"] = True
                break
            last_exit = exit_b or last_exit
        r["exit_flagged"] = len(exits)
        ev.close()
        # The log reaches controllers as events: tor logs a notice when
        # it is told to reload.
        logs = Events(c, EventType.NOTICE)
        c.signal(Signal.RELOAD)
        got = logs.wait_for(lambda e: "Received reload signal" in e.message, 30)
        r["reload_notice"] = got is not None
        logs.close()
    print(json.dumps(r, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
