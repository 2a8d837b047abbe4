"""The Files and Batch APIs on real parts (a frontend, a worker and simulator backend processes, PostgreSQL, NATS):
a JSONL of chat requests uploaded with the official `openai` SDK runs to completion with every answer in its
output file; a line for an unknown model is a 404 in the error file; bad lines fail the batch naming their line
numbers; a cancel stops it; files list, read and delete per API key; every refused field is a 4xx naming it.

The simulator's answer is a hash of the prompt it was sent (`simulated_words`), so each output line's text proves
which request the backend answered."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai
import orjson
import pytest

from corral.backends.simulator import simulated_words
from support.cluster import Cluster
from support.faults import write_sim_model
from support.waiting import wait_for

SIM, PACED = "batch-sim", "batch-paced"  # PACED: 5 tokens a second, so a batch of it can be cancelled mid-way
KEY, OTHER_KEY = "sk-batch-one", "sk-batch-two"  # auth is off: keys only tell owners apart
MAX_FILE_BYTES = 64 << 10
WORDS = 4  # max_tokens of each chat line


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Any, nats_url: str) -> Iterator[Cluster]:
    c = Cluster(
        root=state_root / "e2e-batches",
        database_url=make_database(),
        nats_url=nats_url,
        frontend_env={
            "CORRAL_BATCH_POLL_INTERVAL": "0.2s",
            "CORRAL_FILES_MAX_BYTES": str(MAX_FILE_BYTES),
            "CORRAL_BATCH_CONCURRENCY": "2",
            "CORRAL_BATCH_LEASE": "3s",  # a killed frontend's lines run again 3 s later
            "CORRAL_FILES_SWEEP_INTERVAL": "0.5s",
        },
    )
    write_sim_model(c.models_dir, SIM)
    write_sim_model(c.models_dir, PACED, "output_token_time_s:0.2")
    yield from c.serving("w1")


@pytest.fixture(scope="module")
def sdk(cluster: Cluster) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=f"{cluster.frontend_url}/v1", api_key=KEY, max_retries=0, timeout=60)
    yield client
    client.close()


def _headers(key: str = KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _chat_line(custom_id: str, text: str, model: str = SIM, **extra: Any) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": WORDS}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body, **extra}


def _jsonl(*lines: dict[str, Any] | str) -> bytes:
    return (
        b"\n".join(line.encode() if isinstance(line, str) else orjson.dumps(line) for line in lines) + b"\n"
    )


def _upload(
    cluster: Cluster, content: bytes, key: str = KEY, purpose: str = "batch", name: str = "in.jsonl"
) -> httpx.Response:
    return httpx.post(
        f"{cluster.frontend_url}/v1/files",
        headers=_headers(key),
        files={"file": (name, content, "application/jsonl")},
        data={"purpose": purpose},
        timeout=30,
    )


def _create(cluster: Cluster, body: dict[str, Any], key: str = KEY) -> httpx.Response:
    return httpx.post(f"{cluster.frontend_url}/v1/batches", headers=_headers(key), json=body, timeout=30)


def _batch(cluster: Cluster, batch_id: str) -> dict[str, Any]:
    response = httpx.get(f"{cluster.frontend_url}/v1/batches/{batch_id}", headers=_headers(), timeout=30)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _run(cluster: Cluster, content: bytes, endpoint: str = "/v1/chat/completions") -> str:
    file_id = _upload(cluster, content).json()["id"]
    created = _create(cluster, {"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h"})
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def _wait(cluster: Cluster, predicate: Callable[[], bool], what: str) -> None:
    """wait_for, failing with the frontend's log tail (what the batch runner said)."""
    try:
        wait_for(predicate, what, 60)
    except AssertionError as exc:
        log = cluster.frontend.log() if cluster.frontend else ""
        raise AssertionError(f"{exc}; frontend log:\n{log[-4000:]}") from None


def _ended(cluster: Cluster, batch_id: str) -> dict[str, Any]:
    ended: dict[str, Any] = {}

    def done() -> bool:
        ended.update(_batch(cluster, batch_id))
        return ended["status"] in ("completed", "failed", "expired", "cancelled")

    _wait(cluster, done, f"batch {batch_id} to end")
    return ended


def _lines(cluster: Cluster, file_id: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{cluster.frontend_url}/v1/files/{file_id}/content", headers=_headers(), timeout=30)
    assert response.status_code == 200, response.text
    return [orjson.loads(line) for line in response.content.splitlines()]


def _said(text: str) -> str:
    return " ".join(simulated_words(SIM, f"user: {text}", WORDS))


def test_a_batch_of_five_chat_requests_completes_with_every_answer_in_its_output_file(
    cluster: Cluster, sdk: openai.OpenAI
) -> None:
    texts = {f"req-{i}": f"question number {i}" for i in range(5)}
    content = _jsonl(*(_chat_line(custom_id, text) for custom_id, text in texts.items()))
    uploaded = sdk.files.create(file=("requests.jsonl", io.BytesIO(content)), purpose="batch")
    assert (uploaded.bytes, uploaded.purpose, uploaded.filename) == (len(content), "batch", "requests.jsonl")
    batch = sdk.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"team": "search"},
    )
    assert batch.status == "validating" and batch.metadata == {"team": "search"}

    _wait(cluster, lambda: sdk.batches.retrieve(batch.id).status == "completed", "the batch to complete")
    done = sdk.batches.retrieve(batch.id)
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (5, 5, 0)
    assert done.model == SIM and done.error_file_id is None and done.output_file_id is not None
    assert done.in_progress_at is not None and done.completed_at is not None
    assert done.usage is not None and done.usage.output_tokens == 5 * WORDS

    lines = [orjson.loads(line) for line in sdk.files.content(done.output_file_id).content.splitlines()]
    assert [line["custom_id"] for line in lines] == list(texts)
    for line in lines:
        assert line["error"] is None and line["response"]["status_code"] == 200
        assert line["response"]["body"]["choices"][0]["message"]["content"] == _said(texts[line["custom_id"]])
    assert batch.id in [b.id for b in sdk.batches.list()]


def test_a_line_for_an_unknown_model_is_a_404_in_the_error_file_and_the_others_run(cluster: Cluster) -> None:
    batch_id = _run(
        cluster, _jsonl(_chat_line("known", "hello"), _chat_line("unknown", "hello", model="no-such-model"))
    )
    done = _ended(cluster, batch_id)
    assert done["status"] == "completed"
    assert done["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
    [ok] = _lines(cluster, done["output_file_id"])
    [failed] = _lines(cluster, done["error_file_id"])
    assert ok["custom_id"] == "known" and failed["custom_id"] == "unknown"
    assert failed["response"]["status_code"] == 404
    assert "no-such-model" in failed["response"]["body"]["error"]["message"]


def test_bad_lines_fail_the_batch_before_any_runs_naming_each_line(cluster: Cluster) -> None:
    content = _jsonl(
        _chat_line("a", "one"),
        "{not json",
        {**_chat_line("b", "two"), "url": "/v1/embeddings"},
        _chat_line("a", "three"),
        {**_chat_line("c", "four"), "method": "GET"},
    )
    done = _ended(cluster, _run(cluster, content))
    assert done["status"] == "failed" and done["failed_at"] is not None
    errors = [(e["line"], e["code"], e["param"]) for e in done["errors"]["data"]]
    assert errors == [
        (2, "invalid_json_line", None),
        (3, "invalid_url", "url"),
        (4, "duplicate_custom_id", "custom_id"),
        (5, "invalid_value", "method"),
    ]
    assert "already used on line 1" in done["errors"]["data"][2]["message"]
    assert done["request_counts"] == {"total": 0, "completed": 0, "failed": 0}


def test_a_cancelled_batch_runs_no_new_line_and_ends_cancelled(cluster: Cluster) -> None:
    batch_id = _run(cluster, _jsonl(*(_chat_line(f"slow-{i}", f"slow {i}", model=PACED) for i in range(8))))
    _wait(cluster, lambda: _batch(cluster, batch_id)["status"] == "in_progress", "the batch to start")
    cancelled = httpx.post(
        f"{cluster.frontend_url}/v1/batches/{batch_id}/cancel", headers=_headers(), timeout=30
    )
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] in ("cancelling", "cancelled")
    done = _ended(cluster, batch_id)
    assert done["status"] == "cancelled" and done["cancelled_at"] is not None
    counts = done["request_counts"]
    assert counts["total"] == 8 and counts["failed"] == 0 and counts["completed"] < 8
    not_run = _lines(cluster, done["error_file_id"])
    assert len(not_run) == 8 - counts["completed"]
    assert {line["error"]["code"] for line in not_run} == {"batch_cancelled"}
    again = httpx.post(f"{cluster.frontend_url}/v1/batches/{batch_id}/cancel", headers=_headers(), timeout=30)
    assert again.status_code == 200 and again.json()["status"] == "cancelled"


def test_files_are_listed_read_and_deleted_by_their_own_key_only(cluster: Cluster) -> None:
    url = cluster.frontend_url
    uploaded = _upload(cluster, b'{"x": 1}\n', name="../../etc/passwd")
    assert uploaded.status_code == 200, uploaded.text
    file = uploaded.json()
    assert file["filename"] == "passwd" and file["bytes"] == 9 and file["object"] == "file"  # metadata only
    long_name = _upload(cluster, b"{}\n", name="é" * 300 + ".jsonl").json()
    assert long_name["filename"] == "é" * 255
    assert file["id"] in [
        f["id"] for f in httpx.get(f"{url}/v1/files", headers=_headers(), timeout=30).json()["data"]
    ]
    assert httpx.get(f"{url}/v1/files/{file['id']}", headers=_headers(), timeout=30).json() == file
    assert (
        httpx.get(f"{url}/v1/files/{file['id']}/content", headers=_headers(), timeout=30).content
        == b'{"x": 1}\n'
    )
    other = _headers(OTHER_KEY)
    assert httpx.get(f"{url}/v1/files/{file['id']}", headers=other, timeout=30).status_code == 404
    assert file["id"] not in [
        f["id"] for f in httpx.get(f"{url}/v1/files", headers=other, timeout=30).json()["data"]
    ]
    assert httpx.delete(f"{url}/v1/files/{file['id']}", headers=other, timeout=30).status_code == 404
    deleted = httpx.delete(f"{url}/v1/files/{file['id']}", headers=_headers(), timeout=30)
    assert deleted.json() == {"id": file["id"], "object": "file", "deleted": True}
    assert (
        httpx.get(f"{url}/v1/files/{file['id']}/content", headers=_headers(), timeout=30).status_code == 404
    )


def _error(response: httpx.Response) -> tuple[int, str | None, str]:
    error = response.json()["error"]
    return response.status_code, error.get("param"), error["message"]


def test_refused_uploads_and_batches_name_the_field(cluster: Cluster) -> None:
    status, param, message = _error(_upload(cluster, b"{}\n", purpose="fine-tune"))
    assert (status, param) == (400, "purpose") and "not supported by corral" in message
    status, param, message = _error(_upload(cluster, b"x" * (MAX_FILE_BYTES + 1)))
    assert (status, param) == (413, "file") and "CORRAL_FILES_MAX_BYTES" in message
    status, _, message = _error(_upload(cluster, b"x" * (MAX_FILE_BYTES + (100 << 10))))  # refused unread
    assert status == 413 and "CORRAL_FILES_MAX_BYTES" in message

    url, headers = f"{cluster.frontend_url}/v1/files", _headers()
    as_json = httpx.post(url, headers=headers, json={"purpose": "batch"}, timeout=30)
    assert _error(as_json)[:2] == (400, "file")
    no_boundary = httpx.post(
        url, headers={**headers, "content-type": "multipart/form-data"}, content=b"x", timeout=30
    )
    assert _error(no_boundary)[0] == 400
    torn = httpx.post(
        url,
        headers={**headers, "content-type": "multipart/form-data; boundary=zz"},
        content=b"--zz\r\nbad",
        timeout=30,
    )
    assert _error(torn)[0] == 400
    extra = httpx.post(
        url,
        headers=headers,
        files={"file": ("a.jsonl", b"{}")},
        data={"purpose": "batch", "expires_after[anchor]": "x"},
    )
    assert _error(extra)[:2] == (400, "expires_after.anchor")
    too_long = httpx.post(
        url,
        headers=headers,
        files={"file": ("a.jsonl", b"{}")},
        data={"purpose": "batch", "expires_after[anchor]": "created_at", "expires_after[seconds]": "9999999"},
    )
    assert _error(too_long)[:2] == (400, "expires_after.seconds")
    no_file = httpx.post(url, headers=headers, files={"other": ("a", b"{}")}, data={"purpose": "batch"})
    assert _error(no_file)[:2] == (400, "other")

    file_id = _upload(cluster, _jsonl(_chat_line("a", "one"))).json()["id"]
    good = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    changes: list[tuple[dict[str, Any], tuple[int, str]]] = [
        ({"endpoint": "/v1/moderations"}, (400, "endpoint")),
        ({"completion_window": "1h"}, (400, "completion_window")),
        ({"input_file_id": "file-nothere"}, (404, "input_file_id")),
        (
            {"output_expires_after": {"anchor": "created_at", "seconds": 60}},
            (400, "output_expires_after.seconds"),
        ),
        ({"output_expires_after": {"anchor": "now", "seconds": 3600}}, (400, "output_expires_after.anchor")),
        ({"output_expires_after": "1h"}, (400, "output_expires_after")),
        ({"priority": "high"}, (400, "priority")),
        ({"metadata": {"k": "v" * 513}}, (400, "metadata")),
    ]
    for change, expected in changes:
        assert _error(_create(cluster, {**good, **change}))[:2] == expected, change
    assert _error(_create(cluster, good, key=OTHER_KEY))[:2] == (404, "input_file_id")
    missing = httpx.get(f"{cluster.frontend_url}/v1/batches/batch_nothere", headers=_headers(), timeout=30)
    assert _error(missing)[:2] == (404, "batch_id")


def test_a_file_past_its_expires_after_is_gone_at_once_and_its_rows_are_deleted(cluster: Cluster) -> None:
    kept = httpx.post(
        f"{cluster.frontend_url}/v1/files",
        headers=_headers(),
        files={"file": ("short.jsonl", _jsonl(_chat_line("a", "one")), "application/jsonl")},
        data={"purpose": "batch", "expires_after[anchor]": "created_at", "expires_after[seconds]": "3600"},
        timeout=30,
    ).json()
    assert kept["expires_at"] == kept["created_at"] + 3600
    _sql(cluster, "UPDATE batch_files SET expires_at = now() - interval '1 second' WHERE id = $1", kept["id"])
    url = f"{cluster.frontend_url}/v1/files/{kept['id']}"
    assert httpx.get(url, headers=_headers(), timeout=30).status_code == 404  # at once, before any sweep
    listed = httpx.get(f"{cluster.frontend_url}/v1/files", headers=_headers(), timeout=30).json()["data"]
    assert kept["id"] not in [f["id"] for f in listed]
    gone = "SELECT count(*) AS n FROM batch_file_chunks WHERE file_id = $1"
    _wait(cluster, lambda: _sql(cluster, gone, kept["id"])[0]["n"] == 0, "the sweep to delete its chunks")


def test_a_batch_with_output_expires_after_writes_output_files_that_expire(
    sdk: openai.OpenAI, cluster: Cluster
) -> None:
    file_id = _upload(cluster, _jsonl(_chat_line("a", "one"), _chat_line("b", "two", model="nope"))).json()[
        "id"
    ]
    body = {
        "input_file_id": file_id,
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
        "output_expires_after": {"anchor": "created_at", "seconds": 7200},
    }
    created = _create(cluster, body)
    assert created.status_code == 200, created.text
    ended = _ended(cluster, created.json()["id"])
    assert ended["status"] == "completed"
    for name in ("output_file_id", "error_file_id"):
        written = sdk.files.retrieve(ended[name])
        assert written.expires_at == written.created_at + 7200, name
    assert sdk.files.retrieve(file_id).expires_at is None  # the input file is kept until deleted


def test_a_chunked_upload_is_streamed_through_and_stored_whole(cluster: Cluster) -> None:
    """No Content-Length: the limits layer passes the body on as it arrives (the multipart parser spools it)."""
    boundary = "corral-chunked"
    content = _jsonl(*(_chat_line(f"c{i}", "x" * 200) for i in range(100)))  # ~30 kB, sent in 1 kB pieces
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="c.jsonl"\r\n'
        "Content-Type: application/jsonl\r\n\r\n"
    ).encode()
    body = head + content + f"\r\n--{boundary}--\r\n".encode()

    def pieces() -> Iterator[bytes]:
        for at in range(0, len(body), 1024):
            yield body[at : at + 1024]

    r = httpx.post(
        f"{cluster.frontend_url}/v1/files",
        headers={**_headers(), "content-type": f"multipart/form-data; boundary={boundary}"},
        content=pieces(),
        timeout=30,
    )
    assert r.status_code == 200, r.text
    stored = httpx.get(
        f"{cluster.frontend_url}/v1/files/{r.json()['id']}/content", headers=_headers(), timeout=30
    )
    assert stored.content == content


def _sql(cluster: Cluster, statement: str, *args: Any) -> list[Any]:
    async def run() -> list[Any]:
        conn = await asyncpg.connect(cluster.database_url)
        try:
            return list(await conn.fetch(statement, *args))
        finally:
            await conn.close()

    return asyncio.run(run())


def test_a_batch_past_its_window_runs_no_new_line_and_expires_with_the_rest_failed(cluster: Cluster) -> None:
    batch_id = _run(cluster, _jsonl(*(_chat_line(f"late-{i}", f"late {i}", model=PACED) for i in range(8))))
    _wait(cluster, lambda: _batch(cluster, batch_id)["status"] == "in_progress", "the batch to start")
    _sql(cluster, "UPDATE batches SET expires_at = now() WHERE id = $1", batch_id)  # its 24 h are over
    done = _ended(cluster, batch_id)
    assert done["status"] == "expired" and done["expired_at"] is not None
    counts = done["request_counts"]
    assert counts["total"] == 8 and counts["completed"] + counts["failed"] == 8 and counts["failed"] > 0
    expired = _lines(cluster, done["error_file_id"])
    assert len(expired) == counts["failed"]
    assert {line["error"]["code"] for line in expired} == {"batch_expired"}


@pytest.mark.slow
def test_the_lines_of_a_killed_frontend_are_run_by_another_and_none_is_lost(cluster: Cluster) -> None:
    second, _ = cluster.spawn_frontend("frontend-2")
    batch_id = _run(cluster, _jsonl(*(_chat_line(f"s-{i}", f"survive {i}", model=PACED) for i in range(10))))
    running = "SELECT count(DISTINCT lease_owner) FROM batch_lines WHERE batch_id = $1 AND state = 'running'"
    _wait(
        cluster,
        lambda: _sql(cluster, running, batch_id)[0][0] == 2,
        "both frontends to run lines of the batch",
    )
    second.popen.kill()  # no hand-back: its lines wait for their lease (CORRAL_BATCH_LEASE) to lapse
    second.popen.wait()
    done = _ended(cluster, batch_id)
    assert done["status"] == "completed"
    assert done["request_counts"] == {"total": 10, "completed": 10, "failed": 0}
    lines = _lines(cluster, done["output_file_id"])
    assert [line["custom_id"] for line in lines] == [f"s-{i}" for i in range(10)]


def test_with_auth_a_batch_runs_as_its_key_and_a_model_outside_the_key_is_a_403_line(
    cluster: Cluster,
) -> None:
    auth, url = cluster.spawn_frontend("frontend-auth", "--auth")
    try:
        created = httpx.post(
            f"{url}/api/keys",
            json={"role": "user", "name": "batch-team", "models": [SIM]},
            headers=cluster.admin_headers,
            timeout=30,
        )
        assert created.status_code == 201, created.text
        headers = {"Authorization": f"Bearer {created.json()['key']}"}
        content = _jsonl(_chat_line("allowed", "hello"), _chat_line("outside", "hello", model=PACED))
        uploaded = httpx.post(
            f"{url}/v1/files",
            headers=headers,
            files={"file": ("in.jsonl", content)},
            data={"purpose": "batch"},
        )
        assert uploaded.status_code == 200, uploaded.text
        body = {
            "input_file_id": uploaded.json()["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        }
        batch = httpx.post(f"{url}/v1/batches", headers=headers, json=body, timeout=30).json()
        assert httpx.get(f"{url}/v1/batches/{batch['id']}", timeout=30).status_code == 401  # no key: no batch

        def ended() -> bool:
            batch.update(httpx.get(f"{url}/v1/batches/{batch['id']}", headers=headers, timeout=30).json())
            return bool(batch["status"] == "completed")

        _wait(cluster, ended, "the key's batch to complete")
        assert batch["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
        error_file = f"{url}/v1/files/{batch['error_file_id']}/content"
        [refused] = [
            orjson.loads(line)
            for line in httpx.get(error_file, headers=headers, timeout=30).content.splitlines()
        ]
        assert refused["custom_id"] == "outside" and refused["response"]["status_code"] == 403
        assert refused["response"]["body"]["error"]["code"] == "model_not_allowed"
    finally:
        auth.stop()
