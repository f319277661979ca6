"""Certificates (a CA, the SuperLink's TLS certificate) and the nodes' authentication keys.

Made in Python with ``cryptography`` (a dependency of Flower), so no external tool is
needed. Part of :mod:`fedkmeans.experiment.deploy` (its docstring describes the workflow).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from fedkmeans.experiment.deploy.layout import DeploymentError

#: Subject of the offline CA.
CA_NAME = "fedkmeans deployment CA"


# -- certificates -------------------------------------------------------------------------
def _san_entries(hosts: Sequence[str]) -> list[x509.GeneralName]:
    """``localhost``, ``127.0.0.1``, ``::1`` and ``hosts`` as SANs, without repeats."""
    entries: list[x509.GeneralName] = []
    for host in ["localhost", "127.0.0.1", "::1", *hosts]:
        try:
            entry: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            if not host or any(c in host for c in " ,=\"'"):
                raise ValueError(f"invalid host name for the certificate: {host!r}") from None
            entry = x509.DNSName(host)
        if entry not in entries:
            entries.append(entry)
    return entries


def _san_text(entry: x509.GeneralName) -> str:
    """``DNS:name`` or ``IP:address`` (as the manifest lists them)."""
    if isinstance(entry, x509.IPAddress):
        return f"IP:{entry.value}"
    return f"DNS:{entry.value}"


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only (mode 0600 from the start)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _certificate(
    subject: str,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Certificate | None,
    signing_key: ec.EllipticCurvePrivateKey,
    days: int,
    extensions: list[tuple[x509.ExtensionType, bool]],
) -> x509.Certificate:
    """A certificate for ``public_key``, signed with ``signing_key`` (SHA-256).

    ``issuer`` None makes it self-signed; otherwise it gets the issuer's name and an
    authority key identifier.
    """
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name if issuer is None else issuer.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate clock skew
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )
    if issuer is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signing_key.public_key()),
            critical=False,
        )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signing_key, hashes.SHA256())


def _key_usage(**allowed: bool) -> x509.KeyUsage:
    names = ("digital_signature", "content_commitment", "key_encipherment",
             "data_encipherment", "key_agreement", "key_cert_sign", "crl_sign",
             "encipher_only", "decipher_only")
    return x509.KeyUsage(**{name: allowed.get(name, False) for name in names})


def verify_server_certificate(ca_pem: bytes, server_pem: bytes, host: str = "localhost") -> None:
    """Check that the SuperLink certificate chains to the CA and is valid for ``host``.

    Parameters
    ----------
    ca_pem, server_pem : bytes
        The CA's and the SuperLink's certificates (PEM).
    host : str
        A name or address the certificate must cover (as a TLS client checks it).

    Raises
    ------
    DeploymentError
        The certificate is not signed by the CA, has expired, lacks ``host`` or is not
        a TLS server certificate.
    """
    try:
        ip: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        ip = x509.DNSName(host)
    verifier = (
        PolicyBuilder().store(Store([x509.load_pem_x509_certificate(ca_pem)]))
        .build_server_verifier(ip)
    )
    try:
        verifier.verify(x509.load_pem_x509_certificate(server_pem), [])
    except VerificationError as exc:
        raise DeploymentError(f"the SuperLink certificate does not verify for {host}: "
                              f"{exc}") from exc


def make_certificates(certs_dir: Path, hosts: Sequence[str] = (), days: int = 365) -> list[str]:
    """Create an offline CA and a SuperLink certificate signed by it (EC P-256).

    Parameters
    ----------
    certs_dir : pathlib.Path
        Receives ``ca.key``, ``ca.crt``, ``server.key``, ``server.pem`` (the keys
        unencrypted PKCS#8 PEM, mode 0600).
    hosts : sequence of str
        Names or addresses of the SuperLink besides ``localhost``, ``127.0.0.1`` and
        ``::1`` (which are always included: the SuperLink's own executor dials
        127.0.0.1).
    days : int
        Validity.

    Returns
    -------
    list of str
        The subject alternative names (``DNS:localhost``, ``IP:127.0.0.1``, ...).

    Raises
    ------
    ValueError
        A host name is empty or contains a space, comma, ``=`` or quote.
    DeploymentError
        The new certificate does not verify against the CA for each of its SANs.
    """
    sans = _san_entries(hosts)
    certs_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(certs_dir, 0o700)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _certificate(CA_NAME, ca_key.public_key(), None, ca_key, days, [
        (x509.BasicConstraints(ca=True, path_length=None), True),
        (_key_usage(key_cert_sign=True, crl_sign=True), True),
    ])
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _certificate(str(sans[0].value), server_key.public_key(), ca_cert, ca_key,
                               days, [
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (_key_usage(digital_signature=True, key_encipherment=True), True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        (x509.SubjectAlternativeName(sans), False),
    ])
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    server_pem = server_cert.public_bytes(serialization.Encoding.PEM)
    for entry in sans:
        verify_server_certificate(ca_pem, server_pem, str(entry.value))
    _write_private(certs_dir / "ca.key", _pem_key(ca_key))
    (certs_dir / "ca.crt").write_bytes(ca_pem)
    _write_private(certs_dir / "server.key", _pem_key(server_key))
    (certs_dir / "server.pem").write_bytes(server_pem)
    return [_san_text(entry) for entry in sans]


# -- node keys ----------------------------------------------------------------------------
def make_node_keys(keys_dir: Path, num_nodes: int) -> list[Path]:
    """One unencrypted OpenSSH ECDSA P-384 key pair per node.

    Flower 1.41 and 1.42 accept NIST EC keys only; Ed25519, PEM and passphrase-protected keys
    fail (docs/facts.md, "Deployment with TLS and node authentication").

    Parameters
    ----------
    keys_dir : pathlib.Path
        Receives ``node-<i>`` (OpenSSH private key, mode 0600) and ``node-<i>.pub``
        (``ecdsa-sha2-nistp384 AAAA... fedkmeans-node-<i>``).
    num_nodes : int
        Number of key pairs.

    Returns
    -------
    list of pathlib.Path
        The private keys; each public key is ``<key>.pub``.
    """
    keys_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(keys_dir, 0o700)
    paths = []
    for i in range(num_nodes):
        key = ec.generate_private_key(ec.SECP384R1())
        path = keys_dir / f"node-{i}"
        _write_private(path, key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ))
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH)
        path.with_name(path.name + ".pub").write_bytes(public + f" fedkmeans-node-{i}\n".encode())
        paths.append(path)
    return paths
