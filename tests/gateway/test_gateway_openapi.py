"""The served OpenAPI document describes the live gateway: schemathesis fuzzes every
documented operation (valid and invalid data) and checks each answer against the document.

Checks: documented status codes, content types and response schemas; undocumented methods
answer 405; data that breaks the schema is refused with a 4xx; and no answer is a 500.
501 (RPCs the service does not implement yet) and 503 (load/unload refused in
model-control mode none) are documented answers, so they are allowed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from conftest import running_gateway
from gateway_process import GatewayProcess, http_request
from server_process import DEFAULT_REPOSITORY, ServerProcess

EXAMPLES_PER_OPERATION = 12

# Updates of server-wide settings are not fuzzed: random values would point the log file
# or trace file at random paths. test_gateway_endpoints.py covers these routes. Nor is
# registering system shared memory: a random key names no shared-memory object, which
# Triton answers with INTERNAL (500) "Unable to open shared memory region"
# (test_gateway_shared_memory.py covers that route).
schema = schemathesis.pytest.from_fixture("api_schema").exclude(
    method="POST",
    path_regex=r"(/logging|/trace/setting|/systemsharedmemory/region/[^/]+/register)$",
)


def _config() -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "generation": {
                "mode": "all",
                "max-examples": EXAMPLES_PER_OPERATION,
                "deterministic": True,
            },
            "phases": {"coverage": {"enabled": False}, "stateful": {"enabled": False}},
            "checks": {
                "not_a_server_error": {"expected-statuses": ["2xx", "4xx", "501", "503"]},
                "positive_data_acceptance": {"enabled": False},
            },
        }
    )


@pytest.fixture(scope="module")
def fuzzed_gateway() -> Iterator[GatewayProcess]:
    """Its own service (model-control mode none: load/unload are refused) and gateway."""
    server = ServerProcess([DEFAULT_REPOSITORY]).start()
    try:
        with running_gateway(server.url) as gw:
            yield gw
    finally:
        assert server.stop() == 0, server.log


@pytest.fixture(scope="module")
def api_schema(fuzzed_gateway: GatewayProcess) -> schemathesis.BaseSchema:
    url = f"http://{fuzzed_gateway.url}/openapi.json"
    return schemathesis.openapi.from_url(url, config=_config())


@schema.parametrize()
def test_gateway_matches_its_openapi_document(case: schemathesis.Case) -> None:
    case.call_and_validate()


def test_document_lists_every_v2_endpoint(gateway: GatewayProcess) -> None:
    doc = http_request(gateway.url, "GET", "/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    operations = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    expected = {
        ("GET", "/v2"),
        ("GET", "/v2/health/live"),
        ("GET", "/v2/health/ready"),
        ("GET", "/v2/models/{name}"),
        ("GET", "/v2/models/{name}/versions/{version}"),
        ("GET", "/v2/models/{name}/ready"),
        ("GET", "/v2/models/{name}/versions/{version}/ready"),
        ("GET", "/v2/models/{name}/config"),
        ("GET", "/v2/models/{name}/versions/{version}/config"),
        ("GET", "/v2/models/stats"),
        ("GET", "/v2/models/{name}/stats"),
        ("GET", "/v2/models/{name}/versions/{version}/stats"),
        ("POST", "/v2/models/{model_name}/infer"),
        ("POST", "/v2/models/{model_name}/versions/{model_version}/infer"),
        ("POST", "/v2/models/{model_name}/generate"),
        ("POST", "/v2/models/{model_name}/generate_stream"),
        ("POST", "/v2/repository/index"),
        ("POST", "/v2/repository/models/{model_name}/load"),
        ("POST", "/v2/repository/models/{model_name}/unload"),
        ("GET", "/v2/systemsharedmemory/status"),
        ("POST", "/v2/systemsharedmemory/region/{name}/register"),
        ("POST", "/v2/systemsharedmemory/unregister"),
        ("GET", "/v2/cudasharedmemory/status"),
        ("POST", "/v2/cudasharedmemory/region/{name}/register"),
        ("GET", "/v2/trace/setting"),
        ("POST", "/v2/trace/setting"),
        ("GET", "/v2/models/{model_name}/trace/setting"),
        ("GET", "/v2/logging"),
        ("POST", "/v2/logging"),
    }
    assert expected <= operations, sorted(expected - operations)
    infer = doc["paths"]["/v2/models/{model_name}/infer"]["post"]
    assert set(infer["requestBody"]["content"]) == {"application/json", "application/octet-stream"}
    assert "GRPCInferenceService/ModelInfer" in infer["summary"]


def test_docs_page(gateway: GatewayProcess) -> None:
    reply = http_request(gateway.url, "GET", "/docs")
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/html")
    page = reply.body.decode()
    assert "/v2/models/{model_name}/infer" in page and 'href="/openapi.json"' in page
