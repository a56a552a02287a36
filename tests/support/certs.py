"""Throwaway certificate authorities and certificates for the TLS tests, made with the
``cryptography`` library at test time (nothing is checked in).

``Ca("test-ca")`` is a self-signed CA; ``ca.issue(dir, "server", hosts=[...])`` writes
``server.crt`` / ``server.key`` (PEM) signed by it and returns their paths. Certificates carry
both serverAuth and clientAuth usages, so the same pair serves a process's server and its
outgoing calls, as in the deployment (docs/security.md).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOCAL_HOSTS = ("localhost", "127.0.0.1")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(cn: str, ou: str | None = None, o: str | None = None) -> x509.Name:
    # most general first (as certificates are usually written): O, OU, CN
    attrs = []
    if o is not None:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o))
    if ou is not None:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path
    serial: int

    @property
    def pem(self) -> bytes:
        return self.cert.read_bytes()


class Ca:
    def __init__(self, name: str = "groupcoord-test-ca") -> None:
        self.key = _key()
        self.name = _name(name)
        now = _now()
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, directory: Path, name: str = "ca.crt") -> Path:
        path = directory / name
        path.write_bytes(self.pem)
        return path

    def issue(
        self,
        directory: Path,
        name: str,
        cn: str | None = None,
        ou: str | None = None,
        o: str | None = None,
        hosts: tuple[str, ...] = LOCAL_HOSTS,
        expired: bool = False,
    ) -> Issued:
        """``<name>.crt`` and ``<name>.key`` in ``directory`` (overwritten if present)."""
        key = _key()
        now = _now()
        if expired:
            not_before, not_after = (
                now - datetime.timedelta(days=3),
                now - datetime.timedelta(days=1),
            )
        else:
            not_before, not_after = (
                now - datetime.timedelta(hours=1),
                now + datetime.timedelta(days=1),
            )
        sans: list[x509.GeneralName] = []
        for h in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        serial = x509.random_serial_number()
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn or name, ou, o))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
        # write to temporary names, then rename: a reader never sees half a file
        for path, data in (
            (key_path, _key_pem(key)),
            (cert_path, cert.public_bytes(serialization.Encoding.PEM)),
        ):
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        return Issued(cert_path, key_path, serial)


def serial_of(pem: bytes) -> int:
    return x509.load_pem_x509_certificate(pem).serial_number


def serial_of_der(der: bytes) -> int:
    return x509.load_der_x509_certificate(der).serial_number
