"""deploy/nginx/render.py's two routings: the default (least_conn, sequences hashed on the
triton-sequence-id header) and client affinity (--client-affinity: every upstream hashed
on the client's address, or the nginx variable given). nginx itself runs both in
tests/integration/test_replicas.py and test_replicas_affinity.py."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVERS = (["10.0.0.1:8001", "10.0.0.2:8001"], ["10.0.0.1:8000", "10.0.0.2:8000"])


def _load() -> ModuleType:
    path = ROOT / "deploy" / "nginx" / "render.py"
    spec = importlib.util.spec_from_file_location("nginx_render", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


render = _load()


def _balancing(text: str) -> dict[str, str]:
    """Each upstream's balancing line."""
    blocks = re.findall(r"upstream (\w+) \{\n\s+zone [^\n]*\n\s+([^\n]*)\n", text)
    return dict(blocks)


def test_the_default_routing() -> None:
    text = render.render(*SERVERS)
    assert _balancing(text) == {
        "triton_grpc": "least_conn;",
        "triton_grpc_sequence": "hash $http_triton_sequence_id consistent;",
        "triton_http": "least_conn;",
        "triton_http_sequence": "hash $http_triton_sequence_id consistent;",
    }
    assert "CLIENT AFFINITY" not in text and "{{" not in text


@pytest.mark.parametrize("key", ["$remote_addr", "$http_x_client_id"])
def test_client_affinity_hashes_every_upstream_on_the_key(key: str) -> None:
    text = render.render(*SERVERS, affinity_key=key)
    line = f"hash {key} consistent;  # client affinity"
    assert set(_balancing(text).values()) == {line}
    assert len(_balancing(text)) == 4
    assert "least_conn;" not in text and "{{" not in text
    assert "# CLIENT AFFINITY (render.py --client-affinity)" in text
    # Only the balancing differs from the default rendering.
    default = render.render(*SERVERS).splitlines()
    changed = [a for a in text.splitlines() if a not in default]
    assert all(a.startswith("#") or a.strip() == line for a in changed), changed


def test_the_command_line_flag(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--grpc-server", "10.0.0.1:8001", "--http-server", "10.0.0.1:8000"]
    assert render.main([*args, "--client-affinity"]) == 0
    assert "hash $remote_addr consistent;" in capsys.readouterr().out
    assert render.main([*args, "--client-affinity", "$http_x_client_id"]) == 0
    assert "hash $http_x_client_id consistent;" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        render.main([*args, "--client-affinity", "remote_addr; evil"])
    assert "takes an nginx variable" in capsys.readouterr().err
