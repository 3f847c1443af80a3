"""A throwaway PKI for TLS tests, made with the ``openssl`` command: a CA, and certificates
it signs (EC P-256 keys, so making them is quick).

    pki = Pki.make(tmp_path)                  # CA in tmp_path/ca-*.pem
    switch = pki.issue("switch", ips=["169.254.213.2"])
    client = pki.issue("controller")
    switch.key, switch.cert, pki.ca           # paths
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DAYS = "2"


@dataclass(frozen=True, slots=True, kw_only=True)
class Pair:
    key: Path
    cert: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)


def _key(path: Path) -> Path:
    curve = "ec_paramgen_curve:P-256"
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", curve, "-out", str(path))
    return path


@dataclass(frozen=True, slots=True, kw_only=True)
class Pki:
    directory: Path
    ca: Path  # the CA certificate
    ca_key: Path

    @classmethod
    def make(cls, directory: Path, name: str = "ca") -> Pki:
        directory.mkdir(parents=True, exist_ok=True)
        key = _key(directory / f"{name}-key.pem")
        cert = directory / f"{name}-cert.pem"
        _openssl(
            "req", "-x509", "-new", "-key", str(key), "-out", str(cert), "-days", DAYS,
            "-subj", f"/CN=reroute test {name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
        return cls(directory=directory, ca=cert, ca_key=key)

    def issue(self, name: str, *, ips: Sequence[str] = (), dns: Sequence[str] = ()) -> Pair:
        """A key and a certificate for ``name`` signed by this CA (SANs: ``ips``, ``dns``)."""
        key = _key(self.directory / f"{name}-key.pem")
        csr = self.directory / f"{name}.csr"
        cert = self.directory / f"{name}-cert.pem"
        _openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", f"/CN={name}")
        ext = self.directory / f"{name}.ext"
        sans = [f"IP:{ip}" for ip in ips] + [f"DNS:{d}" for d in dns]
        lines = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature,keyEncipherment"]
        lines += ["extendedKeyUsage=serverAuth,clientAuth"]
        if sans:
            lines.append("subjectAltName=" + ",".join(sans))
        ext.write_text("\n".join(lines) + "\n")
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.ca_key),
            "-CAcreateserial", "-out", str(cert), "-days", DAYS, "-extfile", str(ext),
        )  # fmt: skip
        return Pair(key=key, cert=cert)
