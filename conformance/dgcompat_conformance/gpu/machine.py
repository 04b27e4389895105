"""What this machine is: torch, CUDA, driver, Python, platform and device (probed in a child), and dgcompat's version.

Every GPU certificate records these; the probe runs in a child so that the runner itself never
imports torch or initializes CUDA.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from typing import Any

from dgcompat import __version__

from .._text import short

__all__ = ["environment_info", "dgcompat_version"]

_ENV_PROBE = r"""
import json, platform, subprocess
info = {"python": platform.python_version(), "platform": platform.platform()}
try:
    import torch
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        info["device"] = {"name": p.name, "sm": f"sm{p.major}{p.minor}", "num_sms": p.multi_processor_count,
                          "memory_gib": round(p.total_memory / 2**30, 1)}
except Exception as exc:
    info["torch_error"] = f"{type(exc).__name__}: {exc}"
driver = None
try:
    import pynvml
    pynvml.nvmlInit()
    driver = pynvml.nvmlSystemGetDriverVersion()
    driver = driver.decode() if isinstance(driver, bytes) else driver
except Exception:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        driver = out[0].strip() if out else None
    except Exception:
        driver = None
info["driver"] = driver
print(json.dumps(info))
"""


def environment_info(python: str = sys.executable) -> dict[str, Any]:
    """torch, CUDA, driver, Python, platform and device of this machine (probed in a child)."""
    proc = subprocess.run([python, "-c", _ENV_PROBE], capture_output=True, text=True, timeout=300, check=False)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), None)
    if line is None:
        return {"python": platform.python_version(), "platform": platform.platform(),
                "probe_error": short(proc.stderr, 400)}
    info: dict[str, Any] = json.loads(line)
    return info


def dgcompat_version() -> str | None:
    """The version of the dgcompat these certificates are made with (None where it cannot be read)."""
    try:
        return __version__
    except ImportError:
        return None
