"""Smoke test: serve the engine's tiny generated model (llama.cpp: a kimi-k3 GGUF) from the new image, /health 200
and one chat."""

from __future__ import annotations

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.base import SmokeModel
from kimik3_reconciler.errors import LoadFailed, PermanentError, SmokeFailed, TransientError
from kimik3_reconciler.model.labels import SMOKE_MOUNT
from kimik3_reconciler.model.records import smoke_key
from kimik3_reconciler.model.specs import ContainerSpec, HealthWait, Mount, SmokeTest
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.health import wait_until_healthy
from kimik3_reconciler.steps.report import Reporter

SMOKE_TIMEOUT_S = 180.0
MODEL_KEY = "smoke-model"


def _tiny_model(ports: Ports, smoke: SmokeModel) -> str:
    """The tiny model lives in the state dir, generated once (deterministic; llama.cpp's: ~2.4 MB, 2 shards); the
    state port renames it into place only when complete, so an interrupted generation leaves nothing."""
    folder = ports.state.artifact(MODEL_KEY)
    if folder is not None and not (folder / smoke.entry).is_file():
        ports.state.discard(MODEL_KEY)  # not the model this kimik3 writes (another version's layout)
    return str(ports.state.produce(MODEL_KEY, smoke.write))


def smoke_test(spec: SmokeTest, ports: Ports, reporter: Reporter) -> None:
    engine = engine_for(spec.engine)  # the registry: whose tiny model the image serves
    smoke = engine.smoke
    assert smoke is not None  # planned for an engine that has one (planning/smoke_step.py)
    port = ports.http.free_port()
    container = ContainerSpec(
        name=spec.container,
        image=spec.image,
        command=(*spec.command, "--host", "127.0.0.1", "--port", str(port)),
        env=(),
        mounts=(Mount(_tiny_model(ports, smoke), SMOKE_MOUNT, read_only=True),),
        gpus=spec.gpus,
        labels=spec.labels,
        restart_policy="no",
        gpu_request=spec.gpu_request,
    )
    ports.docker.remove_container(spec.container)  # a leftover of an interrupted smoke test
    record = {"image": spec.image, "date": ports.clock.now().isoformat(timespec="seconds")}
    try:
        ports.docker.run_container(container)
        wait_until_healthy(
            HealthWait(
                spec.container, f"http://127.0.0.1:{port}{engine.readiness.path}", SMOKE_TIMEOUT_S, engine=engine.name
            ),
            ports,
            reporter,
        )
        answer = ports.http.chat(f"http://127.0.0.1:{port}", "kimik3-smoke", "Hello", None)
    except TransientError:
        raise  # the daemon hiccuped: says nothing about the image, record nothing
    except (LoadFailed, PermanentError, Exception) as exc:  # noqa: BLE001 - any failure fails the image
        detail = str(exc).splitlines()[0][:200]
        ports.state.write(smoke_key(spec.image_fingerprint), {**record, "passed": False, "detail": detail})
        raise SmokeFailed(
            f"image {spec.image} failed its smoke test: {detail}",
            getattr(exc, "log_tail", "") or ports.docker.container_logs(spec.container, 20),
        ) from exc
    finally:
        ports.docker.remove_container(spec.container)
    ports.state.write(
        smoke_key(spec.image_fingerprint), {**record, "passed": True, "detail": f"answered {answer!r}"[:200]}
    )
    reporter.event("smoke-passed", image=spec.image)
