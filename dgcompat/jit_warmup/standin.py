"""The stand-in for NVCC that warmup workers point ``DG_JIT_NVCC_COMPILER`` at, the log it writes, and the
digest and recipe of each compile it is asked for.

The script (:data:`STAND_IN`, POSIX sh) is told what to do by ``DGCOMPAT_WARMUP_MODE``, which
deep_gemm's compiler command inherits from the worker's environment at each call:

- ``identify``: append the arguments to ``DGCOMPAT_WARMUP_LOG`` (``identify <count>`` and one line per
  argument) and fail, starting no process: the worker computes the digest (:func:`digest`) and, the first
  time it meets a digest, keeps the build recipe (:func:`keep_recipe`: the source and the compiler
  arguments in ``<recipes>/<digest>/``), from which the calling process compiles it without deep_gemm
  (:mod:`dgcompat.jit_warmup.build`);
- ``install:<digest>``: for that kernel, copy the output the calling process built into place and replay
  NVCC's messages (``installed ...``), or run NVCC where nothing was built (``compiled ...``); for any
  other kernel log its arguments as ``refused <count>`` and fail, so the worker learns the call's next
  missing kernel;
- ``compile:<digest>``: run NVCC if the kernel is that one (``compiled ...``), else fail (``refused``),
  so one call compiles exactly the kernel whose lock the worker holds;
- ``pass``: run NVCC (also for ``--version``, always).

Newer JITs (upstream 2.8's, sgl-deep-gemm 0.2.x's) delete a failed build's folder, source included, before
the refusal reaches the worker; the worker then sets ``DGCOMPAT_WARMUP_KEEP`` to a folder of its own and the
stand-in copies the source there (one ``cat``) and names the copy in its record.

The digest (the first 128 bits of a SHA-256) covers the generated source and the compiler flags,
leaving out the output file and the arguments that name the build's folder (a fresh temporary one,
or the entry itself in older JITs that write the source there): the parts deep_gemm's own cache key
hashes besides the kernel name and the NVCC version. The script computes it itself only in the
``install`` and ``compile`` modes (once per kernel); :func:`digest` computes the same in Python.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

__all__ = ["STAND_IN", "Record", "read_log", "digest", "keep_recipe"]

STAND_IN = r"""#!/bin/sh
# dgcompat warmup stand-in for nvcc: records the kernel it is asked to build (see dgcompat/jit_warmup/standin.py).
real="${DGCOMPAT_WARMUP_NVCC:?DGCOMPAT_WARMUP_NVCC is not set}"
mode="${DGCOMPAT_WARMUP_MODE:-pass}"
case "$mode" in pass) exec "$real" "$@" ;; esac
code=""
for a in "$@"; do
  case "$a" in
    --version) exec "$real" "$@" ;;
    *.cu) if [ -z "$code" ] && [ -f "$a" ]; then code="$a"; fi ;;
  esac
done
[ -n "$code" ] || exec "$real" "$@"
# A JIT that deletes its build folder before the refusal reaches the worker takes the source with it: there
# the worker sets DGCOMPAT_WARMUP_KEEP, and each record names a copy of the source ("" where it does not).
keep() { kept=""; if [ -n "${DGCOMPAT_WARMUP_KEEP:-}" ] && cat "$code" > "$DGCOMPAT_WARMUP_KEEP/$$.cu"; then
  kept="$DGCOMPAT_WARMUP_KEEP/$$.cu"; fi; }
if [ "$mode" = identify ]; then
  # shell builtins only (unless the source must be kept): the worker computes the digest and keeps the recipe
  keep
  { printf 'identify %s %s\n' "$#" "$kept"; printf '%s\n' "$@"; } >> "$DGCOMPAT_WARMUP_LOG"
  exit 86
fi
# The digest leaves out the output file and every argument naming the build's own folder.
dir="${code%/*}"
flags=""; skip=0; out=""
for a in "$@"; do
  if [ "$skip" = 1 ]; then skip=0; out="$a"; continue; fi
  case "$a" in
    -o|--output-file) skip=1; continue ;;
    --output-file=*) out="${a#--output-file=}"; continue ;;
    -o?*|*"$dir"*) continue ;;
  esac
  flags="$flags $a"
done
id=$( { cat "$code"; printf '\n#flags%s' "$flags"; } | sha256sum )
id="${id%% *}"
id="${id%????????????????????????????????}"
case "$mode" in
  install:*)
    if [ "$id" = "${mode#install:}" ]; then
      b="${DGCOMPAT_WARMUP_BUILT:-/nonexistent}/$id"
      if [ -n "$out" ] && [ -f "$b/ok" ] && cp "$b/out" "$out" 2>/dev/null; then
        cat "$b/stdout"; cat "$b/stderr" >&2
        echo "installed $id $code" >> "$DGCOMPAT_WARMUP_LOG"; exit 0
      fi
      echo "compiled $id $code" >> "$DGCOMPAT_WARMUP_LOG"; exec "$real" "$@"
    fi
    keep; { printf 'refused %s %s\n' "$#" "$kept"; printf '%s\n' "$@"; } >> "$DGCOMPAT_WARMUP_LOG"; exit 86 ;;
  compile:*)
    if [ "$id" = "${mode#compile:}" ]; then
      echo "compiled $id $code" >> "$DGCOMPAT_WARMUP_LOG"; exec "$real" "$@"
    fi
    keep; { printf 'refused %s %s\n' "$#" "$kept"; printf '%s\n' "$@"; } >> "$DGCOMPAT_WARMUP_LOG"; exit 86 ;;
esac
exec "$real" "$@"
"""


@dataclass(frozen=True)
class Record:
    """One compile the stand-in was asked for: ``action`` (``identified``, ``refused``, ``installed`` or
    ``compiled``), the kernel's digest, its source file and (identified / refused) the compiler arguments."""

    action: str
    identity: str  # "" where the source could not be read (see :func:`digest`)
    source: str
    args: tuple[str, ...] = field(default=(), repr=False)
    kept: str = ""  # the stand-in's copy of the source (``DGCOMPAT_WARMUP_KEEP``), else ""


def _source_of(args: Sequence[str]) -> str:
    for a in args:
        if a.endswith(".cu") and os.path.isfile(a):
            return a
    return ""


def digest(args: Sequence[str], kept: str = "") -> tuple[str, str, str]:
    """``(digest, source, output)`` of a compiler command, computed as :data:`STAND_IN` computes it, from the
    source's bytes in ``kept`` (a copy) or else the source itself; the digest is "" where neither can be read
    (a JIT that deleted its build folder), never a digest of the flags alone."""
    code = _source_of(args) or next((a for a in args if a.endswith(".cu")), "")
    folder = code.rsplit("/", 1)[0] if "/" in code else code
    flags: list[str] = []
    out = ""
    skip = False
    for a in args:
        if skip:
            skip, out = False, a
            continue
        if a in ("-o", "--output-file"):
            skip = True
            continue
        if a.startswith("--output-file="):
            out = a[len("--output-file="):]
            continue
        if (a.startswith("-o") and len(a) > 2) or folder in a:
            continue
        flags.append(a)
    try:
        data = Path(kept or code).read_bytes() if (kept or code) else None
    except OSError:
        data = None
    if data is None:
        return "", code, out
    text = "\n#flags" + "".join(" " + f for f in flags)
    return hashlib.sha256(data + text.encode()).hexdigest()[:32], code, out


def read_log(path: Path) -> list[Record]:
    """The stand-in's records since the log was last emptied, then empty it."""
    try:
        with open(path, "r+") as f:
            text = f.read()
            if text:
                f.seek(0)
                f.truncate()
    except FileNotFoundError:
        return []
    out: list[Record] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        parts = lines[i].split(" ", 2)
        i += 1
        if len(parts) >= 2 and parts[0] in ("identify", "refused") and parts[1].isdigit():
            args = tuple(lines[i:i + int(parts[1])])
            i += int(parts[1])
            kept = parts[2] if len(parts) == 3 else ""
            ident, code, _ = digest(args, kept)
            out.append(Record("identified" if parts[0] == "identify" else "refused", ident, code, args, kept))
        elif len(parts) == 3:
            out.append(Record(parts[0], parts[1], parts[2]))
    return out


def keep_recipe(record: Record, recipes: Path) -> bool:
    """Keep the build recipe of ``record`` in ``recipes/<digest>/`` (``source``, ``where``: argument count,
    source and output path, ``args``: one per line, written last) unless it is there; whether it is there."""
    folder = recipes / record.identity
    if (folder / "args").is_file():
        return True
    _, code, out = digest(record.args) if record.args else ("", record.source, "")
    if not out or not code or not record.identity:
        return False
    try:
        data = Path(record.kept or code).read_bytes()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "source").write_bytes(data)
        (folder / "where").write_text(f"{len(record.args)}\n{code}\n{out}\n")
        tmp = folder / "args.new"
        tmp.write_text("".join(a + "\n" for a in record.args))
        os.replace(tmp, folder / "args")
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise  # the warmup says what ran out where
        return False
    return True
