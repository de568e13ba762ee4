#!/usr/bin/env python3
"""Reference-side helper for onionmix's sphinxmix interop tests.

Reads one JSON request on stdin, writes one JSON response on stdout. Uses
PyPI sphinxmix 0.0.7 + petlib 0.0.45 (run with the venv made by
scripts/sphinxmix/setup-venv.sh). Operations (field "op"):

  vector   deterministic packet: randomness fixed (gensecret -> x,
           urandom(n) -> bytes(i % 251 for i in range(n))); returns the
           packet bytes and every hop's processing result.
  create   build a forward packet with real randomness for given public
           keys and routing entries (hex), or Loopix-style routing built here.
  process  run sphinx_process hop by hop over a packet with given secrets;
           at the final hop run receive_forward and return dest and msg.
  keys     public keys (petlib EcPt encoding, hex) for integer secrets.

All byte strings are hex in JSON.
"""
import json
import sys

from petlib.bn import Bn
from petlib.pack import encode, decode
from sphinxmix.SphinxParams import SphinxParams
from sphinxmix import SphinxClient
from sphinxmix.SphinxClient import (Nenc, create_forward_message,
                                    receive_forward, Relay_flag, Dest_flag,
                                    Surb_flag, create_surb, package_surb,
                                    receive_surb)
from sphinxmix.SphinxNode import sphinx_process


def det_urandom(n):
    return bytes(i % 251 for i in range(n))


def params_of(req):
    return SphinxParams(header_len=req.get("header_len", 1024),
                        body_len=req.get("body_len", 1024))


def bn_of(v):
    """Integers come as JSON ints or big-endian hex strings."""
    if isinstance(v, str):
        return Bn.from_binary(bytes.fromhex(v))
    return Bn(v)


def pub_of(params, secret):
    return bn_of(secret) * params.group.g


def routing_entries(req):
    if "routing_hex" in req:
        return [bytes.fromhex(h) for h in req["routing_hex"]]
    # Loopix-style entries: Nenc([(host, port), drop, type, delay, name])
    out = []
    for e in req["loopix_routing"]:
        out.append(Nenc([(e["host"], e["port"]), e["drop"], e.get("type"),
                         float(e["delay"]), e["name"]]))
    return out


def dest_of(req):
    d = req["dest"]
    if isinstance(d, dict) and "loopix" in d:
        h, p, n = d["loopix"]
        return (h, p, n)
    return bytes.fromhex(d)


def to_jsonable(v):
    if isinstance(v, bytes):
        return {"bin": v.hex()}
    if isinstance(v, str):
        return {"str": v}
    if isinstance(v, (list, tuple)):
        return [to_jsonable(x) for x in v]
    if isinstance(v, float):
        return {"float": v}
    return v


def process_path(params, secrets, packet_bytes):
    header, delta = decode(packet_bytes)
    hops = []
    final = None
    for sec in secrets:
        tag, routing, (header, delta), mac_key = sphinx_process(
            params, bn_of(sec), header, delta)
        rdec = decode(routing)
        hop = {"tag": tag.hex(), "routing": routing.hex(),
               "mac_key": mac_key.hex(),
               "next": encode((header, delta)).hex()}
        hops.append(hop)
        if rdec[0] == Dest_flag:
            dest, msg = receive_forward(params, mac_key, delta)
            final = {"dest": to_jsonable(dest), "msg": to_jsonable(msg)}
            break
        if rdec[0] == Surb_flag:
            final = {"surb": to_jsonable(rdec[1:])}
            break
    return hops, final


def main():
    req = json.load(sys.stdin)
    op = req["op"]
    params = params_of(req)
    if op == "keys":
        out = {"pubs": [encode(pub_of(params, s)).hex() for s in req["secrets"]],
               "compressed": [pub_of(params, s).export().hex() for s in req["secrets"]]}
    elif op in ("vector", "create"):
        secrets = req.get("secrets")
        if "pubs" in req:
            keys = [decode(bytes.fromhex(h)) for h in req["pubs"]]
        else:
            keys = [pub_of(params, s) for s in secrets]
        nodes = routing_entries(req)
        if op == "vector":
            x = bn_of(req["x"])
            params.group.gensecret = lambda: x
            SphinxClient.urandom = det_urandom
        header, delta = create_forward_message(
            params, nodes, keys, dest_of(req), bytes.fromhex(req["msg"]))
        packet = encode((header, delta))
        out = {"packet": packet.hex(),
               "alpha": header[0].export().hex(),
               "beta": header[1].hex(), "gamma": header[2].hex(),
               "body": delta.hex(),
               "routing": [n.hex() for n in nodes]}
        if op == "vector" and secrets:
            out["hops"], out["final"] = process_path(params, secrets, packet)
        if req.get("surb"):
            xid, keytuple, nymtuple = create_surb(params, nodes, keys,
                                                  dest_of(req))
            n0, h0, ktilde = nymtuple
            reply = package_surb(params, nymtuple, b"surb reply")
            out["surb"] = {"xid": xid.hex(),
                           "keytuple": [k.hex() for k in keytuple],
                           "reply_packet": encode(reply).hex()}
    elif op == "process":
        hops, final = process_path(params, req["secrets"],
                                   bytes.fromhex(req["packet"]))
        out = {"hops": hops, "final": final}
    elif op == "surb_receive":
        msg = receive_surb(params, [bytes.fromhex(k) for k in req["keytuple"]],
                           bytes.fromhex(req["body"]))
        out = {"msg": msg.hex()}
    else:
        raise SystemExit("unknown op %r" % op)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
