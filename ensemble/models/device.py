"""Device and dtype names ("cpu", "cuda:N", "auto"; "auto", "float32", ...) as ``from_pretrained`` arguments."""

from __future__ import annotations

import re

from ..errors import ModelLoadError


def resolve_device(device: str) -> tuple[str, dict]:
    """A device string ("cpu", "cuda:N", "auto") as from_pretrained arguments."""
    import torch

    device = (device or "cpu").strip()
    if device == "auto":
        if not torch.cuda.is_available():
            return "cpu", {}
        return "auto", {"device_map": "auto"}
    if device == "cpu":
        return "cpu", {}
    if re.fullmatch(r"cuda(:\d+)?", device):
        if not torch.cuda.is_available():
            raise ModelLoadError(f"Device {device!r} was asked for, but this machine has no CUDA GPU. Use --device cpu.")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ModelLoadError(f"Device {device!r} does not exist: this machine has {torch.cuda.device_count()} GPU(s).")
        return device, {"device_map": device}
    raise ModelLoadError(f"Unknown device {device!r}: use 'cpu', 'cuda:N' or 'auto'.")


def cpu_has_fast_bf16() -> bool:
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def resolve_dtype(dtype: str, device: str):
    import torch

    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype in (None, "", "auto"):
        if device != "cpu":
            return torch.bfloat16
        # On CPUs with native bfloat16 (AVX512-BF16, AMX) bfloat16 runs these models 2-4x faster than
        # float32 (the output layer of a 262k vocabulary most of all); elsewhere float32 is faster.
        return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32
    if dtype not in table:
        raise ModelLoadError(f"Unknown dtype {dtype!r}: use auto, float32, bfloat16 or float16.")
    return table[dtype]
