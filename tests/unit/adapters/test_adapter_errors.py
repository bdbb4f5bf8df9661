"""Adapters turn SDK exceptions into errors.py's (which class, which text, which cause); others pass unchanged.

No daemon, hub or server: each SDK raises from a stub or from httpx's MockTransport."""

from __future__ import annotations

import errno
import hashlib
import http.client
import re
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker.errors
import httpx
import openai
import pytest
import requests.exceptions
import urllib3.exceptions
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError, RemoteEntryNotFoundError, RepositoryNotFoundError

from kimik3_reconciler.adapters import hub_download, nvml, openai_chat, real_ports
from kimik3_reconciler.adapters.docker_engine import DockerEngine
from kimik3_reconciler.adapters.hf_hub import HuggingFaceHub
from kimik3_reconciler.adapters.nvml import nvml_dump
from kimik3_reconciler.adapters.translate import translated
from kimik3_reconciler.errors import (
    HubError,
    InputError,
    Kimik3Error,
    LocalFileError,
    PermanentError,
    TransientError,
)
from kimik3_reconciler.model.facts import RemoteFile
from kimik3_reconciler.ports import ChatRequest


def raising(exc: BaseException) -> Any:
    def fn(*_: Any, **__: Any) -> Any:
        raise exc

    return fn


# the shared context manager ----------------------------------------------------------------------


def only_lookup_errors(exc: Exception) -> Kimik3Error | None:
    return TransientError(f"translated: {exc}") if isinstance(exc, LookupError) else None


def test_translated_raises_the_translation_from_the_sdk_exception() -> None:
    cause = KeyError("k")
    with pytest.raises(TransientError, match="^translated: 'k'$") as caught, translated(only_lookup_errors):
        raise cause
    assert caught.value.__cause__ is cause


def test_translated_can_hide_the_cause() -> None:
    with pytest.raises(TransientError) as caught, translated(only_lookup_errors, hide_cause=True):
        raise KeyError("sk-secret")
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_translated_lets_unknown_exceptions_and_results_through() -> None:
    bug = ValueError("not a lookup")
    with pytest.raises(ValueError) as caught, translated(only_lookup_errors):
        raise bug
    assert caught.value is bug and caught.value.__cause__ is None
    with translated(only_lookup_errors):
        result = 42
    assert result == 42


# docker -------------------------------------------------------------------------------------------


def docker_error(cls: type[docker.errors.APIError], status: int, explanation: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code, response.url, response.reason = status, "http+docker://localhost/v1.47/x", "Reason"
    return cls(f"{status} Error", response, explanation=explanation)


def test_docker_connection_errors_are_transient() -> None:
    cut = requests.exceptions.ConnectionError("connection refused")
    with pytest.raises(TransientError, match="^docker daemon not answering: connection refused$") as caught:
        DockerEngine()._call(raising(cut))
    assert caught.value.__cause__ is cut


def test_docker_server_errors_are_transient_only_while_restarting_and_client_errors_permanent() -> None:
    busy = docker_error(docker.errors.APIError, 503, "the daemon is shutting down")
    with pytest.raises(TransientError, match="^docker daemon restarting: the daemon is shutting down$"):
        DockerEngine()._call(raising(busy))
    broken = docker_error(docker.errors.APIError, 500, "driver failed programming external connectivity")
    with pytest.raises(PermanentError, match="driver failed programming"):
        DockerEngine()._call(raising(broken))
    missing = docker_error(docker.errors.NotFound, 404, "no such image")
    refused = r'^docker: 404 Client Error for .*: Reason \("no such image"\)$'
    with pytest.raises(PermanentError, match=refused) as caught:
        DockerEngine()._call(raising(missing))
    assert caught.value.__cause__ is missing  # image_id and inspect_container read NotFound from the cause


def test_docker_not_found_reads_as_absent() -> None:
    """Reads through the SDK (DOCKER_HOST tcp/ssh, a named context); over the socket: test_docker_socket.py."""
    engine = DockerEngine()
    missing = docker_error(docker.errors.NotFound, 404, "no such object")
    engine._reads = SimpleNamespace(inspect_image=raising(missing), inspect_container=raising(missing))
    assert engine.image_id("nope:latest") is None and engine.inspect_container("nope") is None


def test_docker_errors_mid_build_stream_are_translated_and_others_pass_unchanged() -> None:
    def stream() -> Any:
        yield {"stream": "Step 1/9 : FROM base\n"}
        raise requests.exceptions.ConnectionError("daemon restarted")

    chunks = []
    with pytest.raises(TransientError, match="daemon restarted"):
        for chunk in DockerEngine()._stream(stream()):
            chunks.append(chunk)
    assert chunks == [{"stream": "Step 1/9 : FROM base\n"}]
    bug = KeyError("not an SDK error")
    with pytest.raises(KeyError) as caught:
        DockerEngine()._call(raising(bug))
    assert caught.value is bug


@pytest.mark.parametrize(
    "cut",
    [
        urllib3.exceptions.ProtocolError(
            "Connection broken: IncompleteRead(0 bytes read)", http.client.IncompleteRead(b"")
        ),
        requests.exceptions.ChunkedEncodingError("Connection broken: InvalidChunkLength(got length b'', 0 bytes read)"),
    ],
    ids=["urllib3 ProtocolError", "requests ChunkedEncodingError"],
)
def test_a_build_stream_cut_mid_answer_is_the_daemon_gone_not_a_traceback(cut: Exception) -> None:
    """What the SDK's stream really raises when dockerd's end goes mid-build (seen, issue 39): urllib3's own
    ProtocolError, which requests never wraps; it passed the translation unchanged and `apply --json` died with a
    traceback and an empty stdout."""

    def stream() -> Any:
        yield {"stream": "Step 2/3 : RUN make\n"}
        raise cut

    with pytest.raises(TransientError, match="^docker daemon not answering: .*Connection broken") as caught:
        list(DockerEngine()._stream(stream()))
    assert caught.value.__cause__ is cut


# huggingface_hub ----------------------------------------------------------------------------------


def hub_error(cls: type[HfHubHTTPError], status: int) -> HfHubHTTPError:
    return cls(f"{status} from the hub", response=SimpleNamespace(status_code=status, headers={}, request=None))


@pytest.fixture
def hub_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reachability probe's HEAD answers (no network in unit tests)."""
    monkeypatch.setattr(httpx, "head", lambda url, **_: httpx.Response(404))


HUB = "https://huggingface.co"


@pytest.mark.parametrize(
    ("raised", "text"),
    [
        (hub_error(RepositoryNotFoundError, 404), f"repository not found (or private without a token) at hub {HUB}"),
        (hub_error(RemoteEntryNotFoundError, 404), "path not found at this revision"),
        (httpx.ConnectError("refused"), f"hub {HUB} not reachable: refused"),
        (hub_error(HfHubHTTPError, 503), f"503 from the hub (hub {HUB})"),
        (hub_error(HfHubHTTPError, 429), "429 from the hub"),
        (hub_error(HfHubHTTPError, 400), "400 from the hub"),
    ],
)
def test_hub_errors_name_what_was_asked_and_the_hub(
    monkeypatch: pytest.MonkeyPatch, hub_answers: None, raised: Exception, text: str
) -> None:
    monkeypatch.setattr(HfApi, "list_repo_tree", raising(raised))
    with pytest.raises(HubError, match="^org/k3@abababababab:Q: " + re.escape(text)) as caught:
        HuggingFaceHub().list_files("org/k3", "ab" * 20, ["Q"], None)
    assert caught.value.exit_code == 6 and caught.value.__cause__ is raised
    with pytest.raises(HubError, match="^org/k3@abababababab: " + re.escape(text)):
        HuggingFaceHub().list_repo("org/k3", "ab" * 20, None)


def test_a_hub_refusing_connections_fails_after_one_short_retry_naming_its_url(monkeypatch: pytest.MonkeyPatch) -> None:
    probes = []

    def refused(url: str, **_: Any) -> httpx.Response:
        probes.append(url)
        raise httpx.ConnectError("[Errno 111] Connection refused")

    monkeypatch.setattr(httpx, "head", refused)
    monkeypatch.setattr(HfApi, "list_repo_tree", raising(AssertionError("huggingface_hub must not be asked")))
    with pytest.raises(
        HubError,
        match=r"^org/k3@abababababab:Q: hub http://127.0.0.1:9 not reachable: "
        r"\[Errno 111\] Connection refused \(tried twice\)$",
    ):
        HuggingFaceHub().list_files("org/k3", "ab" * 20, ["Q"], "http://127.0.0.1:9")
    assert probes == ["http://127.0.0.1:9"] * 2


def test_hub_header_read_unreachable_names_the_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpx, "get", raising(httpx.ConnectTimeout("timed out")))
    with pytest.raises(HubError, match="^org/k3:Q/a.gguf: hub http://hub.invalid not reachable: timed out$"):
        HuggingFaceHub().read_head("org/k3", "ab" * 20, "Q/a.gguf", "http://hub.invalid", 8)


def test_hub_errors_that_are_not_the_hubs_pass_unchanged(monkeypatch: pytest.MonkeyPatch, hub_answers: None) -> None:
    bug = AttributeError("not an SDK error")
    monkeypatch.setattr(HfApi, "list_repo_tree", raising(bug))
    with pytest.raises(AttributeError) as caught:
        HuggingFaceHub().list_repo("org/k3", "ab" * 20, None)
    assert caught.value is bug


# the downloader (httpx) ---------------------------------------------------------------------------


def download_target(tmp_path: Path) -> hub_download.Target:
    file = RemoteFile(path="Q/a.gguf", size=4, sha256=hashlib.sha256(b"abcd").hexdigest(), git_oid=None)
    (job,) = hub_download.targets("org/k3", "ab" * 20, (file,), "http://hub.test", tmp_path)
    job.blob.parent.mkdir(parents=True)
    return job


def append(job: hub_download.Target, handler: Any) -> None:
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        hub_download._append(client, job, hashlib.sha256(), lambda *_: None)


def fetch_with(job: hub_download.Target, handler: Any, parts: int = 1) -> int:
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        return hub_download.fetch(client, job, lambda *_: None, parts)


def refused_keeping_partial(job: hub_download.Target, handler: Any, held: int) -> None:
    """A two-range fetch of `job` whose hub refuses connections midway: HubError, saying the partial is kept with
    `held` of its 4 bytes."""
    with pytest.raises(
        HubError,
        match=rf"refused; the partial is kept for the next apply to resume: .*\.incomplete \({held} of 4 bytes\)$",
    ):
        fetch_with(job, handler, parts=2)


def test_download_dropped_connection_is_transient(tmp_path: Path) -> None:
    with pytest.raises(TransientError, match=r"^Q/a.gguf: ReadTimeout: too slow$"):
        append(download_target(tmp_path), raising(httpx.ReadTimeout("too slow")))


def test_a_hub_that_dies_mid_fetch_is_named_with_the_partial_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = download_target(tmp_path)
    monkeypatch.setattr(hub_download, "CHUNK", 2)  # bytes land 2 at a time (8 MiB in real downloads)
    served = []

    def dies_after_two_bytes(request: httpx.Request) -> httpx.Response:
        served.append(request.headers.get("Range"))
        if len(served) == 1:  # 2 of 4 bytes, then the connection drops; then the hub refuses connections
            return httpx.Response(200, content=body_then_reset())
        raise httpx.ConnectError("[Errno 111] Connection refused")

    def body_then_reset():  # noqa: ANN202
        yield b"ab"
        raise httpx.ReadError("connection reset by peer")

    with httpx.Client(transport=httpx.MockTransport(dies_after_two_bytes)) as client:
        with pytest.raises(
            HubError,
            match=r"^Q/a.gguf: download from the hub http://hub.test failed: .*Connection "
            r"refused; the partial is kept for the next apply to resume: .*\.incomplete \(2 of 4 bytes\)$",
        ):
            hub_download.fetch(client, job, lambda *_: None)
    # a dropped connection is resumed; a refused one ends it at once (a down hub: no 6 rounds of backoff)
    assert served == [None, "bytes=2-"]
    assert job.partial.read_bytes() == b"ab"


def test_download_disk_full_says_what_is_kept_and_other_os_errors_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = download_target(tmp_path)
    full = OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(hub_download, "open", raising(full), raising=False)
    # a local disk's fault, not the hub's or the file's: exit 8 as every full disk (README's exit codes), not 1;
    # the first write failed, so there is no partial to keep (it said "the partial download is kept")
    with pytest.raises(
        LocalFileError,
        match=r"disk full in .*blobs \[errno ENOSPC\]; nothing of it was downloaded, "
        r"so no partial is kept: free space and run apply again$",
    ) as caught:
        fetch_with(job, lambda request: httpx.Response(200, content=b"abcd"))
    assert caught.value.__cause__ is full and caught.value.exit_code == 8 and not job.partial.exists()
    job.partial.write_bytes(b"ab")  # a partial an earlier apply left: resumed, then the disk fills on appending
    monkeypatch.setattr(
        hub_download,
        "open",
        lambda path, mode="r", *a: (_ for _ in ()).throw(full) if mode == "ab" else open(path, mode, *a),
        raising=False,
    )
    with pytest.raises(
        LocalFileError,
        match=r"ENOSPC\]; the partial is kept for the next apply to resume: "
        r".*\.incomplete \(2 of 4 bytes\): free space and run apply again$",
    ):
        fetch_with(job, lambda request: httpx.Response(206, content=b"cd"))
    job.partial.unlink()
    denied = PermissionError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(hub_download, "open", raising(denied), raising=False)
    with pytest.raises(PermissionError) as passed:
        append(job, lambda request: httpx.Response(200, content=b"abcd"))
    assert passed.value is denied


def test_download_workers_are_read_when_ports_are_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIMIK3_DOWNLOAD_WORKERS", raising=False)
    assert real_ports(tmp_path).hub.download_workers == 4
    monkeypatch.setenv("KIMIK3_DOWNLOAD_WORKERS", "7")
    assert real_ports(tmp_path).hub.download_workers == 7
    for bad in ("lots", "0", "-2"):  # 0 and negatives were taken as 1 without a word
        monkeypatch.setenv("KIMIK3_DOWNLOAD_WORKERS", bad)
        with pytest.raises(InputError, match=f"KIMIK3_DOWNLOAD_WORKERS='{bad}' refused"):
            real_ports(tmp_path)


# openai (llama-server's chat API) -----------------------------------------------------------------


def chat_server(monkeypatch: pytest.MonkeyPatch, handler: Any) -> None:
    def client(base_url: str, api_key: str | None) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{base_url}/v1",
            api_key=api_key or "no-key",
            max_retries=0,
            http_client=httpx.Client(transport=httpx.MockTransport(handler)),
        )

    monkeypatch.setattr(openai_chat, "_client", client)


def test_chat_status_errors_are_permanent_with_the_servers_message_and_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    chat_server(
        monkeypatch,
        lambda request: httpx.Response(
            401, json={"error": {"message": f"bad key {request.headers['authorization'][7:]}"}}
        ),
    )
    with pytest.raises(PermanentError, match=r"^http://llm: HTTP 401: bad key \*\*\*$") as caught:
        openai_chat.OpenAIChat().models("http://llm", "sk-secret")
    assert type(caught.value) is PermanentError
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # the SDK's error holds the key


def test_chat_unreachable_is_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    chat_server(monkeypatch, raising(httpx.ConnectError("refused")))
    with pytest.raises(TransientError, match="^http://llm: Connection error.$") as caught:
        openai_chat.OpenAIChat().chat(ChatRequest("http://llm", "sk-secret", [{"role": "user", "content": "hi"}]))
    assert caught.value.__cause__ is None


def test_chat_body_that_is_not_json_is_permanent(monkeypatch: pytest.MonkeyPatch) -> None:
    chat_server(monkeypatch, lambda request: httpx.Response(200, text="<html>proxy</html>"))
    with pytest.raises(PermanentError, match="^http://llm: JSONDecodeError: "):
        openai_chat.OpenAIChat().models("http://llm", None)


# NVML: a failure is a fact (0 GPUs), not an exception -------------------------------------------


def test_nvml_failure_is_a_fact_and_nvml_is_shut_down(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    fake = SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlSystemGetDriverVersion=lambda: "580.1",
        nvmlSystemGetCudaDriverVersion=lambda: 13000,
        nvmlDeviceGetCount=raising(RuntimeError("GPU is lost")),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(nvml, "_library_loads", lambda: True)  # a host with the library: pynvml is asked
    assert nvml_dump() == {"error": "RuntimeError: GPU is lost"} and calls == ["init", "shutdown"]
    monkeypatch.setattr(fake, "nvmlInit", raising(OSError("libnvidia-ml.so.1: cannot open")))
    assert nvml_dump() == {"error": "OSError: libnvidia-ml.so.1: cannot open"}


def test_without_the_nvml_library_the_fact_is_pynvmls_own_error_without_importing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ctypes pre-check answers as pynvml.nvmlInit() would on a host without libnvidia-ml.so.1."""
    import pynvml

    monkeypatch.setattr(nvml, "LIBRARY", "libkimik3-no-such-nvml.so.1")
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", raising(OSError("libnvidia-ml.so.1: cannot open shared object file")))
    with pytest.raises(pynvml.NVMLError) as real:
        pynvml.nvmlInit()
    assert nvml_dump() == {"error": f"{type(real.value).__name__}: {real.value}"} == {"error": nvml.LIBRARY_NOT_FOUND}


@pytest.mark.parametrize("parts", [1, 2], ids=["one-connection", "ranges"])
def test_a_hub_down_before_the_first_byte_says_no_partial_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: int
) -> None:
    """Held-back review (issue 30): with the hub down, the error said "the partial is kept for the next apply to
    resume: …incomplete (0 of N bytes)" and no such file existed; over ranges, the partial is sized to the whole file
    up front, so it said N of N bytes of a file holding nothing. Now what is on disk decides what is said."""
    monkeypatch.setattr(hub_download, "MIN_RANGE", 2)  # the 4-byte file is "large": two ranges

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused")

    job = download_target(tmp_path)
    with pytest.raises(
        HubError,
        match=r"^Q/a.gguf: download from the hub http://hub.test failed: .*Connection refused; "
        r"nothing of it was downloaded, so no partial is kept$",
    ):
        fetch_with(job, down, parts)
    assert list(job.blob.parent.iterdir()) == []  # no empty or sized-but-unwritten partial, no ranges record


def test_a_ranged_partial_is_named_with_the_bytes_its_record_holds_not_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hub_download, "MIN_RANGE", 2)

    def first_range_only(request: httpx.Request) -> httpx.Response:
        if request.headers["Range"] == "bytes=0-1":
            return httpx.Response(206, content=b"ab")
        raise httpx.ConnectError("[Errno 111] Connection refused")

    job = download_target(tmp_path)
    refused_keeping_partial(job, first_range_only, held=2)
    assert job.partial.stat().st_size == 4  # sized up front: its size is not what it holds
    assert fetch_with(job, lambda request: httpx.Response(206, content=b"cd"), parts=2) == 2  # resumed: the rest only


def test_a_range_cut_short_of_its_first_mib_keeps_and_names_what_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38 item 9: a range records what it wrote per MiB; bytes written since its last MiB were left out when
    the connection dropped, so a hub dying in a range's first MiB was reported as "nothing of it was downloaded"."""
    monkeypatch.setattr(hub_download, "MIN_RANGE", 2)

    def one_byte_then_down(request: httpx.Request) -> httpx.Response:
        if request.headers["Range"] == "bytes=0-1":

            def body():  # noqa: ANN202
                yield b"a"
                raise httpx.ReadError("connection reset by peer")

            return httpx.Response(206, content=body())
        raise httpx.ConnectError("[Errno 111] Connection refused")

    job = download_target(tmp_path)
    refused_keeping_partial(job, one_byte_then_down, held=1)
    asked = []

    def serves(request: httpx.Request) -> httpx.Response:  # the hub back: each range from where its record says
        asked.append(request.headers["Range"])
        first, last = map(int, request.headers["Range"].removeprefix("bytes=").split("-"))
        return httpx.Response(206, content=b"abcd"[first : last + 1])

    assert fetch_with(job, serves, parts=2) == 3 and sorted(asked) == ["bytes=1-1", "bytes=2-3"]
    assert job.blob.read_bytes() == b"abcd"
