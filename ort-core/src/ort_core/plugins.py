"""Plugin discovery: entry points -> one pluggy PluginManager; load failures kept and reported.

Every plugin is loaded on its own: an import error, an exception in ``ort_register_providers``
or an incompatible contract version is recorded as a ``PluginFailure`` and the other plugins
keep working. Per-provider hooks are called through a hook caller that holds only the plugin
that registered that provider plus the cross-cutting plugins (those that register none).
"""

from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass
from typing import Any

import pluggy

from . import hookspecs
from .types import EpDevices, ProviderSpec
from .version import CONTRACT_VERSION, __version__


def entry_points(group: str) -> Any:
    """The installed entry points of ``group``; imported when the registry is first used, not
    with ort_core (the backport takes about 80 ms to import)."""
    if sys.version_info >= (3, 12):
        from importlib.metadata import entry_points as find
    else:  # the selectable entry_points API of 3.12, for older Pythons
        from importlib_metadata import entry_points as find
    return find(group=group)


logger = logging.getLogger("ort_core")


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be used, and why."""

    plugin: str  # entry point name, or the plugin object's name
    package: str  # distribution that advertised it ("" if registered in-process)
    error: str


@dataclass
class RegisteredProvider:
    """A provider as core knows it: its spec, the plugin that offers it, its hook callers."""

    spec: ProviderSpec
    plugin: Any
    package: str
    hooks: Any  # pluggy subset hook relay: only this plugin + cross-cutting plugins


def contract_compatible(provider_version: str, core_version: str = CONTRACT_VERSION) -> bool:
    """Same major version, and the provider's minor version is not newer than core's."""
    try:  # a malformed version (not "MAJOR.MINOR", not a string) is incompatible, never a crash
        p_major, p_minor = (int(x) for x in str(provider_version).split(".")[:2])
        c_major, c_minor = (int(x) for x in str(core_version).split(".")[:2])
    except (ValueError, TypeError):
        return False
    return p_major == c_major and p_minor <= c_minor


class _HookSubset:
    """Attribute access to the hooks of a subset of plugins (pluggy's subset_hook_caller).

    ``owner``: the plugin that registered the provider; the others in the subset are the
    cross-cutting plugins (they register no provider). ``on_failure(plugin, hook, exc)`` is
    told when a cross-cutting plugin raises in ``call_contained``."""

    def __init__(self, pm: pluggy.PluginManager, exclude: list[Any], owner: Any = None,
                 on_failure: Any = None):
        self._pm = pm
        self._exclude = exclude
        self._owner = owner
        self._on_failure = on_failure
        self._cache: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        caller = self._cache.get(name)
        if caller is None:
            caller = self._pm.subset_hook_caller(name, remove_plugins=self._exclude)
            self._cache[name] = caller
        return caller

    def implemented(self, name: str) -> bool:
        """Whether any plugin in the subset implements hook ``name``."""
        return bool(getattr(self, name).get_hookimpls())

    def call_contained(self, name: str, **kwargs: Any) -> Any:
        """Call hook ``name`` plugin by plugin, in pluggy's order: an exception from the
        provider's own plugin propagates (it is that provider's failure); one from a
        cross-cutting plugin is reported to ``on_failure`` and that plugin is skipped, so one
        broken plugin cannot fail every provider's sessions and runs. A firstresult hook
        returns the first answer that is not None, the others the list of answers."""
        caller = getattr(self, name)
        impls = caller.get_hookimpls()
        if any(i.hookwrapper or getattr(i, "wrapper", False) for i in impls):
            return caller(**kwargs)  # wrappers wrap the whole call: pluggy's own loop
        first = bool(caller.spec and caller.spec.opts.get("firstresult"))
        results = []
        for impl in reversed(impls):  # pluggy calls the last registered first
            args = {a: kwargs[a] for a in impl.argnames}
            if impl.plugin is self._owner or self._on_failure is None:
                result = impl.function(**args)
            else:
                try:
                    result = impl.function(**args)
                except Exception as exc:
                    self._on_failure(impl.plugin, name, exc)
                    continue
            if result is not None:
                if first:
                    return result
                results.append(result)
        return None if first else results


class PluginRegistry:
    """All plugins of this process. Use ``registry()`` for the shared instance."""

    def __init__(self, load_entry_points: bool = True) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self._load_entry_points = load_entry_points
        self._loaded = False
        self._loading = False
        self._lock = threading.RLock()
        self.failures: list[PluginFailure] = []
        self._providers: dict[str, RegisteredProvider] = {}
        self._provider_plugins: dict[int, list[str]] = {}  # id(plugin) -> provider names
        self._packages: dict[int, str] = {}  # id(plugin) -> distribution that advertised it
        self._devices: dict[str, EpDevices] = {}

    # ---------------------------------------------------------------- loading
    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        with self._lock:
            # ``_loaded`` is set only once every entry point is in: other threads wait on the
            # lock meanwhile (set first, they saw an empty registry). A plugin that asks the
            # registry while it is being imported (same thread, the lock is re-entrant) sees
            # the plugins loaded so far.
            if self._loaded or self._loading:
                return
            self._loading = True
            try:
                if self._load_entry_points:
                    for ep in entry_points(group=hookspecs.ENTRY_POINT_GROUP):
                        package = ep.dist.name if ep.dist is not None else ""
                        try:
                            plugin = ep.load()
                        except Exception as exc:  # a broken plugin must not break the others
                            self._fail(ep.name, package, f"import failed: {type(exc).__name__}: {exc}")
                            continue
                        self._add(plugin, ep.name, package)
            finally:
                self._loading = False
                self._loaded = True

    def _fail(self, plugin: str, package: str, error: str) -> None:
        failure = PluginFailure(plugin, package, error)
        self.failures.append(failure)
        logger.warning("plugin %r (%s) is not usable: %s", plugin, package or "in-process", error)

    def _add(self, plugin: Any, name: str, package: str) -> bool:
        try:
            self.pm.register(plugin, name=name)
            self._packages[id(plugin)] = package
        except Exception as exc:
            self._fail(name, package, f"registration failed: {type(exc).__name__}: {exc}")
            return False
        impls = [
            i for i in self.pm.hook.ort_register_providers.get_hookimpls() if i.plugin is plugin
        ]
        specs: list[ProviderSpec] = []
        try:
            for impl in impls:
                specs.extend(impl.function() or ())
        except Exception as exc:
            self.pm.unregister(plugin)
            self._fail(name, package, f"ort_register_providers raised {type(exc).__name__}: {exc}")
            return False
        for spec in specs:
            if not isinstance(spec, ProviderSpec):  # checked first: the lines below read its fields
                self.pm.unregister(plugin)
                self._fail(name, package, f"ort_register_providers returned {spec!r}, not a ProviderSpec")
                return False
            if not contract_compatible(spec.contract_version):
                self.pm.unregister(plugin)
                self._fail(
                    name,
                    package,
                    f"plugin {name!r} ({package or 'in-process'}): {spec.name} was written for provider "
                    f"contract {spec.contract_version!s}; this ort-core {__version__} implements contract "
                    f"{CONTRACT_VERSION} (it loads contracts {CONTRACT_VERSION.split('.')[0]}.0 to "
                    f"{CONTRACT_VERSION}): install a {spec.name} release built for it",
                )
                return False
            if spec.name in self._providers:
                self.pm.unregister(plugin)
                other = self._providers[spec.name].package or "in-process"
                self._fail(name, package, f"{spec.name} is already offered by {other}")
                return False
        for spec in specs:
            self._providers[spec.name] = RegisteredProvider(spec, plugin, package, None)
        self._provider_plugins[id(plugin)] = [s.name for s in specs]
        self._rebuild_hook_subsets()
        return True

    def _rebuild_hook_subsets(self) -> None:
        provider_plugins = [
            p for p in self.pm.get_plugins() if self._provider_plugins.get(id(p))
        ]
        for reg in self._providers.values():
            others = [p for p in provider_plugins if p is not reg.plugin]
            reg.hooks = _HookSubset(self.pm, others, reg.plugin, self._cross_cutting_failed)

    def _cross_cutting_failed(self, plugin: Any, hook: str, exc: Exception) -> None:
        """A plugin that registers no provider raised in ``hook``: logged, and recorded once per
        plugin and hook in ``failures`` (a hook raising on every run must not grow the list)."""
        name = self.pm.get_name(plugin) or repr(plugin)
        error = f"{hook} raised {type(exc).__name__}: {exc}; the plugin was skipped there"
        with self._lock:
            if any(f.plugin == name and f.error.startswith(f"{hook} raised") for f in self.failures):
                logger.debug("plugin %r: %s", name, error)
                return
            self._fail(name, self._packages.get(id(plugin), ""), error)

    # ---------------------------------------------------------------- public
    def register(self, plugin: Any, name: str | None = None) -> bool:
        """Register a plugin object in-process (tests, notebooks). Returns False on failure,
        with the reason in ``failures``."""
        self._ensure_loaded()
        with self._lock:
            return self._add(plugin, name or getattr(plugin, "__name__", repr(plugin)), "")

    def unregister(self, plugin: Any) -> None:
        with self._lock:
            names = self._provider_plugins.pop(id(plugin), [])
            for n in names:
                self._providers.pop(n, None)
                self._devices.pop(n, None)
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            self._rebuild_hook_subsets()

    def providers(self) -> dict[str, RegisteredProvider]:
        """Every provider that loaded, usable here or not, by name."""
        self._ensure_loaded()
        return dict(self._providers)

    def get(self, name: str) -> RegisteredProvider | None:
        self._ensure_loaded()
        return self._providers.get(name)

    def devices(self, name: str) -> EpDevices:
        """The devices provider ``name`` can use here (asked once, then cached)."""
        self._ensure_loaded()
        cached = self._devices.get(name)
        if cached is not None:
            return cached
        with self._lock:  # asked once, even when many threads ask at the same moment
            cached = self._devices.get(name)
            if cached is not None:
                return cached
            reg = self._providers[name]
            try:
                answer = reg.hooks.ort_ep_devices(provider=name)
            except Exception as exc:  # the provider is unusable here, and says why
                answer = EpDevices((), f"ort_ep_devices raised {type(exc).__name__}: {exc}")
                self._fail(self.pm.get_name(reg.plugin) or name, reg.package, f"{name}: {answer.unavailable_reason}")
            if answer is None:
                answer = EpDevices((), "the plugin reported no devices")
            self._devices[name] = answer
            return answer

    def available(self) -> list[str]:
        """Providers with at least one usable device, CPU provider last."""
        names = [n for n in self.providers() if self.devices(n).devices]
        return sorted(names, key=lambda n: (n == "CPUExecutionProvider", names.index(n)))

    @property
    def cross_cutting_hooks(self) -> Any:
        """Hook relay without any provider plugin (for hooks with no provider)."""
        provider_plugins = [p for p in self.pm.get_plugins() if self._provider_plugins.get(id(p))]
        return _HookSubset(self.pm, provider_plugins)


_REGISTRY: PluginRegistry | None = None
_REGISTRY_LOCK = threading.Lock()


def registry() -> PluginRegistry:
    """The process-wide registry, loading the entry-point group on first use."""
    global _REGISTRY
    if _REGISTRY is None:
        with _REGISTRY_LOCK:
            if _REGISTRY is None:
                _REGISTRY = PluginRegistry()
    return _REGISTRY


def register(plugin: Any, name: str | None = None) -> bool:
    """Register a plugin (a module or object with ``@hookimpl`` functions) in this process."""
    return registry().register(plugin, name)


def unregister(plugin: Any) -> None:
    """Remove a plugin registered with ``register``."""
    registry().unregister(plugin)


def plugin_failures() -> list[PluginFailure]:
    """Plugins that were found but could not be used, with the reason."""
    registry()._ensure_loaded()
    return list(registry().failures)
