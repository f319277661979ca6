"""Certificates (a CA, the SuperLink's TLS certificate) and the nodes' authentication keys.

Part of :mod:`fedkmeans.deploy` (its docstring describes the workflow).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from fedkmeans.deploy.layout import check_tools, run_tool

# -- certificates and keys --------------------------------------------------------------------
_CA_CONFIG = """[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_ca
[dn]
CN = fedkmeans deployment CA
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
"""

_SERVER_CONFIG = """[req]
distinguished_name = dn
prompt = no
[dn]
CN = {cn}
[v3_server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = {sans}
"""


def _san_entries(hosts: Sequence[str]) -> list[str]:
    entries = []
    for host in ["localhost", "127.0.0.1", "::1", *hosts]:
        try:
            entry = f"IP:{ipaddress.ip_address(host)}"
        except ValueError:
            if not host or any(c in host for c in " ,=\"'"):
                raise ValueError(f"invalid host name for the certificate: {host!r}") from None
            entry = f"DNS:{host}"
        if entry not in entries:
            entries.append(entry)
    return entries


def make_certificates(certs_dir: Path, hosts: Sequence[str] = (), days: int = 365) -> list[str]:
    """Create an offline CA and a SuperLink certificate signed by it (openssl, EC P-256).

    Parameters
    ----------
    certs_dir : pathlib.Path
        Receives ``ca.key``, ``ca.crt``, ``server.key``, ``server.pem``.
    hosts : sequence of str
        Names or addresses of the SuperLink besides ``localhost``, ``127.0.0.1`` and
        ``::1`` (which are always included: the SuperLink's own executor dials
        127.0.0.1).
    days : int
        Validity.

    Returns
    -------
    list of str
        The subject alternative names.
    """
    check_tools(["openssl"])
    certs_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(certs_dir, 0o700)
    sans = _san_entries(hosts)
    (certs_dir / "ca.cnf").write_text(_CA_CONFIG)
    (certs_dir / "server.cnf").write_text(
        _SERVER_CONFIG.format(cn=sans[0].split(":", 1)[1], sans=",".join(sans))
    )
    c = {name: str(certs_dir / name) for name in (
        "ca.key", "ca.crt", "ca.cnf", "ca.srl", "server.key", "server.csr", "server.pem",
        "server.cnf",
    )}
    keygen = ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
    steps = [
        ([*keygen, "-out", c["ca.key"]], "CA key"),
        (["openssl", "req", "-x509", "-new", "-key", c["ca.key"], "-sha256", "-days", str(days),
          "-config", c["ca.cnf"], "-out", c["ca.crt"]], "CA certificate"),
        ([*keygen, "-out", c["server.key"]], "SuperLink key"),
        (["openssl", "req", "-new", "-key", c["server.key"], "-config", c["server.cnf"],
          "-out", c["server.csr"]], "SuperLink certificate request"),
        (["openssl", "x509", "-req", "-in", c["server.csr"], "-CA", c["ca.crt"], "-CAkey",
          c["ca.key"], "-CAserial", c["ca.srl"], "-CAcreateserial", "-days", str(days),
          "-sha256", "-extfile", c["server.cnf"], "-extensions", "v3_server",
          "-out", c["server.pem"]], "SuperLink certificate"),
    ]
    for command, what in steps:
        run_tool(command, f"openssl: {what}")
    for name in ("ca.key", "server.key"):
        os.chmod(c[name], 0o600)
    run_tool(["openssl", "verify", "-CAfile", c["ca.crt"], c["server.pem"]],
              "openssl: verify the SuperLink certificate")
    return sans


def make_node_keys(keys_dir: Path, num_nodes: int) -> list[Path]:
    """One unencrypted OpenSSH ECDSA P-384 key pair per node.

    Flower 1.41 accepts NIST EC keys only; Ed25519, PEM and passphrase-protected keys
    fail (docs/facts.md, "Deployment with TLS and node authentication").

    Returns
    -------
    list of pathlib.Path
        The private keys; each public key is ``<key>.pub``.
    """
    check_tools(["ssh-keygen"])
    keys_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(keys_dir, 0o700)
    paths = []
    for i in range(num_nodes):
        key = keys_dir / f"node-{i}"
        for path in (key, key.with_name(key.name + ".pub")):
            path.unlink(missing_ok=True)
        run_tool(
            ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C",
             f"fedkmeans-node-{i}", "-f", str(key)],
            f"ssh-keygen: key of node {i}",
        )
        paths.append(key)
    return paths
