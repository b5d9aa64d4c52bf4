"""TLS for a vLLM server that listens on a network address (a replica Ray placed on a node):
a self-signed certificate made for that one start, for the node's address, so the API key and
the weight-reload calls never cross the network in clear, and a client context that trusts
that certificate and nothing else (pinned: no other CA, the address checked against it).

The private key stays on the node, in a folder only its user can read (`0700`, the key
`0600`), outside the shared log folder, and only while the server starts: the server loads it
once, and `VLLMServer` removes it as soon as the server answers (or fails to start). The
certificate (public) reaches the pipeline through Ray with the server's URL.
"""
from __future__ import annotations

import datetime
import ipaddress
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

VALID_DAYS = 365  # a run's servers are restarted, with a new certificate, on every start


@dataclass
class SelfSigned:
    """A per-start key and certificate on disk (`keyfile`, `certfile`) and the certificate's
    PEM text (what a client trusts)."""

    folder: Path
    keyfile: Path
    certfile: Path
    cert_pem: str

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def self_signed(host: str) -> SelfSigned:
    """A new EC P-256 key and a self-signed certificate naming `host` (an IP address or a DNS
    name) as its subject alternative name, written to a new private temporary folder."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        alt = x509.DNSName(host)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mars vLLM replica")])
    now = datetime.datetime.now(datetime.timezone.utc)
    public = key.public_key()
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(public).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                         content_commitment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public),
                           critical=False)
            .sign(key, hashes.SHA256()))
    folder = Path(tempfile.mkdtemp(prefix="mars-vllm-tls-"))  # 0700: this user only
    keyfile, certfile = folder / "key.pem", folder / "cert.pem"
    keyfile.touch(mode=0o600)
    keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    certfile.write_bytes(pem)
    return SelfSigned(folder, keyfile, certfile, pem.decode())


def pinned_context(cert_pem: str) -> ssl.SSLContext:
    """A client context that trusts exactly the certificate `cert_pem` (no system CAs) and
    checks the server's address against it."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # hostname check and CERT_REQUIRED on
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(cadata=cert_pem)
    return ctx
