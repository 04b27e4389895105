"""The machinery behind :func:`dgcompat.warmup` (:mod:`dgcompat.jit_warmup` holds the description, the
report and the entry point): ``pool`` (the parent: workers, dedupe, phases), ``build`` (NVCC on the
recorded recipes, in the parent), ``worker`` (the worker processes and the stand-in compiler),
``calls`` (scratch operands and the stable calls), ``record`` (the record of a complete warmup).
Nothing here is imported at ``import dgcompat``."""
