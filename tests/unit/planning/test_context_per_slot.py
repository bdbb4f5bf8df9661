"""Issue 27 item 1: llama-server gives each of --parallel slots ctx_size/parallel tokens (without --kv-unified),
and seed 001's 131,072 is per request. serve.ctx_size stays the total (llama.cpp's -c, the name users write);
omitted, it is 131,072 per slot x parallel, each slot capped at the trained context (the GGUF header's when
read). The plan says what each request gets; the gate refuses a slot above the header's trained context and a
KV cache that cannot fit the GPUs with the dense weights (with the value that fits)."""

from __future__ import annotations

from support.observed import model_fact, observed
from support.recorded_hosts import h200_host, seed000_host

from kimik3_reconciler.engines.llamacpp.memory_gate import context_refusals
from kimik3_reconciler.engines.llamacpp.vram_fit import context_note, context_total
from kimik3_reconciler.model.facts import ModelLayout
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning.launch import render_launch

GIB = 1 << 30


def profile(serve: str = "{}", quant: str = "UD-Q2_K_XL", gpus: str = "all"):
    return parse_profile(f"""
apiVersion: kimik3/v1
name: kimi-k3
model: {{repo: unsloth/Kimi-K3-GGUF, revision: 0123456789abcdef0123456789abcdef01234567, quant: {quant}}}
build: {{source: mainline, cuda_architectures: ["120"]}}
gpus: {gpus}
serve: {serve}
""").profile


def layout(kv_bytes_per_token: int, context_length: int, expert_gib: float = 700, dense_gib: float = 90) -> ModelLayout:
    """A Kimi-K3-sized layout in 60 layers (the bytes made up; the shape is what the gate reads)."""
    n = 60
    return ModelLayout(
        n_layer=n,
        layer_dense=(int(dense_gib * GIB / n),) * n,
        layer_experts=(int(expert_gib * GIB / n),) * n,
        output_bytes=2 * GIB,
        token_embd_bytes=2 * GIB,
        kv_bytes_per_token=kv_bytes_per_token,
        context_length=context_length,
        n_embd=7168,
        n_vocab=163840,
        state_bytes_per_slot=0,
    )


def test_the_default_gives_each_request_seed_001s_131072_tokens() -> None:
    eight, two = profile(), profile("{parallel: 2}")
    assert eight.serve.ctx_size is None and eight.ctx_size_for() == 8 * 131072 and eight.slot_context() == 131072
    assert two.ctx_size_for() == 2 * 131072
    written = profile("{ctx_size: 131072}")  # the old default, written: 16,384 a request, as llama.cpp splits it
    assert written.ctx_size_for() == 131072 and written.slot_context() == 16384
    # The launch passes the total as -c and the slots as --parallel.
    host = seed000_host()
    files = model_fact(eight, shards=2, size=401 * GIB)
    argv = render_launch(eight, observed(eight, host=host, model=files), "img:t", "fp").spec.command
    assert argv[argv.index("--ctx-size") + 1] == "1048576" and argv[argv.index("--parallel") + 1] == "8"


def test_the_trained_context_in_the_header_caps_the_default_and_refuses_a_written_slot_above_it() -> None:
    """The tiny demo model's header says 4096: the default gives each slot 4096, not 131,072."""
    tiny = layout(1152 * 2, 4096, expert_gib=0.001, dense_gib=0.001)
    default = profile()
    seen = observed(default, host=h200_host(1), model=model_fact(default), layout=tiny)
    assert context_total(default, seen) == 8 * 4096
    assert context_note(default, seen).startswith(
        "each request gets 4,096 tokens (the default: seed 001's 131,072 a request, capped at the trained 4,096, x 8 "
        "slots = -c 32,768); KV cache "
    )
    written = profile("{ctx_size: 65536, parallel: 8}")
    assert context_refusals(written, observed(written, host=h200_host(1), model=model_fact(written), layout=tiny)) == [
        "serve.ctx_size 65,536 over serve.parallel 8 slots is 8,192 tokens a request, above this model's trained "
        "context of 4,096 (its GGUF header); llama.cpp would only warn: write at most 32,768"
    ]


def test_a_kv_cache_the_gpus_cannot_hold_is_refused_with_the_context_that_fits() -> None:
    """--fit moves only experts to the CPU and an explicit -c is never shrunk: the dense weights, the KV cache
    and the buffers must fit the GPUs. One H200 (~140 GiB) with 90 GiB of dense weights has ~48 GiB left."""
    heavy = layout(64 * 1024, 1_048_576)  # 64 KiB a token: 131,072 tokens x 8 slots = 64 GiB of KV
    default = profile(gpus="[0]")
    host = h200_host(1, ram_total=1 << 40)
    seen = observed(default, host=host, model=model_fact(default, shards=2, size=396 * GIB), layout=heavy)
    (refused,) = context_refusals(default, seen)
    assert refused.startswith(
        "the default context (131,072 a request, seed 001, x 8 slots) needs a KV cache of 64.0 "
        "GiB (65,536 bytes a token, from the GGUF headers)"
    )
    fits = int(refused.rsplit("write serve.ctx_size <= ", 1)[1].split(" ")[0].replace(",", ""))
    assert 0 < fits < 8 * 131072
    smaller = profile(f"{{ctx_size: {fits}}}", gpus="[0]")
    assert (
        context_refusals(
            smaller, observed(smaller, host=host, model=model_fact(smaller, shards=2, size=396 * GIB), layout=heavy)
        )
        == []
    )
    # The seed's host holds it: eight RTX PRO 6000 have room for the dense weights and 64 GiB of KV.
    eight = profile()
    assert (
        context_refusals(
            eight, observed(eight, host=seed000_host(), model=model_fact(eight, shards=2, size=396 * GIB), layout=heavy)
        )
        == []
    )


def test_the_kv_cache_of_the_default_moves_experts_to_ram() -> None:
    """The KV cache of 131,072 tokens a request is counted in the split: more KV on the GPUs, more experts in RAM."""
    from kimik3_reconciler.engines.llamacpp.vram_fit import derive_mode

    heavy = layout(64 * 1024, 1_048_576)
    host = seed000_host()
    small, default = profile("{ctx_size: 131072}"), profile()
    files = model_fact(default, shards=2, size=396 * GIB)
    ram = [
        derive_mode(p, observed(p, host=host, model=files, layout=heavy)).estimate_bytes
        or derive_mode(p, observed(p, host=host, model=files, layout=heavy)).cpu_bytes
        for p in (small, default)
    ]
    assert ram[1] - ram[0] == 7 * 131072 * 64 * 1024  # the seven slots' KV more


def test_the_forecast_says_when_the_gate_counts_the_seeds_measured_ram() -> None:
    """Issue 27 item 2: the forecast's RAM is an aggregate estimate; on the seed's host the gate counts the ~130 GiB
    the seed measured for UD-Q2_K_XL, and the forecast line says so rather than show a smaller figure alone."""
    from kimik3_reconciler.engines.llamacpp.placement import forecast

    light = layout(1152, 1_048_576, expert_gib=712, dense_gib=82)  # 802 GiB in all, a small KV cache
    q2 = profile()
    seen = observed(q2, host=seed000_host(), model=model_fact(q2, shards=2, size=401 * GIB), layout=light)
    (line, *_) = forecast(q2, seen).lines()
    assert line.startswith("placement forecast: hybrid")
    assert "(the sizing gate counts 130.0 GiB: seed 000 step 2 measured ~130 GiB on 8x RTX PRO 6000" in line


def test_the_context_memory_from_the_header_is_what_the_real_server_allocated(tmp_path) -> None:
    """Against llama-server b11434's own log (tests/fixtures/demo/kv-cache-c8192-np2.log: the demo's tiny model,
    -c 8192 -np 2): the f16 MLA K cache of the whole -c (18.00 MiB) and the KDA layers' F32 recurrent state per
    slot (R 0.01 + S 0.02 MiB for 2 slots), from the GGUF header kimik3 reads."""
    import re
    from pathlib import Path

    from kimik3_reconciler.engines.llamacpp.gguf_header import parse_gguf_header, summarize
    from kimik3_reconciler.engines.llamacpp.smoke_model import write_tiny_kimi_k3

    log = (Path(__file__).resolve().parents[2] / "fixtures" / "demo" / "kv-cache-c8192-np2.log").read_text()
    kv_mib = float(re.search(r"llama_kv_cache: size = +([\d.]+) MiB", log).group(1))
    r_mib, s_mib = (float(x) for x in re.search(r"R \(f32\): +([\d.]+) MiB, S \(f32\): +([\d.]+) MiB", log).groups())
    shards = write_tiny_kimi_k3(tmp_path, "Kimi-K3-tiny-UD-Q2_K_XL", shards=2, seed=0)
    tiny = summarize([parse_gguf_header(p.read_bytes()) for p in shards])
    assert tiny.context_length == 4096
    assert 8192 * tiny.kv_bytes_per_token / (1 << 20) == kv_mib
    state_mib = 2 * tiny.state_bytes_per_slot / (1 << 20)  # the log rounds each part to 0.01 MiB
    assert abs(state_mib - (r_mib + s_mib)) <= 0.01
    seen = observed(profile("{ctx_size: 8192, parallel: 2}"), host=h200_host(1), layout=tiny)
    from kimik3_reconciler.engines.llamacpp.vram_fit import memory_per_context

    assert (
        memory_per_context(profile("{ctx_size: 8192, parallel: 2}"), seen)
        == 8192 * tiny.kv_bytes_per_token + 2 * tiny.state_bytes_per_slot
    )
