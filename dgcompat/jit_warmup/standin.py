"""The stand-in for NVCC that warmup workers point ``DG_JIT_NVCC_COMPILER`` at, and the log it writes.

The script (:data:`STAND_IN`, POSIX sh) is told what to do by ``DGCOMPAT_WARMUP_MODE``, which
deep_gemm's compiler command inherits from the worker's environment at each call:

- ``identify``: append ``identified <digest> <source>`` to ``DGCOMPAT_WARMUP_LOG`` and fail; the first
  time a worker meets a digest, also keep its build recipe (the source and the compiler arguments)
  in ``DGCOMPAT_WARMUP_RECIPES/<digest>/``, from which the calling process compiles it without deep_gemm
  (:mod:`dgcompat.jit_warmup.build`);
- ``install:<digest>``: for that kernel, copy the output the calling process built into place and replay
  NVCC's messages (``installed ...``), or run NVCC where nothing was built (``compiled ...``); fail for any
  other kernel (``refused ...``);
- ``compile:<digest>``: run NVCC if the kernel is that one (``compiled ...``), else fail
  (``refused ...``), so one call compiles exactly the kernel whose lock the worker holds;
- ``pass``: run NVCC (also for ``--version``, always).

The digest (the first 128 bits of a SHA-256) covers the generated source and the compiler flags,
leaving out the output file and the arguments that name the build's folder (a fresh temporary one,
or the entry itself in older JITs that write the source there): the parts deep_gemm's own cache key
hashes besides the kernel name and the NVCC version.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["STAND_IN", "Record", "read_log"]

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
  identify)
    echo "identified $id $code" >> "$DGCOMPAT_WARMUP_LOG"
    r="${DGCOMPAT_WARMUP_RECIPES:-}"
    # (the test first spares every later identification of this digest a mkdir process)
    if [ -n "$r" ] && [ -n "$out" ] && [ ! -d "$r/$id" ] && mkdir "$r/$id" 2>/dev/null; then
      cp "$code" "$r/$id/source" && printf '%s\n' "$#" "$code" "$out" > "$r/$id/where" \
        && printf '%s\n' "$@" > "$r/$id/args.new" && mv "$r/$id/args.new" "$r/$id/args"
    fi
    exit 86 ;;
  install:*)
    if [ "$id" = "${mode#install:}" ]; then
      b="${DGCOMPAT_WARMUP_BUILT:-/nonexistent}/$id"
      if [ -n "$out" ] && [ -f "$b/ok" ] && cp "$b/out" "$out" 2>/dev/null; then
        cat "$b/stdout"; cat "$b/stderr" >&2
        echo "installed $id $code" >> "$DGCOMPAT_WARMUP_LOG"; exit 0
      fi
      echo "compiled $id $code" >> "$DGCOMPAT_WARMUP_LOG"; exec "$real" "$@"
    fi
    echo "refused $id $code" >> "$DGCOMPAT_WARMUP_LOG"; exit 86 ;;
  compile:*)
    if [ "$id" = "${mode#compile:}" ]; then
      echo "compiled $id $code" >> "$DGCOMPAT_WARMUP_LOG"; exec "$real" "$@"
    fi
    echo "refused $id $code" >> "$DGCOMPAT_WARMUP_LOG"; exit 86 ;;
esac
exec "$real" "$@"
"""


@dataclass(frozen=True)
class Record:
    action: str  # identified | compiled | refused
    identity: str
    source: str


def read_log(path: Path) -> list[Record]:
    """The stand-in's records since the log was last emptied, then empty it."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    path.write_text("")
    out = []
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3:
            out.append(Record(*parts))
    return out
