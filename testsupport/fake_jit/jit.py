"""The fake JIT (a part of the fake JIT release, see :mod:`testsupport.fake_jit`), placed after the
sgl-deep-gemm stand-in, whose kernel functions it replaces with ones that build kernels the way each real JIT
lineage does (``_FAKE_LAYOUT``, set between the two parts: ``compiler``, ``bundled`` or ``deep_jit``).
"""

import typing as _typing

if _typing.TYPE_CHECKING:  # set by the parts before this one in the joined module
    import torch

    _FAKE_LAYOUT = "compiler"

import hashlib as _hashlib
import os as _os
import re as _re
import shutil as _shutil
import subprocess as _subprocess
import uuid as _uuid

from dgcompat import reference as _R

_COMPILER = None
_LOADED: set[str] = set()
BUILDS: list[str] = []
_MEMO: dict[_typing.Any, _typing.Any] = {}  # what the real JITs keep per runtime type (the header stamp) or per process (keys), kept per input
_HERE = _os.path.dirname(_os.path.abspath(__file__))


def _h(data):
    # deep_gemm's get_hex_digest: two FNV-1a 64 passes (two seeds), each finished by splitmix64
    out = ""
    for seed in (0xc6a4a7935bd1e995, 0x9e3779b97f4a7c15):
        h = seed
        for b in data:
            h = ((h ^ b) * 0x100000001b3) % (1 << 64)
        z = ((h ^ (h >> 30)) * 0xbf58476d1ce4e5b9) % (1 << 64)
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) % (1 << 64)
        out += "%016x" % (z ^ (z >> 31))
    return out


def _includes(code):
    return [m.decode() for m in _re.findall(rb"#include <(deep_gemm/[^>]+)>", code)]


def _include_hash(code, include, exclude_code=True):
    # IncludeParser::get_hash_value: the hashes of the deep_gemm/ headers, recursively, then of the code
    text = "".join(_include_hash(open(_os.path.join(include, name), "rb").read(), include, False) + "$"
                   for name in _includes(code))
    if not exclude_code:
        text += "#" + _h(code)
    return _h(text.encode())


def _library_version(include):
    root = _os.path.join(include, "deep_gemm")
    files = []
    for folder, _dirs, names in _os.walk(root):
        files += [_os.path.join(folder, n) for n in names if n.endswith(".cuh")]
    files.sort(key=lambda p: _os.path.relpath(p, root).split(_os.sep))
    return _h(b"".join(open(p, "rb").read() for p in files))


def _content_hash(code, include):
    # deep_jit's key: the source and the contents (not the folder) of what it includes
    h = _hashlib.sha256(code)
    for name in _includes(code):
        h.update(_content_hash(open(_os.path.join(include, name), "rb").read(), include).encode())
    return h.hexdigest()


class _Compiler:
    def __init__(self):
        self.layout = _os.environ.get("FAKE_JIT_LAYOUT") or _FAKE_LAYOUT
        self.cache = _os.environ.get("DG_JIT_CACHE_DIR") or _os.path.expanduser("~/.deep_gemm")
        # FAKE_FIXED_NVCC: a JIT that does not read DG_JIT_NVCC_COMPILER
        self.nvcc = _os.environ.get("FAKE_FIXED_NVCC") or _os.environ.get("DG_JIT_NVCC_COMPILER") or "nvcc"
        out = _subprocess.run(f"{self.nvcc} --version", shell=True, capture_output=True, text=True,
                              restore_signals=False)
        m = _re.search(r"release (\d+)\.(\d+)", out.stdout)
        if out.returncode != 0 or m is None:
            raise RuntimeError("Assertion error (compiler.hpp): return_code == 0")
        self.version = out.stdout
        self.signature = f"NVCC{int(m.group(1))}.{int(m.group(2))}"
        self.include = _os.path.join(_HERE, "include")
        debug = " --ptxas-options=--verbose" if _os.environ.get("DG_JIT_DEBUG", "0") not in ("", "0") else ""
        cubin = " -cubin" if self.layout == "bundled" else ""
        self.flags = (f"-std=c++{_os.environ.get('DG_JIT_CPP_STANDARD', '20')} --diag-suppress=39,161{debug} "
                      f"-I{self.include} --gpu-architecture=sm_90a{cubin} -O3")

    def build(self, name, code):
        code = code.encode()
        if self.layout == "deep_jit":
            return self.build_deep_jit(name, code)
        if self.layout == "bundled":
            return self.build_bundled(name, code)
        if ("stamp", name) not in _MEMO:  # deep_gemm hashes a runtime type's headers once
            _MEMO[("stamp", name)] = _include_hash(code, self.include)
        code = f"// Includes' hash value: {_MEMO[('stamp', name)]}\n".encode() + code
        key = _memo(("key", name, self.signature, self.flags, code),
                    lambda: _h(f"{name}$${self.signature}$${self.flags}$$".encode() + code))
        final = _os.path.join(self.cache, "cache", f"kernel.{name}.{key}")
        if final in _LOADED:
            return
        if _os.path.isdir(final):
            if not (_os.path.exists(_os.path.join(final, "kernel.cu"))
                    and _os.path.exists(_os.path.join(final, "kernel.cubin"))):
                raise RuntimeError("Assertion error: Corrupted JIT cache directory")
            _LOADED.add(final)
            return
        tmp_root = _os.path.join(self.cache, "tmp")
        tmp = _os.path.join(tmp_root, _uuid.uuid4().hex)
        cu = _source_in(tmp, code)
        cmd = f"cd {tmp_root} && {self.nvcc} {cu} -cubin -o {tmp}/kernel.cubin {self.flags}"
        out = _subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              restore_signals=False)
        if out.returncode != 0:
            raise RuntimeError(f"Assertion error (compiler.hpp): NVCC compilation failed: {out.stdout}{out.stderr}")
        _move_into_place(tmp, final, name)

    def build_bundled(self, name, code):
        library = _memo(("library", self.include), lambda: _library_version(self.include))
        key = _memo(("key", name, library, self.signature, self.flags, code),
                    lambda: _h(f"{name}$${library}$${self.signature}$${self.flags}$$".encode() + code))
        final = _os.path.join(self.cache, "cache", f"kernel.{name}.{key}")
        if final in _LOADED or _os.path.isfile(_os.path.join(final, "kernel.cubin")):
            _LOADED.add(final)
            return
        _os.makedirs(final, exist_ok=True)
        tmp_root = _os.path.join(self.cache, "tmp")
        _os.makedirs(tmp_root, exist_ok=True)
        part = _os.path.join(tmp_root, _uuid.uuid4().hex)
        with open(part, "wb") as f:
            f.write(code)
        _os.replace(part, _os.path.join(final, "kernel.cu"))
        cubin = _os.path.join(tmp_root, _uuid.uuid4().hex)
        out = _subprocess.run(f"{self.nvcc} {final}/kernel.cu -o {cubin} {self.flags}", shell=True,
                              capture_output=True, text=True, restore_signals=False)
        if out.returncode != 0:
            raise RuntimeError(f"Assertion error (compiler.hpp): NVCC compilation failed: {out.stdout}{out.stderr}")
        _os.replace(cubin, _os.path.join(final, "kernel.cubin"))
        BUILDS.append(name)
        _LOADED.add(final)

    def build_deep_jit(self, name, code):
        flags = self.flags.replace(f" -I{self.include}", "")
        key = _memo(("dj", self.version, flags, code), lambda: _hashlib.sha256(
            f"{self.version}|{flags}|{_content_hash(code, self.include)}".encode()).hexdigest()[:32])
        final = _os.path.join(self.cache, "cache", f"{name}.{key}")
        if final in _LOADED or _os.path.isfile(_os.path.join(final, ".committed")):
            _LOADED.add(final)
            return
        tmp = _os.path.join(self.cache, "tmp", f"{_os.getpid()}-{_uuid.uuid4().hex}")
        cu = _source_in(tmp, code)
        cmd = (f"cd {tmp} && {self.nvcc} {cu} --cubin --output-file {tmp}/kernel.cubin {flags} "
               f"--include-path {self.include}")
        out = _subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              restore_signals=False)
        if out.returncode != 0:
            _shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"Assertion error (deep_jit/utils/command.hpp): exit_code == 0: {out.stdout}")
        with open(_os.path.join(tmp, "meta.json"), "w") as f:
            f.write('{"command": "%s"}' % cmd)
        open(_os.path.join(tmp, ".committed"), "w").close()
        _move_into_place(tmp, final, name)


def _memo(key, make):
    if key not in _MEMO:
        _MEMO[key] = make()
    return _MEMO[key]


# The real JITs run the compiler with popen(), which keeps the dispositions of the process (Python ignores SIGXFSZ):
# restore_signals=False does the same here.


def _source_in(folder, code):
    _os.makedirs(folder)
    cu = _os.path.join(folder, "kernel.cu")
    with open(cu, "wb") as f:
        f.write(code)
    return cu


def _move_into_place(tmp, final, name):
    _os.makedirs(_os.path.dirname(final), exist_ok=True)
    try:
        _os.rename(tmp, final)
    except OSError:  # another process won
        _shutil.rmtree(tmp, ignore_errors=True)
    BUILDS.append(name)
    _LOADED.add(final)


def _build(name, **params):
    global _COMPILER
    if _COMPILER is None:
        _COMPILER = _Compiler()
    code = "#include <deep_gemm/impls/%s.cuh>\n" % name + "".join(f"{k}={v};\n" for k, v in sorted(params.items()))
    _COMPILER.build(name, code)


def _gemm_config(m, n, k):
    block_m = 64 if m <= 64 else (128 if m <= 1024 else 256)
    block_n = 128 if (n // 128) % 2 else 256
    return dict(block_m=block_m, block_n=block_n, stages=4 if k >= 4096 else 6)


def _tma_aligned(sf):
    mn = sf.shape[-2]
    return sf.stride(-2) == 1 and sf.stride(-1) == -(-mn // 4) * 4


def _check_sf(sf, rows=None):
    if sf.dtype == torch.float32 and not _tma_aligned(sf):
        # a K-major activation scale is transposed by its own JIT kernel first
        _build("transpose_fp32", sf_k=sf.shape[-1])


def _mn_major(sf, cols, dtype):
    # the layout the real kernel returns (MN-major, TMA-aligned); the values are never read here
    *lead, mn, _ = sf.shape
    aligned = -(-mn // 4) * 4
    strides = (aligned, 1) if not lead else (cols * aligned, aligned, 1)
    return torch.empty((*lead, cols, aligned), dtype=dtype).as_strided(
        (*lead, mn, cols), (*strides[:-2], 1, aligned) if lead else (1, aligned))


def get_mn_major_tma_aligned_tensor(sf):
    if _tma_aligned(sf):
        return sf
    _check_sf(sf)
    return _mn_major(sf, sf.shape[-1], torch.float32)


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf):
    _build("transpose_and_pack_fp32_into_ue8m0", sf_k=sf.shape[-1])
    return _mn_major(sf, -(-sf.shape[-1] // 4), torch.int32)


def transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False):
    if len(recipe) == 3 and not is_sfa:
        return sf  # 128x128 weight scales are read as they are on SM90
    return get_mn_major_tma_aligned_tensor(sf)


def fp8_fp4_gemm_nt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims='',
                    disable_ue8m0_cast=False):
    m, k = a[0].shape
    n = b[0].shape[0]
    if n % 64:
        raise RuntimeError("Assertion error (gemm.hpp): n % 64 == 0")
    _check_sf(a[1], m)
    _build("sm90_fp8_gemm_1d2d", **_gemm_config(m, n, k))


fp8_gemm_nt = fp8_fp4_gemm_nt


def bf16_gemm_nt(a, b, d, c=None, compiled_dims=''):
    m, k = a.shape
    _build("sm90_bf16_gemm", **_gemm_config(m, b.shape[0], k))


def m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
                                         compiled_dims='nk', disable_ue8m0_cast=False, use_psum_layout=False,
                                         ensure_zero_padding=True, expected_m_for_psum_layout=None):
    m, k = a[0].shape
    g, n, _ = b[0].shape
    _check_sf(a[1])
    _build("sm90_m_grouped_fp8_gemm_contiguous", groups=g, **_gemm_config(m // g + 1, n, k))


m_grouped_fp8_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous


def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, recipe_a=None, recipe_b=None,
                                     compiled_dims='nk', disable_ue8m0_cast=False):
    g, max_m, k = a[0].shape
    n = b[0].shape[1]
    _check_sf(a[1])
    _build("sm90_fp8_m_grouped_gemm_masked", groups=g, max_m=max_m, **_gemm_config(expected_m, n, k))


fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked


def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None):
    b = context_lens.shape[0]
    _build("paged_mqa_logits_metadata", aligned_batch=-(-b // 32) * 32, block_kv=block_kv, num_sms=num_sms)
    return _R.get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms)


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                         clean_logits=False, indices=None):
    b, next_n, h, dim = q.shape
    _build("sm90_fp8_paged_mqa_logits", heads=h, head_dim=dim, next_n=next_n)
    return torch.zeros((b * next_n, max_context_len), dtype=torch.float32)


def fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits=False, max_seqlen_k=0):
    nq, h, dim = q.shape
    _build("sm90_fp8_mqa_logits", heads=h, head_dim=dim, compressed=int(max_seqlen_k > 0))
    return torch.zeros((nq, max_seqlen_k or kv[0].shape[0]), dtype=torch.float32)
