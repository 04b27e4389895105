"""Every import form of deep_gemm, checked inside one harness child (a real wheel's Python layer on the
CPU tier, or the reference backend).

Run with ``--dropin`` (installed before the harness imported deep_gemm) or without (the harness
imported the real package first; the install here is then the late one). Not named ``test_*``: it
needs its own process (tests/test_dropin.py runs it).
"""

from __future__ import annotations

import importlib
import sys

import dgcompat
from dgcompat import _tooling

EARLY = dgcompat.installed_as_deep_gemm()
if not EARLY:
    RAW = sys.modules.get("deep_gemm")  # what the process imported before the install
    dgcompat.install_as_deep_gemm()
else:
    RAW = None

REFERENCE = _tooling.backend_name() == "reference"


def test_the_install_is_in_place() -> None:
    import deep_gemm

    assert type(deep_gemm).__name__ == "_Facade" and deep_gemm.__name__ == "deep_gemm"
    if RAW is not None:
        assert deep_gemm is not RAW and type(RAW).__name__ == "module"


def test_stable_names_in_every_form() -> None:
    import deep_gemm
    import deep_gemm.utils.layout
    from deep_gemm import get_col_major_tma_aligned_tensor, transform_sf_into_required_layout
    from deep_gemm.testing import calc_diff
    from deep_gemm.utils import align, get_tma_aligned_size
    from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor
    from deep_gemm.utils.math import align as math_align

    assert get_mn_major_tma_aligned_tensor is dgcompat.get_mn_major_tma_aligned_tensor
    assert deep_gemm.utils.layout.get_mn_major_tma_aligned_tensor is get_mn_major_tma_aligned_tensor
    assert transform_sf_into_required_layout is dgcompat.transform_sf_into_required_layout
    assert get_col_major_tma_aligned_tensor is dgcompat.get_mn_major_tma_aligned_tensor
    assert align is math_align is dgcompat.align and get_tma_aligned_size is dgcompat.get_tma_aligned_size
    assert calc_diff is dgcompat.calc_diff
    assert deep_gemm.fp8_gemm_nt is dgcompat.fp8_gemm_nt and deep_gemm.get_num_sms is dgcompat.get_num_sms
    assert get_tma_aligned_size(130, 4) == 132 and align(130, 128) == 256


def test_everything_else_is_the_real_package() -> None:
    import deep_gemm

    if REFERENCE:
        assert not hasattr(deep_gemm.utils, "per_block_cast_to_fp8")
        return
    real = _tooling.load_backend()
    assert type(real).__name__ == "module" and real.__name__ == "deep_gemm" and real is not deep_gemm
    if RAW is not None:
        assert real is RAW  # adopted, not imported again
    from deep_gemm.testing import bench_kineto
    from deep_gemm.utils import per_block_cast_to_fp8

    assert per_block_cast_to_fp8 is real.utils.per_block_cast_to_fp8
    assert bench_kineto is real.testing.bench_kineto
    assert deep_gemm.__file__ == real.__file__ and deep_gemm.__path__ == real.__path__
    real_layout = sys.modules[real.utils.layout.__name__]
    assert real_layout is not real.utils.layout  # the facade stands under the name; the real module behind it
    import deep_gemm.utils.math

    assert deep_gemm.utils.math.ceil_div is dgcompat.ceil_div
    assert deep_gemm.utils.math.per_token_cast_to_fp8 is real.utils.math.per_token_cast_to_fp8
    for name in ("deep_gemm.mega", "deep_gemm.utils.dist", "deep_gemm.testing.numeric"):
        if importlib.util.find_spec(name) is not None:
            module = importlib.import_module(name)
            assert type(module).__name__ == "module" and module.__name__ == name
    hits = [k for k in sys.modules if k.startswith("deep_gemm.") and not isinstance(sys.modules[k], type(sys))]
    for key in hits:  # the sgl wheels' `deep_gemm.<function>` entries
        attr = key.split(".", 1)[1]
        if attr in {"fp8_gemm_nt", "get_num_sms", "transform_sf_into_required_layout"}:
            assert sys.modules[key] is getattr(dgcompat, attr), key


def test_probes() -> None:
    import deep_gemm

    assert not hasattr(deep_gemm, "no_such_name") and not hasattr(dgcompat, "no_such_name")
    assert hasattr(deep_gemm, "set_pdl")  # stable: answers on every release
    if not REFERENCE:
        assert hasattr(deep_gemm, "get_tc_util") == hasattr(_tooling.load_backend(), "get_tc_util")
