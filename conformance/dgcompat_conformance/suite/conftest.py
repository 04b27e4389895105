"""Configuration of the conformance suite (run by the harness child, or directly with pytest).

The header says what is under test: dgcompat's detection of the deep_gemm in this process, its
capabilities, torch, and whether the kernels are real (a GPU) or stand-ins (the CPU tier).
Hypothesis runs with bounded, derandomized examples so that certificates are reproducible.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, settings

import dgcompat
from dgcompat_conformance.harness.session import current
from dgcompat_conformance.suite import _support

_EXAMPLES = int(os.environ.get("DGCOMPAT_CONFORMANCE_EXAMPLES", "6"))
settings.register_profile(
    "conformance",
    max_examples=_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.load_profile(os.environ.get("DGCOMPAT_CONFORMANCE_PROFILE", "conformance"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "raw: calls deep_gemm itself (checks the release, not dgcompat)")
    config.addinivalue_line("markers", "stable: calls dgcompat's stable surface")


#: Stable indexer tests that launch with float32 weights or the float32-scaled paged KV cache. Under
#: the SM100 MX/bf16 contract of sgl-deep-gemm 0.2.5 / upstream 2.8 (``indexer_inputs == "mx-bf16"``)
#: dgcompat refuses those calls by design; test_native_contract.py checks the refusal and the bf16
#: adaptation there instead.
_MX_REFUSED = (
    "test_stable_indexer.py::test_fp8_mqa_logits", "test_stable_indexer.py::test_paged_forms",
    "test_stable_indexer.py::test_paged_random", "test_stable_indexer.py::test_paged_clean_logits",
    "test_stable_indexer.py::test_paged_one_row_stride", "test_stable_indexer.py::test_paged_transposed_block_table",
    "test_stable_indexer.py::test_paged_metadata_refresh_in_place",
    "test_stable_properties.py::test_generated[fp8_mqa_logits]",
    "test_stable_properties.py::test_generated[fp8_paged_mqa_logits]",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        mx = dgcompat.capabilities().indexer_inputs == "mx-bf16"
    except Exception:  # noqa: BLE001 - no backend: the tests themselves report it
        return
    if not mx:
        return
    skip = pytest.mark.skip(reason="refused under the SM100 MX/bf16 indexer contract (float32 weights / float32-"
                                   "scaled KV cache); covered by test_native_contract.py")
    for item in items:
        if any(item.nodeid.split("/")[-1].startswith(prefix) for prefix in _MX_REFUSED):
            item.add_marker(skip)


def _capabilities_lines() -> list[str]:
    try:
        caps = dgcompat.capabilities()
    except Exception as exc:  # noqa: BLE001 - the header must never break the run
        return [f"capabilities: unavailable ({type(exc).__name__}: {exc})"]
    fields = getattr(caps, "__dataclass_fields__", {})
    items = [f"{name}={getattr(caps, name)!r}" for name in fields if name != "sources"]
    return ["capabilities: " + ", ".join(items)]


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    s = current()
    tier = _support.tier()
    device = "cpu-tier (native library replaced by stand-ins)" if tier == "cpu-tier" else (
        torch.cuda.get_device_name() if tier == "gpu" else tier)
    lines.append(f"dgcompat conformance: tier={tier} device={device} torch={torch.__version__}")
    if s is not None and s.installed is not None:
        p = s.installed.profile
        lines.append(f"stand-ins: {p.dist} {p.version} binding={p.binding} flavor={p.flavor} arch={p.arch} "
                     f"num_sms={s.installed.state.num_sms}")
    try:
        rel = dgcompat.release()
        lines.append(f"dgcompat.release(): {rel.label} (binding {rel.binding}, source {rel.source})")
    except Exception as exc:  # noqa: BLE001 - the header must never break the run
        lines.append(f"dgcompat.release(): unavailable ({type(exc).__name__}: {exc})")
    subject = os.environ.get("DGCOMPAT_CONFORMANCE_SUBJECT")
    if subject:
        lines.append(f"subject under test: {subject} (instead of dgcompat)")
    lines += _capabilities_lines()
    return lines


@pytest.fixture(scope="session")
def dg() -> Any:
    """The stable surface under test (dgcompat unless the harness names another subject)."""
    return _support.subject()


@pytest.fixture(scope="session")
def raw() -> Any:
    """The deep_gemm module itself (skipped on the reference tier, which has none)."""
    if _support.tier() == "reference":
        pytest.skip("the reference tier has no deep_gemm")

    # The copy under test, under its own name (vllm.third_party.deep_gemm for vLLM's, as engines import it).
    return importlib.import_module(os.environ.get("DGCOMPAT_CONFORMANCE_MODULE", "deep_gemm"))


@pytest.fixture(scope="session")
def flavor() -> str:
    """``sgl``, ``bundled``, ``reference`` or ``other``."""
    return _support.flavor()


@pytest.fixture
def restore_runtime(dg: Any) -> Any:
    """Put back the SM count and PDL flag a test changes."""
    try:
        before = dg.get_num_sms()
    except Exception:  # noqa: BLE001 - no SM count to restore: the tests report the failure
        before = None
    yield
    if before is not None:
        try:
            dg.set_num_sms(before)
        except Exception:  # noqa: BLE001, S110 - restoring is best effort; the test already reported
            pass
