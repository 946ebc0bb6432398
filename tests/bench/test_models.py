"""Random-weight presets: written for real, loaded by transformers, sizes from configs/headers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.core.errors import UserError
from bench.core.schema import ModelInfo
from bench.engines import models
from bench.engines.models import (
    PRESETS,
    canonical_model,
    ensure_preset,
    first_shard_sha256,
    model_context,
    parameter_count,
    preset_info,
    preset_name,
    resolve_model,
    safetensors_parameter_count,
    weight_bytes,
)

PYTHON_SNIPPET = "def mean(values):\n    return sum(values) / len(values)  # average\n"


def test_tiny_llama_loads_with_transformers_and_matching_tokenizer(tiny_llama: ModelInfo) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_llama.path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama.path)
    assert len(tokenizer) == model.config.vocab_size == tiny_llama.vocab_size == 32000
    assert {tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token, tokenizer.pad_token} == {
        "<s>",
        "</s>",
        "<unk>",
        "<pad>",
    }
    assert tokenizer.pad_token_id == model.config.pad_token_id
    assert tokenizer.eos_token_id == model.config.eos_token_id
    ids = tokenizer(PYTHON_SNIPPET).input_ids
    assert tokenizer.unk_token_id not in ids
    # Byte-level BPE: real text round-trips and is compressed well below one token per byte.
    assert tokenizer.decode(ids, skip_special_tokens=True) == PYTHON_SNIPPET
    assert len(ids) < len(PYTHON_SNIPPET) / 2
    assert tiny_llama.parameters == sum(p.numel() for p in model.parameters())
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=8, min_new_tokens=8, do_sample=False
        )
        logits = model(out).logits
    assert out.shape[1] == len(ids) + 8
    assert torch.isfinite(logits).all()


def test_tiny_llama_bf16_stays_finite() -> None:
    import torch
    from transformers import AutoModelForCausalLM

    info = resolve_model("tiny-llama", dtype="bfloat16")
    model = AutoModelForCausalLM.from_pretrained(info.path, dtype=torch.bfloat16)
    with torch.inference_mode():
        logits = model(torch.arange(4, 132).unsqueeze(0)).logits
    assert torch.isfinite(logits).all()
    assert info.weight_bytes == info.parameters * 2


def test_checkpoint_files_and_config(tiny_llama: ModelInfo) -> None:
    model_dir = Path(tiny_llama.path)
    config = json.loads((model_dir / "config.json").read_text())
    assert config["torch_dtype"] == "float32"
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["max_position_embeddings"] >= 2048
    for name in (
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    ):
        assert (model_dir / name).exists(), name
    assert safetensors_parameter_count(model_dir) == tiny_llama.parameters
    assert not list(model_dir.parent.glob(".tmp-*"))  # no staging leftovers


def test_same_seed_same_weights_other_seed_differs(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ADVISOR_MODEL_CACHE", str(tmp_path))
    first = ensure_preset("tiny-bert", seed=3, dtype="float32")
    digest = first_shard_sha256(first)
    import shutil

    shutil.rmtree(first)
    again = ensure_preset("tiny-bert", seed=3, dtype="float32")
    assert first_shard_sha256(again) == digest
    other = ensure_preset("tiny-bert", seed=4, dtype="float32")
    assert first_shard_sha256(other) != digest


def test_ensure_preset_writes_once(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ADVISOR_MODEL_CACHE", str(tmp_path))
    model_dir = ensure_preset("tiny-vit", dtype="float32")
    stamp = (model_dir / "model.safetensors").stat().st_mtime_ns

    def must_not_write(*args, **kwargs):
        raise AssertionError("checkpoint written twice")

    monkeypatch.setattr(models, "_write_random_checkpoint", must_not_write)
    assert ensure_preset("tiny-vit", dtype="float32") == model_dir
    assert (model_dir / "model.safetensors").stat().st_mtime_ns == stamp


def test_failed_write_leaves_no_checkpoint(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ADVISOR_MODEL_CACHE", str(tmp_path))

    def crash(*args, **kwargs):
        raise RuntimeError("disk full (simulated)")

    monkeypatch.setattr(models, "_write_random_checkpoint", crash)
    with pytest.raises(RuntimeError):
        ensure_preset("tiny-resnet", dtype="float32")
    assert list(tmp_path.iterdir()) == []


def test_forward_presets_load_and_run(tiny_bert, tiny_resnet, tiny_vit) -> None:
    import torch

    from bench.engines.models import load_config, model_class_for

    for info in (tiny_bert, tiny_resnet, tiny_vit):
        assert info.kind == "forward"
        config = load_config(info.path)
        model = model_class_for(config).from_pretrained(info.path).eval()
        assert sum(p.numel() for p in model.parameters()) == info.parameters
        with torch.inference_mode():
            if info.architecture == "BertModel":
                out = model(input_ids=torch.randint(0, config.vocab_size, (2, 16)))
                values = out.last_hidden_state
            else:
                size = getattr(config, "image_size", 64)
                out = model(pixel_values=torch.randn(2, 3, size, size))
                values = out.logits
        assert torch.isfinite(values).all()


def test_llama_2_13b_sizes_from_config_alone(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ADVISOR_MODEL_CACHE", str(tmp_path))
    config = PRESETS["llama-2-13b"].build_config()
    parameters = parameter_count(config)
    assert abs(parameters - 13.0e9) / 13.0e9 < 0.01
    assert parameters == 13_015_864_320  # the published Llama-2-13B count
    assert abs(weight_bytes(parameters, "float16") - 26.0e9) / 26.0e9 < 0.01
    info = preset_info("llama-2-13b", dtype="float16")
    assert info.parameters == parameters and info.vocab_size == 32000
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("llama-2-7b", 6_738_415_616),
        ("llama-3-8b", 8_030_261_248),
        ("mistral-7b", 7_241_732_096),
        # Published totals: Llama-3.1 8B/70B model cards, Mixtral "46.7B total" (Mistral AI),
        # Qwen2.5-7B "7.61B", Qwen3-30B-A3B "30.5B".
        ("llama-3.1-8b", 8_030_261_248),
        ("llama-3.1-70b", 70_553_706_496),
        ("llama-3.1-405b", 405_853_388_800),
        ("mixtral-8x7b", 46_702_792_704),
        ("qwen2.5-7b", 7_615_616_512),
        ("qwen3-30b-a3b", 30_532_122_624),
        ("resnet-50", 25_557_032),
        ("bert-base", 109_482_240),
        ("vit-base", 86_567_656),
    ],
)
def test_real_architecture_parameter_counts(name: str, expected: int) -> None:
    assert parameter_count(PRESETS[name].build_config()) == expected


def test_local_checkpoint_resolves_as_real(tiny_llama: ModelInfo, tmp_path) -> None:
    import shutil

    copy = tmp_path / "my-checkpoint"
    shutil.copytree(tiny_llama.path, copy)
    (copy / "advisor_preset.json").unlink()
    info = resolve_model(str(copy), dtype="float16")
    assert info.random_weights is False
    assert info.parameters == tiny_llama.parameters
    assert info.weight_bytes == tiny_llama.parameters * 2
    assert info.kind == "generate" and info.architecture == "LlamaForCausalLM"


def test_bad_model_names_and_paths(tmp_path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        resolve_model(str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match=r"has no config\.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(UserError, match="tiny-llama"):
        resolve_model("no-such-preset")
    with pytest.raises(UserError, match="dtype"):
        resolve_model("tiny-llama", dtype="int3")


@pytest.mark.slow
def test_llama_3_tokenizer_size_matches_exactly() -> None:
    from bench.engines.models import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(128256)
    assert tokenizer.get_vocab_size() == 128256
    ids = tokenizer.encode(PYTHON_SNIPPET).ids
    assert max(ids) < 128256 and tokenizer.decode(ids) == PYTHON_SNIPPET


def test_preset_positions_are_their_configs_max_position_embeddings() -> None:
    """The context check before a run reads `Preset.positions` (no transformers import): it
    must be what the written checkpoint's config says."""
    for name, preset in PRESETS.items():
        config = preset.build_config()
        assert preset.positions == getattr(config, "max_position_embeddings", None), name


def test_tiny_mixtral_writes_loads_and_routes_tokens(tmp_path, monkeypatch) -> None:
    """The MoE test preset is a real checkpoint: written, loaded by transformers as
    MixtralForCausalLM with 4 experts and top-2 routing, and generating."""
    import torch
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("ADVISOR_MODEL_CACHE", str(tmp_path))
    info = resolve_model("tiny-mixtral", dtype="float32")
    assert info.architecture == "MixtralForCausalLM" and info.random_weights
    assert info.parameters == parameter_count(PRESETS["tiny-mixtral"].build_config())
    # The experts are stored one matrix each under the Hub's names (what vLLM loads), and
    # transformers reads every tensor back (nothing missing, nothing left over).
    header = json.loads(
        (Path(info.path) / "model.safetensors").read_bytes()[8:][
            : int.from_bytes((Path(info.path) / "model.safetensors").read_bytes()[:8], "little")
        ]
    )
    assert "model.layers.0.block_sparse_moe.experts.3.w2.weight" in header
    assert "model.layers.1.block_sparse_moe.gate.weight" in header
    assert safetensors_parameter_count(Path(info.path)) == info.parameters
    model, loading = AutoModelForCausalLM.from_pretrained(
        info.path, dtype=torch.float32, output_loading_info=True
    )
    assert not loading["missing_keys"] and not loading["unexpected_keys"], loading
    assert model.config.num_local_experts == 4 and model.config.num_experts_per_tok == 2
    with torch.no_grad():
        out = model.generate(torch.tensor([[1, 5, 9, 13]]), max_new_tokens=4, do_sample=False)
    assert out.shape == (1, 8)


def test_a_hugging_face_id_resolves_to_its_preset(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ADVISOR_MODEL_CACHE", str(tmp_path))
    assert preset_name("META-LLAMA/Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    assert canonical_model("mistralai/Mixtral-8x7B-v0.1") == "mixtral-8x7b"
    context = model_context("meta-llama/Llama-3.1-70B-Instruct")
    assert context is not None and context.positions == 131072
    with pytest.raises(UserError, match=r"unknown model 'acme/x'.*config\.json"):
        resolve_model("acme/x")


def test_a_preset_too_big_for_the_disk_is_refused_before_writing(tmp_path, monkeypatch) -> None:
    """mixtral-8x7b takes 93 GB in bf16: on a disk with 10 GB free it is refused in one line
    naming both figures, and nothing is left in the cache."""
    import shutil

    monkeypatch.setenv("ADVISOR_MODEL_CACHE", str(tmp_path))
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(models.shutil, "disk_usage", lambda _: usage._replace(free=10 * 1000**3))
    with pytest.raises(UserError, match=r"preset mixtral-8x7b needs 98\.1 GB .* 10\.0 GB free"):
        models.ensure_preset("mixtral-8x7b")
    assert list(tmp_path.iterdir()) == []


def test_a_qwen3_moe_checkpoint_is_written_in_the_hub_layout_and_loads(tmp_path) -> None:
    """The Qwen-MoE expert renaming (mlp.experts.N.gate_proj/up_proj/down_proj) round-trips
    through transformers with nothing missing, on a 2-layer Qwen3-MoE config."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3MoeConfig

    config = Qwen3MoeConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        num_experts=4,
        num_experts_per_tok=2,
    )
    config.architectures = ["Qwen3MoeForCausalLM"]
    models._write_random_checkpoint(config, tmp_path, seed=0, dtype="float32")
    assert safetensors_parameter_count(tmp_path) == parameter_count(config)
    _, loading = AutoModelForCausalLM.from_pretrained(
        str(tmp_path), dtype=torch.float32, output_loading_info=True
    )
    assert not loading["missing_keys"] and not loading["unexpected_keys"], loading


def test_config_only_preset_for_an_engine_that_fills_its_weights(tmp_path, monkeypatch) -> None:
    """vLLM's load_format=dummy reads config.json and the tokenizer only: the preset is written
    without weights, in its own folder, with the same sizes as the checkpoint would have."""
    monkeypatch.setenv("ADVISOR_MODEL_CACHE", str(tmp_path))
    assert models.engine_initialises_weights("vllm", {"load_format": "dummy"})
    assert not models.engine_initialises_weights("vllm", {})
    assert not models.engine_initialises_weights("pytorch", {"load_format": "dummy"})
    bare = resolve_model("tiny-llama", dtype="float32", weights=False)
    folder = Path(bare.path)
    assert folder.name.endswith("-config-only")
    assert not list(folder.glob("*.safetensors"))
    assert (folder / "tokenizer.json").is_file() and (folder / "config.json").is_file()
    marker = json.loads((folder / "advisor_preset.json").read_text())
    assert marker["random_weights"] is True and marker["weights_on_disk"] is False
    full = resolve_model("tiny-llama", dtype="float32")
    assert full.path != bare.path and list(Path(full.path).glob("*.safetensors"))
    assert (bare.parameters, bare.weight_bytes, bare.random_weights, bare.name) == (
        full.parameters,
        full.weight_bytes,
        True,
        "tiny-llama",
    )
