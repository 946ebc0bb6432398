"""TEST STAND-IN, not TensorRT-LLM: KvCacheConfig and BuildConfig (with plugin_config)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class KvCacheConfig:
    free_gpu_memory_fraction: float | None = None
    enable_block_reuse: bool = True


@dataclass
class PluginConfig:
    gemm_plugin: str | None = None


@dataclass
class BuildConfig:
    max_batch_size: int = 2048
    max_num_tokens: int = 8192
    max_seq_len: int | None = None
    plugin_config: PluginConfig = field(default_factory=PluginConfig)
