"""Helpers shared by the stem scripts (control_check.py, relay_check.py,
onion_check.py, hsfetch_check.py).

The scripts are run by path (`python scripts/stem/<script>.py`), so this
directory is first on sys.path and `import common` finds this file.
"""

import ipaddress
import socket
import struct

import stem
import stem.connection
from stem.control import Controller


def auth_checks(host, port, password):
    """Each way to authenticate on its own connection: PROTOCOLINFO's
    methods, SAFECOOKIE, COOKIE, the password, a wrong password refused.
    A dict of the results."""
    r = {}
    with Controller.from_port(address=host, port=port) as c:
        pi = stem.connection.get_protocolinfo(c)
        r["auth_methods"] = sorted(m for m in pi.auth_methods)
        stem.connection.authenticate_safecookie(c, pi.cookie_path)
        r["auth_safecookie"] = c.get_info("version") != ""
    with Controller.from_port(address=host, port=port) as c:
        pi = stem.connection.get_protocolinfo(c)
        stem.connection.authenticate_cookie(c, pi.cookie_path)
        r["auth_cookie"] = c.get_info("version") != ""
    with Controller.from_port(address=host, port=port) as c:
        stem.connection.authenticate_password(c, password)
        r["auth_password"] = c.get_info("version") != ""
    with Controller.from_port(address=host, port=port) as c:
        try:
            stem.connection.authenticate_password(c, password + "x")
            r["auth_bad_password_refused"] = False
        except stem.connection.PasswordAuthFailed:
            r["auth_bad_password_refused"] = True
    return r


def _socks_address(host):
    """The SOCKS5 address of host: IPv4 (ATYP 1) for a dotted IPv4
    address, otherwise a name (ATYP 3)."""
    try:
        return b"\x01" + ipaddress.IPv4Address(host).packed
    except ValueError:
        h = host.encode()
        return b"\x03" + bytes([len(h)]) + h


def socks_get(socks, host, port, path, user=None, timeout=60.0):
    """HTTP/1.0 GET through a SOCKS5 proxy (no authentication, or a
    username, password "x", for stream isolation); returns (SOCKS reply
    code, headers dict with lower-case names, body). A reply code other
    than 0 comes with no headers and no body."""
    s = socket.create_connection(socks, timeout=timeout)
    try:
        if user:
            s.sendall(b"\x05\x01\x02")
            if s.recv(2) != b"\x05\x02":
                raise RuntimeError("SOCKS5 username auth refused")
            u = user.encode()
            s.sendall(b"\x01" + bytes([len(u)]) + u + b"\x01x")
            if s.recv(2) != b"\x01\x00":
                raise RuntimeError("SOCKS5 username refused")
        else:
            s.sendall(b"\x05\x01\x00")
            if s.recv(2) != b"\x05\x00":
                raise RuntimeError("SOCKS5 greeting refused")
        s.sendall(b"\x05\x01\x00" + _socks_address(host) + struct.pack(">H", port))
        rep = b""
        while len(rep) < 10:
            chunk = s.recv(10 - len(rep))
            if not chunk:
                raise RuntimeError("SOCKS5 reply cut short")
            rep += chunk
        if rep[1] != 0:
            return rep[1], {}, b""
        s.sendall(("GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" % (path, host)).encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return 0, headers, body
