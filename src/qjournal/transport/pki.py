"""Throwaway certificate authority for tests, benchmarks and the local demo cluster.

Why this module exists: mutual TLS needs a CA and one certificate per process.
Tests, ``bench/rpc_bench.py`` and the local cluster launcher must be able to
make them on the fly, without committing keys to the repository. The
``cryptography`` package is not a dependency of qjournal, so this drives the
``openssl`` command line tool (present on every target system) through
``subprocess``. Keys are EC P-256 (fast handshakes); certificates live for a
few days. Not for production use: production certificates come from the
operator's own CA.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from qjournal.errors import ConfigError

__all__ = ["CertPaths", "make_ca", "make_cert"]


@dataclass(frozen=True, slots=True)
class CertPaths:
    """PEM file paths of one identity.

    Attributes:
        cert: certificate.
        key: private key.
        ca: the CA certificate that signed it.
    """

    cert: str
    key: str
    ca: str


def _openssl(args: list[str], cwd: str) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise ConfigError("the openssl command line tool is not installed (needed to generate test certificates)")
    proc = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise ConfigError(f"openssl {' '.join(args[:2])} failed in {cwd}: {proc.stderr.strip()[-500:]}")


def make_ca(directory: str, name: str = "qjournal-test-ca", days: int = 3) -> CertPaths:
    """Create a self-signed CA in ``directory`` (``<name>.crt`` and ``<name>.key``).

    Args:
        directory: existing directory to write into.
        name: common name and file stem.
        days: validity.

    Returns:
        The CA's paths (``cert`` and ``ca`` are the same file).

    Raises:
        ConfigError: openssl is missing or failed.
    """
    crt = os.path.join(directory, f"{name}.crt")
    key = os.path.join(directory, f"{name}.key")
    _openssl(
        [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key, "-out", crt, "-days", str(days), "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        ],
        directory,
    )
    return CertPaths(crt, key, crt)


def make_cert(
    directory: str,
    ca: CertPaths,
    name: str,
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
    days: int = 3,
    cn: str | None = None,
) -> CertPaths:
    """Create a key and a certificate signed by ``ca``, usable as TLS server and client.

    Args:
        directory: existing directory to write into.
        ca: the signing CA (from :func:`make_ca`).
        name: file stem, and common name unless ``cn`` is given.
        hosts: subjectAltName entries (IP addresses or DNS names).
        days: validity (negative: already expired, for tests).
        cn: the subject common name, the principal a peer is known by (e.g. ``nn/127.0.0.1``).

    Returns:
        The identity's paths.

    Raises:
        ConfigError: openssl is missing or failed.
    """
    crt = os.path.join(directory, f"{name}.crt")
    key = os.path.join(directory, f"{name}.key")
    csr = os.path.join(directory, f"{name}.csr")
    ext = os.path.join(directory, f"{name}.ext")
    sans = ",".join(
        (f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}") for h in hosts
    )
    with open(ext, "w", encoding="ascii") as fh:
        fh.write(
            f"subjectAltName={sans}\n"
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
        )
    _openssl(
        ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", key, "-out", csr, "-subj", "/CN=" + (cn or name).replace("/", "\\/")],
        directory,
    )
    _openssl(
        ["x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial",
         "-out", crt, "-days", str(days), "-extfile", ext],
        directory,
    )
    return CertPaths(crt, key, ca.cert)
