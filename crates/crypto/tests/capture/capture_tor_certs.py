#!/usr/bin/env python3
"""Capture a stock tor relay's CERTS cell and TLS certificate.

Starts `tor` as a relay on a loopback ORPort (with a fake loopback
authority so it never contacts anything else), opens a TLS connection,
sends VERSIONS, and writes what the relay answers:

  <out>/certs_payload.hex   the CERTS cell payload, hex
  <out>/tls_cert.der        the relay's TLS certificate
  <out>/fingerprint         the relay's `fingerprint` file
  <out>/fingerprint-ed25519 the relay's `fingerprint-ed25519` file
  <out>/captured_at         Unix time of the capture

Usage: capture_tor_certs.py <outdir>
"""
import os, socket, ssl, struct, subprocess, sys, tempfile, time

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p

def read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return buf

def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        port = free_port()
        torrc = os.path.join(d, "torrc")
        with open(torrc, "w") as f:
            f.write(f"""DataDirectory {d}/data
ORPort 127.0.0.1:{port}
Address 127.0.0.1
AssumeReachable 1
PublishServerDescriptor 0
SocksPort 0
TestingTorNetwork 1
DirAuthority fake orport=1 no-v2 v3ident={'A'*40} 127.0.0.1:2 {'B'*40}
Nickname onionmixcapture
Sandbox 0
Log notice file {d}/log
""")
        proc = subprocess.Popen(["tor", "-f", torrc], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 60
            while True:
                try:
                    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
                    break
                except OSError:
                    if time.time() > deadline:
                        raise
                    time.sleep(0.2)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            tls = ctx.wrap_socket(raw)
            tls.settimeout(10)
            tls.sendall(struct.pack(">HBH", 0, 7, 6) + struct.pack(">HHH", 3, 4, 5))
            circ, cmd, ln = struct.unpack(">HBH", read_exact(tls, 5))
            assert cmd == 7, cmd
            versions = read_exact(tls, ln)
            certs = None
            while certs is None:
                circ, cmd = struct.unpack(">IB", read_exact(tls, 5))
                if cmd == 7 or cmd >= 128:
                    ln, = struct.unpack(">H", read_exact(tls, 2))
                    payload = read_exact(tls, ln)
                else:
                    payload = read_exact(tls, 509)
                if cmd == 129:
                    certs = payload
            der = tls.getpeercert(binary_form=True)
            now = int(time.time())
            tls.close()
            with open(os.path.join(out, "certs_payload.hex"), "w") as f:
                f.write(certs.hex() + "\n")
            with open(os.path.join(out, "tls_cert.der"), "wb") as f:
                f.write(der)
            for name in ("fingerprint", "fingerprint-ed25519"):
                with open(os.path.join(d, "data", name)) as src, open(os.path.join(out, name), "w") as dst:
                    dst.write(src.read())
            with open(os.path.join(out, "captured_at"), "w") as f:
                f.write(f"{now}\n")
            print("captured", len(certs), "bytes of CERTS; versions", versions.hex())
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

if __name__ == "__main__":
    main()
