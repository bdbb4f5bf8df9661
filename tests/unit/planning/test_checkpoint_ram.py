"""The slots' context checkpoints in the sizing gate (engines/llamacpp/host_ram.py, memory_gate.py): each figure below
is derived by hand in its test's docstring, then checked against what kimik3 computes."""

from __future__ import annotations

from pathlib import Path

from support.observed import model_fact, observed
from support.recorded_hosts import seed000_host

from kimik3_reconciler.engines.llamacpp.gguf_header import parse_gguf_header, summarize
from kimik3_reconciler.engines.llamacpp.host_ram import checkpoint_memory, ctx_checkpoints
from kimik3_reconciler.engines.llamacpp.memory_gate import memory_findings
from kimik3_reconciler.engines.llamacpp.placement import forecast
from kimik3_reconciler.engines.llamacpp.recurrent_state import KIMI_K3_ASSUMED, kda_layer_state_bytes
from kimik3_reconciler.engines.llamacpp.smoke_model import TinyDims, write_tiny_kimi_k3
from kimik3_reconciler.model.facts import ModelLayout
from kimik3_reconciler.model.profile_source import parse_profile

GIB, MIB = 1 << 30, 1 << 20


def profile(serve: str = "{}", repo: str = "unsloth/Kimi-K3-GGUF"):
    return parse_profile(f"""
apiVersion: kimik3/v1
name: kimi-k3
model: {{repo: {repo}, revision: 0123456789abcdef0123456789abcdef01234567, quant: UD-Q2_K_XL}}
build: {{source: mainline, cuda_architectures: ["120"]}}
gpus: all
serve: {serve}
""").profile


def layout(state: int) -> ModelLayout:
    """A Kimi-K3-sized layout in 60 layers (bytes made up), with `state` bytes of recurrent state a sequence."""
    n = 60
    return ModelLayout(
        n_layer=n,
        layer_dense=(int(90 * GIB / n),) * n,
        layer_experts=(int(700 * GIB / n),) * n,
        output_bytes=2 * GIB,
        token_embd_bytes=2 * GIB,
        kv_bytes_per_token=27648,
        context_length=1_048_576,
        n_embd=7168,
        n_vocab=163840,
        state_bytes_per_slot=state,
    )


def test_kimi_k3s_assumed_state_and_eight_slots_of_32_checkpoints() -> None:
    """By hand, for the assumed shape (69 KDA layers, 32 heads of 128, conv 4), one layer's F32 state:
    conv 3 x (4 - 1) x (32 x 128) = 36,864 floats, delta state 128 x 128 x 32 = 524,288 floats: 561,152 floats,
    2,244,608 bytes; x 69 layers = 154,877,952 bytes = 147.7 MiB a sequence (session 15's figure).
    8 slots x 32 checkpoints x 154,877,952 = 39,648,755,712 bytes = 36.9 GiB."""
    assert kda_layer_state_bytes(32, 128, 4) == 2_244_608
    assert KIMI_K3_ASSUMED.state_bytes == 154_877_952
    seen = observed(profile(), host=seed000_host(), model=model_fact(profile(), shards=2, size=401 * GIB))
    memory = checkpoint_memory(profile(), seen)
    assert (memory.slots, memory.per_slot, memory.state_bytes) == (8, 32, 154_877_952)
    assert memory.total == 39_648_755_712
    assert "36.9 GiB" in memory.words() and "assumed until the GGUF headers are read" in memory.words()


def test_the_state_comes_from_the_gguf_headers_once_read(tmp_path: Path) -> None:
    """A tiny kimi-k3 written with 4 heads of 128 and conv 4, 6 layers (KDA at 0, 2, 4: three KDA layers).
    By hand a KDA layer holds conv 3 x 3 x (4 x 128) = 4,608 floats and 128 x 128 x 4 = 65,536 floats: 70,144
    floats, 280,576 bytes; x 3 layers = 841,728 bytes a sequence (0.8 MiB). With serve.parallel 2 and
    --ctx-checkpoints 5: 2 x 5 x 841,728 = 8,417,280 bytes."""
    dims = TinyDims(n_head=4, kda_head_dim=128)
    shards = write_tiny_kimi_k3(tmp_path, "Kimi-K3-tiny-UD-Q2_K_XL", shards=1, layers=6, dims=dims)
    tiny = summarize([parse_gguf_header(p.read_bytes()) for p in shards])
    assert tiny.state_bytes_per_slot == 841_728
    p = profile('{parallel: 2, extra_args: ["--ctx-checkpoints", "5"]}')
    memory = checkpoint_memory(p, observed(p, host=seed000_host(), layout=tiny))
    assert memory.total == 8_417_280 and "from the GGUF headers" in memory.words()


def test_the_count_is_llama_servers_own_reading_of_the_profile() -> None:
    """Every spelling llama-server takes (common/arg.cpp: -ctxcp, --ctx-checkpoints, --swa-checkpoints, `=value`);
    the command line wins over serve.env's LLAMA_ARG_CTX_CHECKPOINTS; the last of several wins; a value llama-server
    would refuse at start leaves the default counted."""
    assert ctx_checkpoints(profile()) == (32, "llama-server's default --ctx-checkpoints")
    assert ctx_checkpoints(profile('{extra_args: ["-ctxcp", "4"]}'))[0] == 4
    assert ctx_checkpoints(profile('{extra_args: ["--swa-checkpoints=6"]}'))[0] == 6
    assert ctx_checkpoints(profile('{extra_args: ["--ctx-checkpoints", "4", "--ctx-checkpoints", "2"]}'))[0] == 2
    assert ctx_checkpoints(profile('{env: {LLAMA_ARG_CTX_CHECKPOINTS: "3"}}')) == (
        3,
        "serve.env LLAMA_ARG_CTX_CHECKPOINTS",
    )
    both = profile('{env: {LLAMA_ARG_CTX_CHECKPOINTS: "3"}, extra_args: ["--ctx-checkpoints", "1"]}')
    assert ctx_checkpoints(both) == (1, "--ctx-checkpoints in serve.extra_args")
    assert ctx_checkpoints(profile('{extra_args: ["--ctx-checkpoints", "many"]}'))[0] == 32
    assert ctx_checkpoints(profile('{extra_args: ["--ctx-checkpoints"]}'))[0] == 32  # no value: llama-server refuses


def test_a_model_without_recurrent_layers_counts_nothing_and_its_gate_is_unchanged() -> None:
    """A layout whose headers list no KDA layer (state 0): 0 bytes of checkpoints, and the gate's answer is the
    same whatever --ctx-checkpoints says (the sum it judges is the CPU experts + headroom + the prompt cache)."""
    host = seed000_host(ram_total=150 * GIB, ram_available=150 * GIB)

    def findings(serve: str):
        p = profile(serve)
        return memory_findings(
            p, observed(p, host=host, layout=layout(0), model=model_fact(p, shards=2, size=401 * GIB)), False
        )

    plain = findings("{}")
    assert plain == findings('{extra_args: ["--ctx-checkpoints", "0"]}')
    assert not any("checkpoints" in line for line in plain[0] + plain[1])
    memory = checkpoint_memory(profile(), observed(profile(), host=host, layout=layout(0)))
    assert memory.total == 0 and "no recurrent layers" in memory.words()


def test_a_model_kimik3_does_not_know_counts_nothing_before_its_headers() -> None:
    """Not unsloth's Kimi-K3 repo (the demo's tiny model) and no headers read: its shape is unknown, so nothing is
    assumed (Kimi-K3's 36.9 GiB would refuse the demo on a 23 GiB machine)."""
    demo = profile(repo="kimik3-demo/Kimi-K3-tiny-GGUF")
    memory = checkpoint_memory(demo, observed(demo, host=seed000_host()))
    assert memory.total == 0 and "not known until the GGUF headers are read" in memory.words()


def test_the_gate_refuses_what_the_checkpoints_push_over_and_names_the_knobs() -> None:
    """GGUF headers with Kimi-K3's assumed state (154,877,952 bytes): 8 slots x 32 = 36.9 GiB on top of the CPU
    experts and the 8 GiB prompt cache. The same host passes with --ctx-checkpoints 4 (8 x 4 x 147.7 MiB = 4.6 GiB:
    36.9 - 4.6 = 32.3 GiB less), and with serve.parallel 1 (1 x 32: 4.6 GiB, and 1/8 of the KV cache)."""
    state = KIMI_K3_ASSUMED.state_bytes

    def findings(serve: str, ram_gib: int):
        p = profile(serve)
        host = seed000_host(ram_total=ram_gib * GIB, ram_available=ram_gib * GIB)
        seen = observed(p, host=host, layout=layout(state), model=model_fact(p, shards=2, size=401 * GIB))
        return memory_findings(p, seen, ours_running=False)

    big = findings("{}", 1024)
    assert big == ([], [])
    (refused,), _ = findings("{}", 160)
    assert "the slots' context checkpoints 36.9 GiB (serve.parallel 8 x 32" in refused
    assert "from the GGUF headers" in refused
    assert "fewer slots (serve.parallel) or checkpoints (--ctx-checkpoints N in serve.extra_args)" in refused
    need = float(refused.split(" = ")[-1].split(" GiB")[0])
    without = need - 36.9
    room = int(without + 6)  # holds the rest and 4.6 GiB of checkpoints, not 36.9
    assert findings("{}", room)[0]
    assert findings('{extra_args: ["--ctx-checkpoints", "4"]}', room) == ([], [])
    assert findings("{parallel: 1}", room) == ([], [])


def test_the_plan_shows_the_checkpoints_as_their_own_line() -> None:
    """The placement forecast's lines (what `kimik3 plan` prints) name the prompt cache and the checkpoints."""
    p = profile()
    seen = observed(p, host=seed000_host(), layout=layout(KIMI_K3_ASSUMED.state_bytes))
    lines = forecast(p, seen).lines()
    assert any(line.strip().startswith("host RAM: the prompt cache 8.0 GiB") for line in lines)
    (line,) = [line for line in lines if "context checkpoints" in line]
    assert line.strip().startswith("host RAM: the slots' context checkpoints 36.9 GiB (serve.parallel 8 x 32")
    zero = forecast(p, observed(p, host=seed000_host(), layout=layout(0))).lines()
    assert any("the context checkpoints 0 B (the GGUF headers list no recurrent layers)" in line for line in zero)
