#!/usr/bin/env python3
"""Drive a relay's (or authority's) control port with stem; report JSON.

The same script runs against a stock tor relay and an onionmix relay in
one network; the Rust test (crates/cli/tests/control_interop.rs,
`stem_drives_both_relays`) compares the two reports.

Checks: PROTOCOLINFO's methods, cookie (SAFECOOKIE and COOKIE) and
password authentication, a wrong password refused, the version, the
relay's identity and listeners, its bootstrap, descriptor and
reachability status, its own network-status entry, GETCONF of relay
options, __OwningControllerProcess set and reset, unknown keys refused,
traffic counters, orconn-status and circuit-status parsing, BW events,
SIGNAL HEARTBEAT and RELOAD with their SIGNAL events, RELOAD's notice as
a NOTICE event.
"""

import argparse
import json
import os
import queue
import re
import signal
import sys
import time

import stem
from stem import Signal
from stem.control import Controller, EventType, Listener

import common


def poll(fn, want, timeout):
    """fn() until it returns `want` (or the timeout); the last value."""
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v == want or time.time() > deadline:
            return v
        time.sleep(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--control", required=True, help="host:port")
    ap.add_argument("--password", required=True)
    ap.add_argument("--fingerprint", required=True)
    ap.add_argument("--nickname", required=True)
    ap.add_argument("--orport", required=True, help="host:port")
    ap.add_argument("--pid", type=int, required=True)
    a = ap.parse_args()
    signal.alarm(600)
    chost, cport = a.control.rsplit(":", 1)
    fp = a.fingerprint.upper()
    r = {}

    # Authentication, each method on its own connection.
    r.update(common.auth_checks(chost, int(cport), a.password))

    with Controller.from_port(address=chost, port=int(cport)) as c:
        c.authenticate(password=a.password)
        r["version_parses"] = c.get_version() >= stem.version.Version("0.4.0.0")
        r["fingerprint_matches"] = c.get_info("fingerprint") == fp
        r["pid_matches"] = int(c.get_info("process/pid")) == a.pid
        r["config_file_exists"] = os.path.isfile(c.get_info("config-file"))
        ors = ["%s:%d" % l for l in c.get_listeners(Listener.OR)]
        r["or_listener"] = a.orport in ors
        ctls = ["%s:%d" % l for l in c.get_listeners(Listener.CONTROL)]
        r["control_listener"] = a.control in ctls
        r["uptime_parses"] = int(c.get_info("uptime")) >= 0

        # A relay that took part in the network: bootstrapped, its
        # descriptor accepted, reachable, listed in the consensus.
        r["bootstrap_done"] = poll(
            lambda: "PROGRESS=100" in c.get_info("status/bootstrap-phase"), True, 180)
        r["enough_dir_info"] = poll(lambda: c.get_info("status/enough-dir-info"), "1", 120)
        r["good_server_descriptor"] = poll(
            lambda: c.get_info("status/good-server-descriptor"), "1", 120)
        r["accepted_server_descriptor"] = c.get_info("status/accepted-server-descriptor")
        r["reachable_or"] = poll(lambda: c.get_info("status/reachability-succeeded/or"), "1", 120)
        r["reachability"] = c.get_info("status/reachability-succeeded")

        def own_entry():
            try:
                return c.get_network_status(fp)
            except (stem.ControllerError, ValueError):
                return None
        ns = None
        deadline = time.time() + 120
        while ns is None and time.time() < deadline:
            ns = own_entry()
            if ns is None:
                time.sleep(2)
        r["ns_self"] = ns is not None and ns.fingerprint == fp and ns.nickname == a.nickname
        r["ns_self_running"] = ns is not None and "Running" in ns.flags
        r["ns_all_lists_self"] = any(e.fingerprint == fp for e in c.get_network_statuses())

        r["conf_nickname"] = c.get_conf("Nickname") == a.nickname
        r["conf_orport_has_port"] = a.orport.rsplit(":", 1)[1] in c.get_conf("ORPort", "")
        r["conf_socksport"] = c.get_conf("SocksPort")
        c.set_conf("__OwningControllerProcess", str(os.getpid()))
        r["owner_set"] = c.get_conf("__OwningControllerProcess") == str(os.getpid())
        c.reset_conf("__OwningControllerProcess")
        r["owner_reset"] = c.get_conf("__OwningControllerProcess", None) in (None, "")
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

        r["traffic_parses"] = all(
            int(c.get_info(k)) >= 0 for k in ("traffic/read", "traffic/written"))
        lines = [l for l in c.get_info("orconn-status").splitlines() if l]
        r["orconn_status_parses"] = all(
            re.match(r"^\S+ (NEW|LAUNCHED|CONNECTED|FAILED|CLOSED)$", l) for l in lines)
        r["circuit_status_parses"] = isinstance(c.get_circuits(), list)

        q = queue.Queue()
        c.add_event_listener(q.put, EventType.BW, EventType.SIGNAL, EventType.NOTICE)

        def wait_for(pred, timeout):
            deadline = time.time() + timeout
            while time.time() < deadline:
                try:
                    e = q.get(timeout=max(0.01, deadline - time.time()))
                except queue.Empty:
                    return False
                if pred(e):
                    return True
            return False

        r["bw_events"] = wait_for(lambda e: e.type == "BW", 10)
        c.signal(Signal.HEARTBEAT)
        r["heartbeat_event"] = wait_for(
            lambda e: e.type == "SIGNAL" and e.signal == Signal.HEARTBEAT, 10)
        # RELOAD: its SIGNAL event, and tor's notice in the log (which
        # reaches controllers as a NOTICE event), in either order.
        c.signal(Signal.RELOAD)
        seen = {"signal": False, "notice": False}

        def reload_seen(e):
            if e.type == "SIGNAL" and e.signal == Signal.RELOAD:
                seen["signal"] = True
            if e.type == "NOTICE" and "Received reload signal" in e.message:
                seen["notice"] = True
            return seen["signal"] and seen["notice"]

        wait_for(reload_seen, 15)
        r["reload_event"] = seen["signal"]
        r["reload_notice"] = seen["notice"]
        r["still_answers"] = c.get_info("fingerprint") == fp
        c.remove_event_listener(q.put)
    print(json.dumps(r, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
