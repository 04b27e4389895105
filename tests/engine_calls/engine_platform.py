"""The engine machinery that the copied call sites read, reduced to what decides their deep_gemm calls.

This is test scaffolding standing in for vLLM's ``vllm.platforms.current_platform`` and
``vllm.utils.platform_utils.num_compute_units``, and for SGLang's ``get_platform()``, ``is_cuda()`` and the
``torch.cuda.get_device_capability()`` probes in its DeepSeek-V4 kernels: which GPU the engine believes it
runs on. With a CUDA device that is the device. Without one it is the GPU the CPU tier's stand-ins emulate:
the architecture in ``DGCOMPAT_ARCH`` (the conformance harness child sets it from ``--arch``; ``sm90`` when
unset) on the stand-ins' 132-SM device. Nothing here imports deep_gemm or dgcompat.
"""

from __future__ import annotations

import os

import torch

__all__ = ["current_platform", "num_compute_units", "device_capability_major", "DEVICE"]

#: Where the engine puts its tensors.
DEVICE = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")

#: SMs of the device the CPU tier's stand-ins emulate (an H200).
_EMULATED_SMS = 132


def device_capability_major() -> int:
    """9 (SM90) or 10 (SM100): the device's, else the emulated architecture's."""
    if torch.cuda.is_available():
        return int(torch.cuda.get_device_capability()[0])
    arch = os.environ.get("DGCOMPAT_ARCH", "sm90").strip().lower().replace("_", "")
    return 10 if arch.startswith("sm10") else 9


def num_compute_units(device_index: int | None = None) -> int:
    """vllm.utils.platform_utils.num_compute_units: the device's multiprocessor count."""
    if torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(device_index or 0).multi_processor_count)
    return _EMULATED_SMS


class _CudaPlatform:
    """The part of vLLM's ``CudaPlatform`` (and SGLang's ``get_platform()``) the indexer paths read."""

    def is_cuda(self) -> bool:
        # The engine runs its CUDA path: on the CPU tier the stand-ins play the CUDA device.
        return True

    def is_rocm(self) -> bool:
        return False

    def is_xpu(self) -> bool:
        return False

    def is_device_capability_family(self, family: int) -> bool:
        return device_capability_major() * 10 == family

    def is_arch_support_pdl(self) -> bool:
        return device_capability_major() >= 9

    def fp8_dtype(self) -> torch.dtype:
        return torch.float8_e4m3fn

    @property
    def is_sm100(self) -> bool:
        return device_capability_major() == 10

    @property
    def is_sm120(self) -> bool:
        return False


current_platform = _CudaPlatform()
