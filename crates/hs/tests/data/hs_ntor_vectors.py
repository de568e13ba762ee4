#!/usr/bin/env python3
"""Independent hs-ntor reference (rend-spec-v3 [NTOR-WITH-EXTRA-DATA]),
written from the spec with Python's hashlib and the `cryptography`
package's X25519, to produce the known answers in src/ntor/tests.rs.
Run: python3 hs_ntor_vectors.py"""
import hashlib
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

PROTOID = b"tor-hs-ntor-curve25519-sha3-256-1"
T_HSENC = PROTOID + b":hs_key_extract"
T_HSVERIFY = PROTOID + b":hs_verify"
T_HSMAC = PROTOID + b":hs_mac"
M_HSEXPAND = PROTOID + b":hs_key_expand"

def mac(key, msg):
    return hashlib.sha3_256(len(key).to_bytes(8, "big") + key + msg).digest()

def pub(sk):
    from cryptography.hazmat.primitives import serialization as s
    return sk.public_key().public_bytes(s.Encoding.Raw, s.PublicFormat.Raw)

x = X25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
b = X25519PrivateKey.from_private_bytes(bytes(range(33, 65)))
y = X25519PrivateKey.from_private_bytes(bytes(range(65, 97)))
X, B, Y = pub(x), pub(b), pub(y)
AUTH_KEY = bytes([0xA5] * 32)
SUBCRED = bytes([0x5C] * 32)

intro_in = x.exchange(b.public_key()) + AUTH_KEY + X + B + PROTOID
hs_keys = hashlib.shake_256(intro_in + T_HSENC + M_HSEXPAND + SUBCRED).digest(64)
enc_key, mac_key = hs_keys[:32], hs_keys[32:]
plain = b"introduce me" * 3
enc = Cipher(algorithms.AES(enc_key), modes.CTR(bytes(16))).encryptor().update(plain)
rend_in = x.exchange(y.public_key()) + x.exchange(b.public_key()) + AUTH_KEY + B + X + Y + PROTOID
seed = mac(rend_in, T_HSENC)
verify = mac(rend_in, T_HSVERIFY)
auth = mac(verify + AUTH_KEY + B + Y + X + PROTOID + b"Server", T_HSMAC)
keys = hashlib.shake_256(seed + M_HSEXPAND).digest(128)
for name, v in [("X", X), ("B", B), ("Y", Y), ("ENC_KEY", enc_key), ("MAC_KEY", mac_key),
                ("ENCRYPTED", enc), ("MAC_OF_ENCRYPTED", mac(mac_key, enc)),
                ("AUTH", auth), ("KEYS", keys)]:
    print(f"{name} {v.hex()}")
