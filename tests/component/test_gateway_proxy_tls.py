"""Proxy mode over TLS to the upstream (``--upstream-security-protocol SSL``): the gateway
verifies the brokers' certificates against ``--upstream-ssl-cafile`` (host names included,
as Kafka's ``ssl.endpoint.identification.algorithm=https``) and presents a client
certificate when given one (mutual TLS). The upstream is a fake Kafka broker behind a real
TLS listener, with certificates made by ``openssl`` for the test."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from services.upstream.security import UpstreamSecurity
from tests.component.test_gateway_proxy import NODE, FakeKafka
from tests.support.gateway import gateway_stack
from tests.support.kafka_wire import request

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d: Path, name: str) -> None:
    """``{name}-ca.pem`` and, signed by it, ``{name}-server.pem/.key`` (for 127.0.0.1) and
    ``{name}-client.pem/.key``."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", f"{name}-ca.key", "-out", f"{name}-ca.pem",
             "-days", "2", "-subj", f"/CN={name} test CA", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for who in ("server", "client"):
        _openssl("req", *ec, "-keyout", f"{name}-{who}.key", "-out", f"{name}-{who}.csr",
                 "-subj", f"/CN=127.0.0.1 {who}", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}-{who}.csr", "-CA", f"{name}-ca.pem",
                 "-CAkey", f"{name}-ca.key", "-CAcreateserial", "-out", f"{name}-{who}.pem",
                 "-days", "2", "-extfile", "san.ext", cwd=d)  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    make_pki(d, "good")
    make_pki(d, "other")
    return d


def server_context(pki: Path, require_client_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pki / "good-server.pem", pki / "good-server.key")
    if require_client_cert:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(pki / "good-ca.pem")
    return ctx


async def proxied_metadata_works(
    tmp_path: Path, fake: FakeKafka, security: UpstreamSecurity, expect: bool
) -> None:
    tmp_path.mkdir(parents=True, exist_ok=True)
    settings = {"upstream_bootstrap": f"127.0.0.1:{fake.port}", "upstream_security": security}
    async with gateway_stack(tmp_path, gateway=settings) as stack:
        assert stack.gateway.cluster is not None
        known = await stack.gateway.cluster.wait_known(5 if expect else 2)
        assert known is expect
        assert stack.gateway.ready is expect
        if expect:
            wire = await stack.wire()
            md = await wire.send(request("metadata", 12, topics=None))
            assert [int(b.node_id) for b in md.brokers] == [NODE]
            assert 3 in fake.received  # Metadata reached the upstream over TLS
            await wire.close()


async def test_tls_upstream_verified_with_the_ca_file(tmp_path: Path, pki: Path) -> None:
    fake = FakeKafka()
    await fake.start(ssl_context=server_context(pki, require_client_cert=False))
    try:
        security = UpstreamSecurity("SSL", cafile=str(pki / "good-ca.pem"))
        await proxied_metadata_works(tmp_path, fake, security, expect=True)
    finally:
        await fake.stop()


async def test_a_broker_certificate_from_another_ca_is_refused(tmp_path: Path, pki: Path) -> None:
    fake = FakeKafka()
    await fake.start(ssl_context=server_context(pki, require_client_cert=False))
    try:
        security = UpstreamSecurity("SSL", cafile=str(pki / "other-ca.pem"))
        await proxied_metadata_works(tmp_path, fake, security, expect=False)
        assert fake.received == []  # no request ever went over an unverified connection
    finally:
        await fake.stop()


async def test_mutual_tls_presents_the_client_certificate(tmp_path: Path, pki: Path) -> None:
    fake = FakeKafka()
    await fake.start(ssl_context=server_context(pki, require_client_cert=True))
    try:
        with_cert = UpstreamSecurity(
            "SSL",
            cafile=str(pki / "good-ca.pem"),
            certfile=str(pki / "good-client.pem"),
            keyfile=str(pki / "good-client.key"),
        )
        await proxied_metadata_works(tmp_path / "a", fake, with_cert, expect=True)
        without = UpstreamSecurity("SSL", cafile=str(pki / "good-ca.pem"))
        fake.received.clear()
        await proxied_metadata_works(tmp_path / "b", fake, without, expect=False)
        assert fake.received == []
    finally:
        await fake.stop()
