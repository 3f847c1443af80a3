"""The API over HTTPS (``tls:``), with a CA made here by openssl: the client that trusts the
CA is served, one that does not is refused by its own check, and with ``client_ca`` a
client without a certificate signed by it is refused by the server."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from services.reroute.errors import ApiError, ConfigError
from services.reroute.model.topology import Topology
from services.reroute.service.client import RerouteClient
from services.reroute.service.config import ServeTls, _check_tls, load_config
from tests.unit.services.service.conftest import OPERATOR, ServerThread, settings
from tests.unit.services.service.fakes import FakeFabric

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _signed(name: str, subject: str, cwd: Path, *extra: str) -> tuple[Path, Path]:
    """A key and a certificate for ``subject`` signed by the CA in ``cwd``."""
    _openssl("req", *EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
             *extra, cwd=cwd)  # fmt: skip
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "1",
             "-copy_extensions", "copyall", cwd=cwd)  # fmt: skip
    return cwd / f"{name}.pem", cwd / f"{name}.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it;
    and a second CA that signed nothing here."""
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=lab-ca",
             "-days", "1", cwd=d)  # fmt: skip
    _openssl("req", "-x509", *EC, "-keyout", "other.key", "-out", "other.pem", "-subj",
             "/CN=other-ca", "-days", "1", cwd=d)  # fmt: skip
    _signed("server", "/CN=127.0.0.1", d, "-addext", "subjectAltName=IP:127.0.0.1")
    _signed("client", "/CN=monitor-a", d)
    return d


def _https(srv: ServerThread) -> str:
    return srv.url.replace("http://", "https://")


def test_a_client_trusting_the_ca_is_served_over_https_others_refuse(
    pki: Path, topo: Topology, fake: FakeFabric, tmp_path: Path
) -> None:
    tls = ServeTls(certificate=pki / "server.pem", private_key=pki / "server.key")
    with ServerThread(settings(topo, tmp_path / "j.sqlite", tls=tls), fake.drivers) as srv:
        with RerouteClient(_https(srv), OPERATOR, ca=pki / "ca.pem", retries=0) as client:
            assert client.health().status == "ok"
            assert client.create(["vm2>vm3"], "temporary", dry_run=True).text
        for ca in (None, pki / "other.pem"):  # the system's CAs, or a CA that did not sign it
            client = RerouteClient(_https(srv), OPERATOR, ca=ca, retries=0)
            with client, pytest.raises(ApiError) as refused:
                client.health()
            assert refused.value.status == 0 and "CERTIFICATE_VERIFY_FAILED" in str(refused.value)
        with pytest.raises(httpx.TransportError):  # plain HTTP to the HTTPS port
            httpx.get(f"{srv.url}/healthz", timeout=5)


def test_with_a_client_ca_only_clients_it_signed_are_served(
    pki: Path, topo: Topology, fake: FakeFabric, tmp_path: Path
) -> None:
    tls = ServeTls(
        certificate=pki / "server.pem", private_key=pki / "server.key", client_ca=pki / "ca.pem"
    )
    cert = (pki / "client.pem", pki / "client.key")
    with ServerThread(settings(topo, tmp_path / "j.sqlite", tls=tls), fake.drivers) as srv:
        with RerouteClient(_https(srv), OPERATOR, ca=pki / "ca.pem", cert=cert) as client:
            assert client.health().status == "ok"
        client = RerouteClient(_https(srv), OPERATOR, ca=pki / "ca.pem", retries=0)
        with client, pytest.raises(ApiError) as refused:  # no client certificate
            client.health()
        assert refused.value.status == 0


def test_tls_files_are_taken_from_the_configs_directory_and_checked_before_start(
    pki: Path, tmp_path: Path
) -> None:
    (tmp_path / "reroute.yaml").write_text(
        "topology: /nonexistent.yaml\n"
        "tokens: [{token: operator-token-0123456789, role: operator}]\n"
        f"tls: {{certificate: {pki / 'server.pem'}, private_key: server.key}}\n"
    )
    config = load_config(tmp_path / "reroute.yaml")
    assert config.tls is not None and config.tls.private_key == tmp_path / "server.key"
    with pytest.raises(ConfigError) as bad:
        _check_tls(config)
    assert f"{tmp_path / 'reroute.yaml'}:3: tls: cannot load" in str(bad.value)
    assert str(tmp_path / "server.key") in str(bad.value)
