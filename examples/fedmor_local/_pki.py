"""A throw-away PKI for a local consortium: a self-signed CA, one server certificate for
127.0.0.1 and, for mutual TLS, a client certificate per name. For tests and the demo on one
machine only: the keys are written unencrypted beside the certificates."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["client_cert_paths", "make_pki"]


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.touch(mode=0o600)
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def _leaf(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, name: str, *,
          server: bool, now: datetime.datetime) -> tuple[x509.Certificate,
                                                           ec.EllipticCurvePrivateKey]:
    """A CA-signed certificate: for 127.0.0.1/localhost (``server``) or a client ``name``."""
    key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH if server \
        else x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(ca.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   ca_key.public_key()), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def make_pki(directory: Path, clients: Sequence[str] = ()) -> tuple[Path, Path, Path]:
    """A self-signed CA and a CA-signed certificate for 127.0.0.1/localhost.

    Returns (ca.pem, cert.pem, key.pem). Each name in ``clients`` also gets a client
    certificate (mutual TLS): ``clients/<name>.pem`` and ``clients/<name>-key.pem``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedmor test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    paths = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for name, (cert_path, key_path) in {"127.0.0.1": paths[1:], **{
            c: client_cert_paths(directory, c) for c in clients}}.items():
        cert, key = _leaf(ca, ca_key, name, server=name == "127.0.0.1", now=now)
        cert_path.parent.mkdir(parents=True, exist_ok=True)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
    return paths


def client_cert_paths(directory: Path, name: str) -> tuple[Path, Path]:
    """Where :func:`make_pki` writes the client certificate and key of ``name``."""
    return directory / "clients" / f"{name}.pem", directory / "clients" / f"{name}-key.pem"
