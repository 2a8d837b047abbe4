import json

from corral.bus.messages import BackendInstallReply, BackendInstallRequest, BackendStopRequest
from corral.bus.subjects import backend_install, token


def test_omitempty_fields_are_left_out_of_the_json() -> None:
    body = json.loads(BackendInstallRequest(backend="llama-cpp", model_id="m", replica_index=0).to_json())
    assert body == {"backend": "llama-cpp", "model_id": "m", "replica_index": 0}
    assert json.loads(BackendInstallReply(success=False).to_json()) == {"success": False}


def test_null_and_empty_stop_payloads_mean_stop_all() -> None:
    assert BackendStopRequest.from_json(b"null").backend == ""
    assert BackendStopRequest.from_json(b"").backend == ""


def test_subject_tokens_cannot_inject_wildcards() -> None:
    assert token("a.b*c>d e") == "a-b-c-d-e"
    assert backend_install("n.1") == "nodes.n-1.backend.install"
