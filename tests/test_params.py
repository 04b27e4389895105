"""Upstream parameters not every release has: accepted under their names and positions, forwarded where
the installed function has them, emulated where exact, refused with a typed error elsewhere."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
import torch

import dgcompat
from dgcompat import _params, gemm, moe
from dgcompat import reference as R
from dgcompat.errors import BadArgumentError, UnsupportedFeatureError

FAMILIES = ["sgl-0.1.3", "sgl-0.2.5", "bundled", "up-2.8.1"]

#: The newest release's order of every parameter of each stable function (sgl-deep-gemm 0.2.5; its
#: layout parameter is named grouped_layout there, m_indices in the stable signature).
NEWEST = {
    "fp8_gemm_nt": ("a", "b", "d", "c", "recipe", "recipe_a", "recipe_b", "compiled_dims", "disable_ue8m0_cast",
                    "alpha", "epilogue"),
    "bf16_gemm_nt": ("a", "b", "d", "c", "compiled_dims", "alpha", "epilogue"),
    "m_grouped_fp8_gemm_nt_contiguous": ("a", "b", "d", "m_indices", "recipe", "recipe_a", "recipe_b", "compiled_dims",
                                         "disable_ue8m0_cast", "use_psum_layout", "ensure_zero_padding",
                                         "expected_m_for_psum_layout", "epilogue"),
    "m_grouped_bf16_gemm_nt_contiguous": ("a", "b", "d", "m_indices", "compiled_dims", "use_psum_layout",
                                          "ensure_zero_padding", "expected_m_for_psum_layout", "epilogue"),
    "m_grouped_fp8_gemm_nt_masked": ("a", "b", "d", "masked_m", "expected_m", "recipe", "recipe_a", "recipe_b",
                                     "compiled_dims", "disable_ue8m0_cast", "epilogue"),
    "m_grouped_bf16_gemm_nt_masked": ("a", "b", "d", "masked_m", "expected_m", "compiled_dims", "epilogue"),
}


def _rel_err(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.float(), y.float()
    return float((x - y).norm() / y.norm().clamp_min(1e-6))


def _dense() -> tuple[Any, Any, torch.Tensor, torch.Tensor]:
    x, w = torch.randn(16, 256), torch.randn(128, 256)
    a, b = R.per_token_cast_to_fp8(x), R.per_block_cast_to_fp8(w)
    ref = torch.empty(16, 128, dtype=torch.bfloat16)
    R.fp8_gemm_nt(a, b, ref)
    return a, b, torch.empty(16, 128, dtype=torch.bfloat16), ref


@pytest.mark.parametrize("name", sorted(NEWEST))
def test_stable_signatures_follow_the_newest_release(name: str) -> None:
    params = tuple(inspect.signature(getattr(dgcompat, name)).parameters)
    assert params[:len(NEWEST[name])] == NEWEST[name]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_upstream_parameter_has_a_stable_name(fake_release: Callable[[str], Any], family: str) -> None:
    # Whatever the installed release takes, the stable function takes too (the layout tensor by position).
    mod = fake_release(family)
    for name in NEWEST:
        upstream = getattr(mod, name, None)
        if upstream is None:
            continue
        stable = set(inspect.signature(getattr(dgcompat, name)).parameters)
        missing = set(_params.parameter_names(upstream) or ()) - stable - {"grouped_layout"}
        assert not missing, (name, missing)


@pytest.mark.parametrize("family", FAMILIES + ["reference"])
def test_vllm_disable_ue8m0_cast_everywhere(fake_release: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch,
                                            family: str) -> None:
    fake_release(family)
    a, b, d, ref = _dense()
    dgcompat.fp8_gemm_nt(a, b, d, disable_ue8m0_cast=True)
    assert _rel_err(d, ref) < 1e-2
    d.zero_()
    dgcompat.fp8_gemm_nt(a, b, d, None, None, None, None, None, True)  # the newest release's positions
    assert _rel_err(d, ref) < 1e-2


def test_fast_path_binds_the_upstream_function_itself(fake_release: Callable[[str], Any]) -> None:
    mod: Any = fake_release("sgl-0.2.5")
    assert gemm._B.bound("fp8_gemm_nt") is mod.fp8_gemm_nt
    assert gemm._B.bound("bf16_gemm_nt") is mod.bf16_gemm_nt
    assert moe._B.bound("m_grouped_fp8_gemm_nt_contiguous") is mod.m_grouped_fp8_gemm_nt_contiguous
    assert moe._B.bound("m_grouped_bf16_gemm_nt_masked") is mod.m_grouped_bf16_gemm_nt_masked


def test_forwarded_where_present_release_default_where_none(fake_release: Callable[[str], Any],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    mod: Any = fake_release("sgl-0.2.5")
    seen: list[dict[str, Any]] = []
    real = mod.fp8_gemm_nt

    def recording(a: Any, b: Any, d: Any, c: Any = None, recipe: Any = None, recipe_a: Any = None,
                  recipe_b: Any = None, compiled_dims: str = "", disable_ue8m0_cast: bool = False, alpha: Any = None,
                  epilogue: Any = None) -> None:
        seen.append({"compiled_dims": compiled_dims, "disable_ue8m0_cast": disable_ue8m0_cast})
        real(a, b, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, alpha, epilogue)

    monkeypatch.setattr(mod, "fp8_gemm_nt", recording)
    dgcompat.reset()
    a, b, d, ref = _dense()
    dgcompat.fp8_gemm_nt(a, b, d, disable_ue8m0_cast=True)
    dgcompat.fp8_gemm_nt(a, b, d, compiled_dims="k")
    dgcompat.fp8_gemm_nt(a, b, d, compiled_dims=None, alpha=None)
    # None is the release's own default ('' here), never passed on; a value is forwarded as is.
    assert seen == [{"compiled_dims": "", "disable_ue8m0_cast": True}, {"compiled_dims": "k", "disable_ue8m0_cast": False},
                    {"compiled_dims": "", "disable_ue8m0_cast": False}]
    assert _rel_err(d, ref) < 1e-2


@pytest.mark.parametrize("call", ["recipe_a", "alpha", "epilogue"])
def test_missing_parameters_are_refused_by_name(fake_release: Callable[[str], Any], call: str) -> None:
    fake_release("bundled")  # fp8_gemm_nt(a, b, d, c, recipe, compiled_dims, disable_ue8m0_cast)
    a, b, d, _ = _dense()
    value: Any = {"recipe_a": (1, 128), "alpha": 2.0, "epilogue": object()}[call]
    kwargs: dict[str, Any] = {call: value}
    if call == "recipe_a":
        kwargs["recipe_b"] = (128, 128)
    for _ in range(2):  # every call, not only the first
        with pytest.raises(UnsupportedFeatureError, match=call) as info:
            dgcompat.fp8_gemm_nt(a, b, d, **kwargs)
        assert "0.4.1.post1" in str(info.value)


def test_missing_parameter_with_its_default_is_emulated(fake_release: Callable[[str], Any]) -> None:
    fake_release("bundled")
    a, b, d, ref = _dense()
    dgcompat.fp8_gemm_nt(a, b, d, None, None, None, None, "nk", False, None, None)
    assert _rel_err(d, ref) < 1e-2


def _psum_case(groups: int = 3, n: int = 64, k: int = 128) -> dict[str, Any]:
    sizes, align = [50, 0, 130][:groups], R.MK_ALIGNMENT
    ends, start, starts = [], 0, []
    for s in sizes:
        starts.append(start)
        ends.append(start + s)
        start = -(-(start + s) // align) * align
    a = torch.randn(start, k).bfloat16()
    b = torch.randn(groups, n, k).bfloat16()
    return {"a": a, "b": b, "ends": torch.tensor(ends, dtype=torch.int32), "starts": starts, "sizes": sizes}


def _check_psum(d: torch.Tensor, case: dict[str, Any], a32: torch.Tensor, b32: torch.Tensor) -> None:
    for g, (s, size) in enumerate(zip(case["starts"], case["sizes"], strict=True)):
        if size:
            assert _rel_err(d[s:s + size], a32[s:s + size] @ b32[g].T) < 1e-2


@pytest.mark.parametrize("ensure_zero_padding", [True, False])
def test_reference_psum_layout_bf16(monkeypatch: pytest.MonkeyPatch, ensure_zero_padding: bool) -> None:
    monkeypatch.setenv("DGCOMPAT_BACKEND", "reference")
    dgcompat.reset()
    case = _psum_case()
    d = torch.full((case["a"].shape[0], 64), 7.0, dtype=torch.bfloat16)
    dgcompat.m_grouped_bf16_gemm_nt_contiguous(case["a"], case["b"], d, case["ends"], use_psum_layout=True,
                                               ensure_zero_padding=ensure_zero_padding,
                                               expected_m_for_psum_layout=60)
    _check_psum(d, case, case["a"].float(), case["b"].float())
    assert bool((d[50:128] == 7.0).all())  # the gap after group 0 is not a group's row: left as it was


def test_reference_psum_layout_fp8(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DGCOMPAT_BACKEND", "reference")
    dgcompat.reset()
    case = _psum_case(n=128)
    x = case["a"].float()
    a = R.per_token_cast_to_fp8(x)
    ws = [R.per_block_cast_to_fp8(w.float()) for w in case["b"]]
    b = (torch.stack([w[0] for w in ws]), torch.stack([w[1] for w in ws]))
    d = torch.zeros(x.shape[0], 128, dtype=torch.bfloat16)
    dgcompat.m_grouped_fp8_gemm_nt_contiguous(a, b, d, case["ends"], None, None, None, None, True, True)
    a32 = R.dequantize_fp8(a[0], a[1], gran_mn=1)
    b32 = torch.stack([R.dequantize_fp8(w[0], w[1], gran_mn=128) for w in ws])
    _check_psum(d, case, a32, b32)


def test_reference_psum_layout_rejects_bad_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DGCOMPAT_BACKEND", "reference")
    dgcompat.reset()
    case = _psum_case()
    d = torch.empty((case["a"].shape[0], 64), dtype=torch.bfloat16)
    for ends in ([50, 10, 258], [50, 128, 10_000]):  # before the group's aligned start; past the last row
        with pytest.raises(BadArgumentError, match="m_indices"):
            dgcompat.m_grouped_bf16_gemm_nt_contiguous(case["a"], case["b"], d, torch.tensor(ends, dtype=torch.int32),
                                                       use_psum_layout=True)
    with pytest.raises(BadArgumentError, match="m_indices"):  # a per-row layout is not a psum layout
        dgcompat.m_grouped_bf16_gemm_nt_contiguous(case["a"], case["b"], d,
                                                   torch.zeros(case["a"].shape[0], dtype=torch.int32),
                                                   use_psum_layout=True)


def test_reference_split_recipes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DGCOMPAT_BACKEND", "reference")
    dgcompat.reset()
    a, b, d, ref = _dense()
    dgcompat.fp8_gemm_nt(a, b, d, recipe_a=(1, 128), recipe_b=(128, 128))
    assert torch.equal(d, ref)
    with pytest.raises(BadArgumentError, match="recipe"):
        dgcompat.fp8_gemm_nt(a, b, d, recipe=(1, 128, 128), recipe_a=(1, 128), recipe_b=(128, 128))
    with pytest.raises(BadArgumentError, match="compiled_dims"):
        dgcompat.fp8_gemm_nt(a, b, d, compiled_dims="xyz")
    with pytest.raises(UnsupportedFeatureError, match="alpha"):
        dgcompat.fp8_gemm_nt(a, b, d, alpha=2.0)


def test_psum_layout_refused_where_absent(fake_release: Callable[[str], Any]) -> None:
    # The bundled schema's bf16 grouped GEMM has no use_psum_layout / ensure_zero_padding.
    mod: Any = fake_release("bundled")
    case = _psum_case()
    d = torch.empty((case["a"].shape[0], 64), dtype=torch.bfloat16)
    assert "use_psum_layout" not in (_params.parameter_names(mod.m_grouped_bf16_gemm_nt_contiguous) or ())
    with pytest.raises(UnsupportedFeatureError, match="use_psum_layout"):
        dgcompat.m_grouped_bf16_gemm_nt_contiguous(case["a"], case["b"], d, case["ends"], use_psum_layout=True)
    with pytest.raises(UnsupportedFeatureError, match="ensure_zero_padding"):
        dgcompat.m_grouped_bf16_gemm_nt_contiguous(case["a"], case["b"], d, case["ends"], ensure_zero_padding=False)


def test_parameter_names_reads_schemas_and_docstrings() -> None:
    class Schema:
        class _Arg:
            def __init__(self, name: str) -> None:
                self.name = name

        arguments: ClassVar[list[_Arg]] = [_Arg("a"), _Arg("b"), _Arg("compiled_dims")]

    class Op:
        _schema = Schema()

    op = Op()

    def wrapper(*args: Any, **kwargs: Any) -> Any:  # the bundled copies' lazy-init wrapper
        return op(*args, **kwargs)  # type: ignore[operator]

    assert _params.parameter_names(op) == ("a", "b", "compiled_dims")
    assert _params.parameter_names(wrapper) == ("a", "b", "compiled_dims")

    class Pybind:
        __doc__ = "fp8_gemm_nt(a: object, b: object, d: at::Tensor, c: Optional[at::Tensor] = None, " \
                  "recipe: Optional[Tuple[int, int, int]] = None) -> None\n"

        def __call__(self) -> None: ...

    assert _params._doc_names(Pybind()) == ("a", "b", "d", "c", "recipe")

    def opaque(*args: Any, **kwargs: Any) -> None: ...

    assert _params.parameter_names(opaque) is None


@pytest.mark.parametrize("version", ["0.1.4", "0.2.3"])
def test_wheel_signatures_bind_the_upstream_functions(fake_site: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
                                                      version: str) -> None:
    # The benchmark's stand-in carries the wheels' exact Python signatures: every fast call is the
    # upstream function itself there (no adapter frame), parameters by position.
    from testsupport.stand_in import source

    monkeypatch.setenv("DGCOMPAT_ALLOW_TORCH_MISMATCH", "1")
    monkeypatch.setenv("DGCOMPAT_ARCH", "sm90")
    fake_site("sgl-deep-gemm", version, source(version))
    up: Any = dgcompat._backend.load()
    masked = getattr(up, "m_grouped_fp8_gemm_nt_masked", None) or up.fp8_m_grouped_gemm_nt_masked
    assert gemm._B.bound("fp8_gemm_nt") is up.fp8_gemm_nt
    assert gemm._B.bound("bf16_gemm_nt") is up.bf16_gemm_nt
    assert moe._B.bound("m_grouped_fp8_gemm_nt_contiguous") is up.m_grouped_fp8_gemm_nt_contiguous
    assert moe._B.bound("m_grouped_bf16_gemm_nt_contiguous") is up.m_grouped_bf16_gemm_nt_contiguous
    assert moe._B.bound("m_grouped_fp8_gemm_nt_masked") is masked
    assert moe._B.bound("m_grouped_bf16_gemm_nt_masked") is up.m_grouped_bf16_gemm_nt_masked
    assert gemm._D.fp8_gemm_nt == "" and moe._D.m_grouped_fp8_gemm_nt_contiguous == "nk"  # the wheels' defaults
