"""The GPU-tier runner: certify published deep_gemm releases on this machine's GPU and torch.

A subject is one of:

- an sgl-deep-gemm release (``--releases``): its wheel, plus the apache-tvm-ffi wheel its metadata
  pins (``Requires-Dist: apache-tvm-ffi==X``; the wheel folders are searched in the order given),
  installed with ``pip install --no-index --no-deps --target``;
- a plain ``deep_gemm`` package folder (``--folder PATH --release-id ID``), e.g. the upstream
  DeepGEMM 2.8.1 copy taken out of the vllm 0.33.0 wheel's ``vllm/third_party/deep_gemm``; the
  certificate records the folder's file hashes and, for a stable-ABI build, which torch it was
  built for against the torch it ran on (:func:`stable_abi_note`);
- a bundled copy (``--site DIR``): a site folder holding the ``deep_gemm`` package of a kernel
  wheel next to that wheel's dist-info (``sglang_kernel-0.4.2.dist-info``), as installing the
  wheel lays it out. dgcompat's own detection must call it a bundled copy; the release id is
  ``<dist>-<version>`` (``sglang-kernel-0.4.2``), the table's bundled rows apply, and the
  certificate's ``subject`` reads ``sglang-kernel 0.4.2 (bundled deep_gemm)``.

For each subject, in its own folder ``<work>/<release>/`` (its ``site/`` and its own JIT cache
``jit/``: two deep_gemm builds never share a folder, a cache or a process):

1. install it, then check that detection (:func:`detect_site`, in a child) names the subject:
   a copy detected as another release is never certified under this one's name;
2. run the ABI health check (:mod:`.abi`) in a child: dgcompat must bind the release and two tiny
   calls must see their tensors. A release that fails is certified ``incompatible`` with the torch
   it was built for (from :data:`dgcompat.detection.EXPECTED_TORCH`); where dgcompat refused it for
   that reason, the check is repeated with ``DGCOMPAT_ALLOW_TORCH_MISMATCH=1`` to record what the
   mismatch actually does (load failure or mis-read tensors);
3. run every case (:mod:`.cases`) in its own child process under a watchdog: a case that prints no
   result before its deadline is recorded as a ``hang``, its process group is killed, and the run
   goes on with the next case;
4. write ``<out>/gpu-<release>.json`` as soon as the subject is done: the same certificate as the
   CPU tier (schema, release, distribution, binding, dgcompat version, torch, python, platform,
   device, timestamp, tests, summary), with tier ``"gpu"``, the CUDA and driver versions, the ABI
   result, what detection said and a verdict.

Subjects run side by side (``--jobs N``; each has one case child at a time, so at most N case
children share the GPU). ``--deadline S`` (the whole call) and ``--release-timeout S`` (each
subject) bound the time: no case starts with less than :data:`MIN_CASE_S` left, a case's watchdog
never runs past the deadline, and a case cut short by it is listed under ``not_run`` (never as a
hang); such a certificate's verdict is ``incomplete: ...`` unless a case failed. SIGTERM or
SIGINT stops the run the same way and kills the children (:func:`stop_children`); certificates
already written stay. A summary table ends the output.

Usage (any machine with a CUDA GPU, a CUDA-13 torch and nvcc; docs/gpu-tier.md has the one-call
certification of every release the H200's torch loads)::

    python -m dgcompat_conformance.gpu.runner --wheels ~/.cache/dgcompat/wheels --releases 0.1.4 0.1.5
    python -m dgcompat_conformance.gpu.runner --wheels A --wheels B --releases 0.0.1,0.1.4 --jobs 2 --deadline 500
    python -m dgcompat_conformance.gpu.runner --wheels DIR --abi-only 0.2.2 0.2.5
    python -m dgcompat_conformance.gpu.runner --folder vendor/deep_gemm --release-id vllm-0.33.0
    python -m dgcompat_conformance.gpu.runner --site sgk-site     # deep_gemm/ + sglang_kernel-0.4.2.dist-info/
    python -m dgcompat_conformance.gpu.runner --table        # regenerate docs/compatibility-gpu.md only

Certificates go to ``--out`` (default ``<results>/gpu``, outside any checkout: see
:mod:`dgcompat_conformance.results`). ``--publish`` then copies them into the certificates shipped with
dgcompat_conformance and regenerates the compatibility table, printing every file it writes; nothing
else writes into a checkout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import certificate
from .._args import (
    output_file,
    output_folder,
    parse,
    positive_int,
    positive_seconds,
    readable_folder,
    release_version,
    returns_status,
    usage_error,
    version_text,
)
from ..certificate import SCHEMA, Certificate, CertificateError
from ..report import gpu_run_table
from ..results import results_dir
from . import abi as _abi
from .cases import CASES
from .certify import (
    OUTCOMES,
    Steps,
    certify,
    certify_folder,
    certify_release,
    run_case_child,
    write_certificate,
)
from .deadline import MIN_CASE_S, Deadline, stop_children, stop_on_signals
from .deadline import STOP as _STOP  # noqa: F401  (the stop flag, reachable here as before the split)
from .install import detect_site, find_wheel, install_release, install_site, install_wheel, release_env
from .machine import environment_info
from .output import say
from .subject import Subject, bundle_release_id
from .table import DEFAULT_DOCS, publish, write_docs

# The runner's names from before its split into modules stay importable from it (the same objects).
__all__ = [
    "SCHEMA", "OUTCOMES", "Subject", "Deadline", "certify", "certify_release", "certify_folder", "install_site",
    "detect_site", "bundle_release_id", "stop_children", "environment_info", "find_wheel", "install_release",
    "write_certificate", "publish", "write_docs", "release_env",
    "run_case_child", "MIN_CASE_S", "main",
]


def _install_wheel(subject: Subject, wheel_record: dict[str, Any], site: Path, wheel_dirs: Sequence[Path],
                   python: str) -> None:
    """Install a wheel subject with this module's :func:`install_release` (:func:`~.install.install_wheel`)."""
    install_wheel(subject, wheel_record, site, wheel_dirs, python, pip_install=install_release)


def _steps() -> Steps:
    """The steps :func:`main` certifies with, as this module names them when it runs."""
    return Steps(install_wheel=_install_wheel, abi_check=_abi.abi_check, run_case=run_case_child,
                 min_case_s=MIN_CASE_S)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dgcompat_conformance.gpu.runner", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wheels", type=readable_folder, action="append", default=[],
                   help="folder holding sgl-deep-gemm and apache-tvm-ffi wheels (repeatable, searched recursively in "
                        "the order given; default ~/.cache/dgcompat/wheels)")
    p.add_argument("--releases", nargs="*", default=[],
                   help="releases to certify with every case (space- or comma-separated)")
    p.add_argument("--abi-only", nargs="*", default=[], help="releases to give an ABI verdict only")
    p.add_argument("--folder", type=readable_folder, default=None,
                   help="certify a plain deep_gemm package folder (no wheel), e.g. vLLM's vendored copy")
    p.add_argument("--release-id", default=None, help="with --folder: the release id of the certificate (vllm-0.33.0)")
    p.add_argument("--built-for-torch", type=version_text, default=None,
                   help="with --folder: the torch the build was made for (default: known ids, e.g. vllm-0.33.0)")
    p.add_argument("--site", type=readable_folder, action="append", default=[],
                   help="certify the bundled deep_gemm in a site folder (deep_gemm/ next to its kernel wheel's "
                        "dist-info, e.g. sglang_kernel-0.4.2.dist-info); repeatable")
    p.add_argument("--cases", default="", help="comma-separated case ids (default: all)")
    p.add_argument("--jobs", type=positive_int, default=1,
                   help="subjects run at the same time (each its own folder, JIT cache and one case child at a time)")
    p.add_argument("--deadline", type=positive_seconds, default=None,
                   help="seconds the whole run may take: no case starts later, and what did not run is recorded")
    p.add_argument("--release-timeout", type=positive_seconds, default=None,
                   help="seconds one subject may take (same rule as --deadline, per subject)")
    p.add_argument("--timeout-scale", type=positive_seconds, default=1.0, help="multiply every case deadline")
    p.add_argument("--work", type=output_folder, default=None,
                   help="install and JIT-cache folders, kept (default: a temporary folder removed at the end)")
    p.add_argument("--out", type=output_folder, default=None,
                   help="certificate folder (default: $DGCOMPAT_RESULTS/gpu, else ~/.cache/dgcompat/results/gpu)")
    p.add_argument("--publish", action="store_true",
                   help="after the run, copy its certificates into the shipped certificate folder and regenerate "
                        "--docs (each file written is printed)")
    p.add_argument("--docs", type=output_file, default=DEFAULT_DOCS,
                   help="the generated compatibility table (written by --publish and --table only)")
    p.add_argument("--table", action="store_true",
                   help="only regenerate --docs from the shipped certificates (prints the file written)")
    p.add_argument("--list", action="store_true", help="list the cases")
    return p


def _split(values: Sequence[str]) -> list[str]:
    return [v for item in values for v in item.split(",") if v]


def _subjects(opts: argparse.Namespace) -> list[Subject] | str:
    """The subjects the options name, or why they are not valid (a message)."""
    subjects = [Subject("wheel", v) for v in _split(opts.releases)]
    subjects += [Subject("wheel", v, abi_only=True) for v in _split(opts.abi_only)]
    for s in subjects:
        try:
            release_version(s.release)
        except argparse.ArgumentTypeError as exc:
            return f"argument {'--abi-only' if s.abi_only else '--releases'}: {exc}"
    if opts.folder is not None:
        if not opts.release_id or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", opts.release_id):
            return ("argument --release-id: --folder needs an id of letters, digits, . _ - (e.g. vllm-0.33.0), got "
                    f"{opts.release_id!r}")
        if not (opts.folder / "__init__.py").is_file():
            return f"argument --folder: expected a deep_gemm package folder, got '{opts.folder}' (no __init__.py)"
        subjects.append(Subject("folder", opts.release_id, opts.folder, built_for_torch=opts.built_for_torch))
    for site in opts.site:
        if not (site / "deep_gemm" / "__init__.py").is_file():
            return f"argument --site: expected a site folder holding deep_gemm/, got '{site}' (no deep_gemm/__init__.py)"
        try:
            found = detect_site(site.resolve())
            release_id = bundle_release_id(found)
        except RuntimeError as exc:
            return f"argument --site: '{site}': {exc}"
        subjects.append(Subject("site", release_id, site, detected=found))
    ids = [s.release for s in subjects]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        return f"expected each subject once, got {', '.join(dup)} twice"
    if not subjects:
        return "nothing to do: give --releases, --abi-only, --folder or --site (or --table)"
    return subjects


@returns_status
def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    opts = parse(parser, argv)
    if opts.list:
        for case in CASES.values():
            print(f"{case.id:<28} {case.timeout:5.0f}s  {case.summary}")
        return 0
    if opts.table:
        print(f"wrote {write_docs(certificate.COMMITTED, opts.docs)}")
        return 0
    if opts.out is None:
        opts.out = results_dir("gpu")
    case_ids = [c for c in opts.cases.split(",") if c] or list(CASES)
    unknown = [c for c in case_ids if c not in CASES]
    if unknown:
        return usage_error(parser, f"argument --cases: expected case ids (see --list), got "
                                   f"{', '.join(map(repr, unknown))}")
    started = time.monotonic()
    subjects = _subjects(opts)
    if isinstance(subjects, str):
        return usage_error(parser, subjects)
    wheel_dirs = opts.wheels or [Path.home() / ".cache" / "dgcompat" / "wheels"]
    run_deadline = None if opts.deadline is None else started + opts.deadline
    with contextlib.ExitStack() as stack:
        work = opts.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dgcompat-gpu-")))
        stack.enter_context(stop_on_signals())
        env_info = environment_info()
        say(f"machine: {json.dumps(env_info)}")
        paths: dict[str, str] = {}

        def one(subject: Subject) -> Certificate:
            t0 = time.monotonic()
            deadline = Deadline.earliest(run_deadline, None if opts.release_timeout is None
                                         else t0 + opts.release_timeout)
            cert = certify(subject, wheel_dirs=wheel_dirs, work=work, env_info=env_info, case_ids=case_ids,
                           timeout_scale=opts.timeout_scale, deadline=deadline, steps=_steps())
            try:
                path = write_certificate(cert, opts.out)  # as soon as it is done: a cut run keeps it
            except (CertificateError, OSError) as exc:
                say(f"== {subject.release}: certificate not written: {exc}")
                return replace(cert, verdict="failed")
            paths[subject.release] = path.name
            s = cert.summary
            say(f"== {subject.release}: {cert.verdict}  passed {s['passed']} failed {s['failed']} hang {s['hang']} "
                f"error {s['error']} xfail {s['xfail']}  {cert.seconds or 0:.0f}s -> {path.name}"
                + (f"  runner error: {cert.runner_error}" if cert.runner_error else ""))
            if cert.note:
                say(f"   note: {cert.note}")
            return cert

        with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
            certs = list(pool.map(one, subjects))
    say(f"\nsummary ({time.monotonic() - started:.0f} s, {len(certs)} subjects, --jobs {opts.jobs}):\n"
        + gpu_run_table(certs, paths))
    say(f"certificates in {opts.out}/")
    if opts.publish:
        publish(certs, opts.out, opts.docs)
    bad = [c for c in certs if c.verdict == "failed" or c.verdict.startswith("incomplete")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
