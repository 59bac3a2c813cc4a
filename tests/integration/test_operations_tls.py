"""TLS and mutual TLS on the gRPC endpoint, with certificates the test makes itself."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from integration_support import add_sub_inputs, running_server
from operations_support import write_add_sub
from server_process import ServerProcess
from tritonclient.utils import InferenceServerException
from v1_reference import reference

A = np.ones((1, 3), dtype=np.float32)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _issue(
    folder: Path,
    name: str,
    issuer: tuple[ec.EllipticCurvePrivateKey, x509.Certificate] | None,
    usage: ExtendedKeyUsageOID | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A CA (issuer None) or a leaf signed by ``issuer``, valid for 127.0.0.1/localhost."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(issuer[1].subject if issuer else _name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if issuer is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        if usage is not None:
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    cert = builder.sign(issuer[0] if issuer else key, hashes.SHA256())
    _write(folder / name, key, cert)
    return key, cert


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pki")
    ca = _issue(folder, "ca", None)
    _issue(folder, "server", ca, ExtendedKeyUsageOID.SERVER_AUTH)
    _issue(folder, "client", ca, ExtendedKeyUsageOID.CLIENT_AUTH)
    _issue(folder, "stranger", _issue(folder, "other-ca", None), ExtendedKeyUsageOID.CLIENT_AUTH)
    return folder


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ops_tls")
    write_add_sub(path, "plain")
    return path


def _server_args(pki: Path, mutual: bool) -> list[str]:
    args = [f"--grpc-server-cert={pki / 'server.crt'}", f"--grpc-server-key={pki / 'server.key'}"]
    if mutual:
        return [*args, "--grpc-use-ssl-mutual=true", f"--grpc-root-cert={pki / 'ca.crt'}"]
    return [*args, "--grpc-use-ssl=true"]


@pytest.fixture(scope="module")
def tls_server(pki: Path, repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo], extra_args=_server_args(pki, mutual=False)) as server:
        yield server


@pytest.fixture(scope="module")
def mtls_server(pki: Path, repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo], extra_args=_server_args(pki, mutual=True)) as server:
        yield server


def _works(client: grpcclient.InferenceServerClient) -> None:
    result = client.infer("plain", add_sub_inputs(A, A))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + A)


def _fails(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.is_server_live(client_timeout=5)
    assert info.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")


def _client(server: ServerProcess, pki: Path, cert: str | None) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(
        server.url,
        ssl=True,
        root_certificates=str(pki / "ca.crt"),
        private_key=str(pki / f"{cert}.key") if cert else None,
        certificate_chain=str(pki / f"{cert}.crt") if cert else None,
    )


def test_tls_with_the_ca(tls_server: ServerProcess, pki: Path) -> None:
    with _client(tls_server, pki, None) as client:
        _works(client)


def test_tls_refuses_plaintext(tls_server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(tls_server.url) as client:
        _fails(client)


def test_tls_refuses_an_untrusted_server_certificate(tls_server: ServerProcess, pki: Path) -> None:
    with grpcclient.InferenceServerClient(
        tls_server.url, ssl=True, root_certificates=str(pki / "other-ca.crt")
    ) as client:
        _fails(client)


def test_mutual_tls_with_a_client_certificate(mtls_server: ServerProcess, pki: Path) -> None:
    with _client(mtls_server, pki, "client") as client:
        _works(client)


@pytest.mark.parametrize("cert", [None, "stranger"], ids=["no-client-cert", "foreign-ca"])
def test_mutual_tls_refuses_other_clients(
    mtls_server: ServerProcess, pki: Path, cert: str | None
) -> None:
    with _client(mtls_server, pki, cert) as client:
        _fails(client)


def test_the_v1_service_is_behind_the_same_mutual_tls(
    mtls_server: ServerProcess, pki: Path
) -> None:
    """The legacy v1 API shares the port, so it shares its TLS: a client certificate gets
    answers, a connection without one none."""
    ref = reference()
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.crt").read_bytes(),
        private_key=(pki / "client.key").read_bytes(),
        certificate_chain=(pki / "client.crt").read_bytes(),
    )
    with grpc.secure_channel(mtls_server.url, credentials) as channel:
        answer = ref.stub(channel).Health(ref.HealthRequest(mode="live"), timeout=10)
        assert answer.health and answer.request_status.code == ref.code("SUCCESS")
    anonymous = grpc.ssl_channel_credentials(root_certificates=(pki / "ca.crt").read_bytes())
    with grpc.secure_channel(mtls_server.url, anonymous) as channel, pytest.raises(grpc.RpcError):
        ref.stub(channel).Health(ref.HealthRequest(mode="live"), timeout=5)


def test_unreadable_certificate_stops_the_start(pki: Path, repo: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.crt"
    broken.write_text("not a certificate")
    args = [f"--grpc-server-cert={broken}", f"--grpc-server-key={pki / 'server.key'}"]
    server = ServerProcess([repo], extra_args=[*args, "--grpc-use-ssl"])
    with pytest.raises(RuntimeError, match="server exited with 1"):
        server.start()
    server.kill()
    assert "TLS certificate and key" in server.log
