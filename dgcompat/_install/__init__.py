"""dgcompat installed as ``deep_gemm`` for the whole process (the ``install_as_MySQLdb()`` pattern).

After :func:`install_as_deep_gemm`, every ``import deep_gemm``, ``import deep_gemm.utils.layout``
and ``from deep_gemm[.sub] import name`` in the process gets a *facade* module: a name dgcompat
defines (its stable surface, mirrored per module: ``deep_gemm`` <- ``dgcompat``,
``deep_gemm.utils`` <- ``dgcompat.utils``, ``deep_gemm.utils.layout`` <- ``dgcompat.utils.layout``,
``deep_gemm.utils.math`` <- ``dgcompat.utils.math``, ``deep_gemm.testing`` <- ``dgcompat.testing``)
resolves to dgcompat's object; every other name, and every other submodule (``legacy``,
``mega``, ``utils.dist``, ``testing.bench``, ...), is the real deep_gemm's.

This package is everything that installs dgcompat as deep_gemm: this module (the meta-path finder
and the facade modules), :mod:`~dgcompat._install.forward` (names outside the stable surface, looked
up in the real modules), :mod:`~dgcompat._install.resolve` (``dgcompat.resolve``,
``passthrough_names``, ``reset``), :mod:`~dgcompat._install.launch` (``python -m dgcompat run``) and
``_startup/sitecustomize.py`` (the start-up hook the launcher puts on ``PYTHONPATH``).

How the real package loads, exactly once and as itself
-------------------------------------------------------
A meta-path finder at the front of :data:`sys.meta_path` answers for the facade names only. The
first ``import deep_gemm`` after the install runs through the import system as usual: the facade
is created, put into ``sys.modules`` (marked initializing) and executed while the import system
holds the per-module lock for ``deep_gemm``. Executing the facade loads the real package *by its
own name*, with the finder standing aside in this thread (a thread-local flag):

1. the real package's spec (found by the other finders) makes the real module object, and its own
   loader executes ``deep_gemm/__init__.py`` into it. The facade stays in ``sys.modules``
   throughout, so another thread's ``import deep_gemm`` finds it initializing, waits for the lock
   and gets the facade: no thread is ever handed the real top-level package;
2. in the loading thread the facades are transparent (every name forwards to the real module),
   so the real ``__init__``'s relative imports (``from . import utils``, ``from .utils import *``,
   ``from .. import _C``) and the submodules it imports, found through the facade's ``__path__``
   (the real package's), are all real; what the import system sets on the facade meanwhile (its
   submodules) is moved onto the real module afterwards;
3. the real modules behind the other facade names (``deep_gemm.utils`` ...) are moved out of
   ``sys.modules`` into this module's registry, so that their next import gets a facade, and the
   sgl wheels' ``deep_gemm.<function>`` entries of stable names are pointed at dgcompat's functions.

The real package is never imported under another name, so its ``__name__``, ``__file__``, its
``torch.ops`` namespace and its relative imports are untouched; code inside it that imports
``deep_gemm`` later (a function-local ``from .. import _C``) gets the facade, which forwards
every name it does not define, underscore names included. dgcompat's own binding
(:mod:`dgcompat._backend`) asks :func:`dgcompat._backend.import_real` for the real module (the
registry :data:`dgcompat._backend.REAL` this module fills), so nothing recurses.

The facade for a submodule that the real package did not import itself (``deep_gemm.testing``
on a build whose ``__init__`` skips it) loads its real module under that submodule's lock, by a
nested import of its name that a thin loader ends by putting the facade back (the real module
stays marked initializing, so ``importlib.import_module`` racers re-read the facade). The
decision whether the real package may be imported at all (installed, built for this torch) is
:func:`dgcompat._backend.import_refusal`, the same check the binding makes; a refused or failing
import leaves the facade in place: stable functions raise
:class:`~dgcompat.errors.IncompatibleBuildError` when called and forwarded names raise
:class:`~dgcompat.errors.UnavailableNameError` (an ``AttributeError``, so ``hasattr`` probes answer
False). With no deep_gemm installed and no reference backend chosen, the finder stands aside and
``import deep_gemm`` fails with ``ModuleNotFoundError`` as it would without dgcompat.

Installing late
---------------
If deep_gemm is already imported when :func:`install_as_deep_gemm` runs, the real modules are
adopted: moved out of ``sys.modules`` into the registry, so that every *later* import gets the
facade. References taken before the install (a module that ran ``import deep_gemm`` earlier)
still point at the real package: install before the engine is imported (the launcher,
``python -m dgcompat run -- ...``, does it at interpreter start-up).

One caveat remains: while the first ``import deep_gemm`` is executing the real ``__init__`` in
one thread, another thread that imports one of the submodules that ``__init__`` already loaded
*by full name* (``from deep_gemm.utils.layout import ...``) may be handed the real submodule (the
import system returns ``sys.modules`` entries without asking finders). Import deep_gemm before
starting threads that import its submodules.

Nothing here runs at ``import dgcompat``; :func:`install_as_deep_gemm` imports no deep_gemm (it
loads at the first ``import deep_gemm``); it runs dgcompat's detection (distribution metadata, no
import) so that the finder never has to.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Iterator
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from .. import _backend
from .. import detection
from .._backend import REAL
from .._backend import TOP
from .._surface import NAMES
from .._surface import NOT_DEEP_GEMM
from . import forward

__all__ = ["install_as_deep_gemm", "uninstall_as_deep_gemm", "installed_as_deep_gemm", "as_deep_gemm", "FACADES"]

#: facade module -> the dgcompat module whose public names (``__all__``) it serves.
FACADES: dict[str, str] = {
    "deep_gemm": "dgcompat",
    "deep_gemm.utils": "dgcompat.utils",
    "deep_gemm.utils.layout": "dgcompat.utils.layout",
    "deep_gemm.utils.math": "dgcompat.utils.math",
    "deep_gemm.testing": "dgcompat.testing",
}

_lock = threading.RLock()
_local = threading.local()  # .standing_aside: bool; .pending: {name: facade} while a real module loads


class _State:
    """The install's own state; the real modules and the facades live in :data:`dgcompat._backend.REAL`."""

    def __init__(self) -> None:
        self.finder: _Finder | None = None
        self.replaced: dict[str, Any] = {}  # sys.modules["deep_gemm.<fn>"] entries pointed at dgcompat


_state = _State()


# --------------------------------------------------------------------------- public


def install_as_deep_gemm() -> None:
    """Make every ``import deep_gemm`` in this process resolve through dgcompat (idempotent).

    dgcompat's stable names win wherever dgcompat defines them, in ``deep_gemm`` and in the
    submodules it mirrors (:data:`FACADES`); everything else is the real package's. Call it before
    the engine imports deep_gemm; a deep_gemm imported earlier is adopted (later imports get the
    facade, earlier references keep the real module). Imports nothing itself.
    """
    with _lock:
        if _state.finder is not None:
            return
        # Detect now: the finder runs under the import system's global lock, where importing a
        # module or waiting for another thread's import could deadlock, so it only reads caches.
        detection.backend_name()
        _adopt_imported()
        _state.finder = _Finder()
        REAL.installed = True
        sys.meta_path.insert(0, _state.finder)


def uninstall_as_deep_gemm() -> None:
    """Undo :func:`install_as_deep_gemm`: later imports get the real modules (never re-imported).

    Facade modules already handed out keep working (they forward as before).
    """
    with _lock:
        finder = _state.finder
        if finder is None:
            return
        _state.finder = None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)
        for name, facade in REAL.facades.items():
            if sys.modules.get(name) is facade:
                del sys.modules[name]
        for name, real in REAL.real.items():
            _release_initializing(real)
            sys.modules[name] = real
        for name, entry in _state.replaced.items():
            sys.modules[name] = entry
        _state.replaced.clear()
        REAL.clear()


def installed_as_deep_gemm() -> bool:
    """Whether :func:`install_as_deep_gemm` is in effect."""
    return _state.finder is not None


@contextlib.contextmanager
def as_deep_gemm() -> Iterator[None]:
    """``with dgcompat.as_deep_gemm(): ...``: the install for the body only (tests, notebooks)."""
    was = installed_as_deep_gemm()
    install_as_deep_gemm()
    try:
        yield
    finally:
        if not was:
            uninstall_as_deep_gemm()


# --------------------------------------------------------------------------- the facade module


class _Facade(types.ModuleType):
    """``sys.modules["deep_gemm..."]`` under the install: dgcompat's names first, then the real module's.

    The lookup hooks are module-level ``__getattr__`` / ``__dir__`` (PEP 562) in the instance's
    ``__dict__``, not methods: a class-level ``__getattr__`` would route *every* attribute read
    through the slower hook slot, while this way a name already resolved (cached in ``__dict__``)
    is an ordinary module attribute hit, as fast as ``dgcompat.<name>``.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)

        def __getattr__(attr: str) -> Any:  # noqa: N807 - the facade module's hook; only for names not yet in the module's __dict__
            return _resolve(self, attr)

        def __dir__() -> list[str]:  # noqa: N807 - the facade module's hook
            return _public_names(name)

        self.__dict__["__getattr__"] = __getattr__
        self.__dict__["__dir__"] = __dir__


_STABLE: dict[str, frozenset[str]] = {}


def _stable_names(facade: str) -> frozenset[str]:
    """The names the facade ``facade`` takes from its dgcompat module (computed once)."""
    names = _STABLE.get(facade)
    if names is None:
        if facade == TOP:
            names = frozenset(set(NAMES) - NOT_DEEP_GEMM)
        else:
            names = frozenset(getattr(importlib.import_module(FACADES[facade]), "__all__", ()))
        _STABLE[facade] = names
    return names


def _stable_value(facade: str, name: str) -> Any:
    """dgcompat's object behind ``<facade>.<name>`` (one of :func:`_stable_names`)."""
    source = f"dgcompat.{NAMES[name]}" if facade == TOP else FACADES[facade]
    return getattr(importlib.import_module(source), name)


def _resolve(facade: _Facade, name: str) -> Any:
    fname = facade.__name__
    if _standing_aside():
        # This thread is loading the real package: every facade is a window onto its real module.
        real = _loading().get(fname) or REAL.real.get(fname)
        if real is None:
            raise AttributeError(f"module {fname!r} has no attribute {name!r}")
        if name == "__all__" and not hasattr(real, "__all__"):
            return [n for n in vars(real) if not n.startswith("_")]  # what `import *` reads from the real module
        return getattr(real, name)
    if name.startswith("__") and name.endswith("__") and name != "__all__":
        # Dunders (__file__, __version__, __path__ probes by the import system) never trigger a load.
        real = REAL.real.get(fname)
        if real is None:
            raise AttributeError(f"module {fname!r} has no attribute {name!r}")
        return getattr(real, name)
    if f"{fname}.{name}" in FACADES:
        return importlib.import_module(f"{fname}.{name}")
    if name in _stable_names(fname):
        value = _stable_value(fname, name)
        facade.__dict__[name] = value  # later lookups are plain attribute hits
        return value
    if name == "__all__":
        return _public_names(fname)
    value = forward.lookup(fname, name)
    if callable(value):
        # Functions and classes do not change; plain values (flags a release mutates) are read live.
        facade.__dict__[name] = value
    return value


def _public_names(fname: str) -> list[str]:
    names = set(_stable_names(fname))
    real = REAL.real.get(fname)
    if real is not None:
        exported = getattr(real, "__all__", None)
        names |= set(exported) if exported is not None else {n for n in vars(real) if not n.startswith("_")}
    return sorted(names)


# --------------------------------------------------------------------------- finder and loaders


def _standing_aside() -> bool:
    return bool(getattr(_local, "standing_aside", False))


@contextlib.contextmanager
def _aside() -> Iterator[None]:
    """The finder returns nothing (or only pending real specs) in this thread for the body."""
    before = _standing_aside()
    _local.standing_aside = True
    try:
        yield
    finally:
        _local.standing_aside = before


def _pending() -> dict[str, _Facade]:
    pending: dict[str, _Facade] | None = getattr(_local, "pending", None)
    if pending is None:
        pending = _local.pending = {}
    return pending


def _real_spec(name: str, path: Sequence[str] | None) -> importlib.machinery.ModuleSpec | None:
    """The spec the other finders give ``name`` (the real module), found without importing it."""
    for finder in sys.meta_path:
        if isinstance(finder, _Finder):
            continue
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        spec: importlib.machinery.ModuleSpec | None = find_spec(name, path)
        if spec is not None:
            return spec
    return None


class _Finder(importlib.abc.MetaPathFinder):
    """Serves facade specs for :data:`FACADES` names; everything else is left to the other finders.

    ``find_spec`` is called with the import system's global lock held, so it imports nothing and
    waits for nothing: it asks the other finders (as the import system would) and reads the
    detection cached by :func:`install_as_deep_gemm`. The real import happens in the loader.
    """

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != TOP and not fullname.startswith(TOP + "."):
            return None
        if _standing_aside():
            facade = _pending().get(fullname)
            if facade is None:
                return None
            real = _real_spec(fullname, path)
            if real is None:
                return None
            real.loader = _RealLoader(real.loader, facade)  # type: ignore[arg-type]
            return real
        if fullname not in FACADES:
            return None  # a real submodule, found through the facade's __path__ (the real package's)
        with _aside():
            real = _real_spec(fullname, path)
            if fullname == TOP:
                backend = detection.backend_name()  # cached since the install: no import here
                if backend == "reference":
                    real = None  # the reference backend stands in for deep_gemm; nothing real is loaded
                elif real is None or backend == "none":
                    return None  # nothing to front: `import deep_gemm` fails as it would without dgcompat
            elif TOP not in REAL.real:
                real = None
        spec = importlib.machinery.ModuleSpec(fullname, _LOADER, origin=real.origin if real else None,
                                              loader_state=real, is_package=True)
        # The facade's __path__ is the real package's, so real submodules import under their own names.
        spec.submodule_search_locations = list(real.submodule_search_locations or []) if real else []
        return spec


class _FacadeLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return _Facade(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        assert isinstance(module, _Facade)
        assert module.__spec__ is not None
        name = module.__name__
        REAL.facades[name] = module
        real_spec = module.__spec__.loader_state
        if real_spec is None or name in REAL.real:
            return
        if name == TOP:
            REAL.retry = lambda: _load_top(module, real_spec)
            _load_top(module, real_spec)
            return
        _load_real(name, module)


_LOADER = _FacadeLoader()


def _loading() -> dict[str, ModuleType]:
    loading: dict[str, ModuleType] | None = getattr(_local, "loading", None)
    if loading is None:
        loading = _local.loading = {}
    return loading


def _load_top(facade: _Facade, real_spec: importlib.machinery.ModuleSpec) -> None:
    """Load the real package behind the top-level facade unless it is loaded or refused (then say why)."""
    if TOP in REAL.real:
        return
    refusal = _backend.import_refusal()
    if refusal is not None:
        REAL.failure = refusal
        return
    REAL.failure = None
    _load_real_top(facade, real_spec)
    if TOP in REAL.real:
        _point_symbol_entries()  # outside the load: an error here is dgcompat's, not the real import's


def _load_real_top(facade: _Facade, real_spec: importlib.machinery.ModuleSpec) -> None:
    """Execute the real package while its facade stays in ``sys.modules`` (initializing, lock held).

    Other threads importing ``deep_gemm`` meanwhile find the facade marked initializing and wait
    for the import lock, so none is ever handed the real package. In this thread the facade is
    transparent (:func:`_resolve` forwards every name to the real module while standing aside), so
    the real ``__init__``'s relative imports (``from . import utils``, ``from .utils import *``) see
    the real package; what the import system sets on the facade meanwhile (its submodules) is
    moved onto the real module afterwards.
    """
    before = set(facade.__dict__)
    real = importlib.util.module_from_spec(real_spec)
    _loading()[TOP] = real
    try:
        with _aside():
            assert real_spec.loader is not None
            real_spec.loader.exec_module(real)
        REAL.real[TOP] = real
    except Exception as exc:  # noqa: BLE001 - OSError (undefined symbol), AssertionError (no CUDA toolkit), ...
        REAL.failure = exc
    finally:
        _loading().pop(TOP, None)
        for key in set(facade.__dict__) - before:
            real.__dict__.setdefault(key, facade.__dict__.pop(key))
        _take_real_submodules()


def _load_real(name: str, facade: _Facade) -> None:
    """Import the real module ``name`` as itself while its facade is being imported (lock held)."""
    sys.modules.pop(name, None)
    _pending()[name] = facade
    try:
        with _aside():
            importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - OSError (undefined symbol), AssertionError (no CUDA toolkit), ...
        if name == TOP:
            REAL.failure = exc
    finally:
        _pending().pop(name, None)
        sys.modules[name] = facade
        parent, _, child = name.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, facade)


class _RealLoader(importlib.abc.Loader):
    """The real module's own loader, plus: the facade goes back into ``sys.modules`` before the lock is released."""

    def __init__(self, inner: importlib.abc.Loader, facade: _Facade) -> None:
        self.inner = inner
        self.facade = facade

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # The real module keeps its own loader (resources, get_data, reload).
        if module.__spec__ is not None:
            module.__spec__.loader = self.inner
        module.__loader__ = self.inner
        name = module.__name__
        try:
            self.inner.exec_module(module)
            REAL.real[name] = module
        finally:
            if name == TOP:
                _take_real_submodules()
            _hold_initializing(module)
            sys.modules[name] = self.facade

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ... of the real loader
        return getattr(self.inner, name)


def _hold_initializing(module: ModuleType) -> None:
    """Keep the real module marked as initializing once the facade has replaced it in ``sys.modules``.

    A thread that read ``sys.modules[name]`` while the real module was executing checks
    ``module.__spec__._initializing`` only afterwards; the import system then waits for the module
    lock and reads ``sys.modules`` again, which now holds the facade. The import system clears the
    flag on the spec it loaded with, so the real module gets a copy that stays set (cleared again
    when :func:`uninstall_as_deep_gemm` puts the real module back).
    """
    spec = module.__spec__
    if spec is not None:
        held = copy.copy(spec)
        setattr(held, "_initializing", True)  # noqa: B010 - a private ModuleSpec field typeshed does not declare
        module.__spec__ = held


def _release_initializing(module: ModuleType) -> None:
    if module.__spec__ is not None and getattr(module.__spec__, "_initializing", False):
        setattr(module.__spec__, "_initializing", False)  # noqa: B010 - as above


def _take_real_submodules() -> None:
    """Move the real modules behind facade names out of ``sys.modules`` into the registry."""
    for name in FACADES:
        if name == TOP:
            continue
        module = sys.modules.get(name)
        if module is not None and not isinstance(module, _Facade):
            del sys.modules[name]
            REAL.real[name] = module


def _point_symbol_entries() -> None:
    """The sgl wheels' ``sys.modules["deep_gemm.<function>"]`` entries of stable names -> dgcompat's functions."""
    stable = _stable_names(TOP)
    for key in [k for k in sys.modules if k.startswith(TOP + ".")]:
        entry = sys.modules[key]
        attr = key[len(TOP) + 1:]
        # sgl-deep-gemm registers `deep_gemm.<function>` entries so `import deep_gemm.<fn>` works.
        if attr in stable and not isinstance(entry, ModuleType):
            _state.replaced.setdefault(key, entry)
            sys.modules[key] = _stable_value(TOP, attr)


def _adopt_imported() -> None:
    """A deep_gemm imported before the install: its real modules move behind the facade names."""
    current = sys.modules.get(TOP)
    if current is None:
        return
    if current is sys.modules.get("dgcompat"):
        del sys.modules[TOP]  # an `import dgcompat as deep_gemm`-style alias planted by hand
        return
    if isinstance(current, _Facade):
        return
    del sys.modules[TOP]
    REAL.real[TOP] = current
    _take_real_submodules()
    _point_symbol_entries()
