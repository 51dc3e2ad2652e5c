"""The tracker for ``torch.nn.Module`` instances.

Parameters and buffers are lifted as graph inputs with sources like
``L['self'].layer.weight`` (as TorchDynamo does with inline_inbuilt_nn_modules);
calling a module follows ``Module.__call__``: forward pre-hooks (``with_kwargs``,
``prepend`` order), ``forward`` (an instance-patched forward wins), forward hooks.
Lazy modules are initialised for real before tracing their forward.  Containers
(Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict) index and iterate;
``parameters()``, ``named_modules()`` etc. are answered in order, deduplicated.
"""
from __future__ import annotations

import types

import torch

from ...config import config
from ...exc import SkipFrame
from ..source import attr_source, item_source
from .base import ConstantVariable, MethodVariable, VariableTracker, unsupported
from .user_defined import _MISSING, generic_getattr, mro_lookup


def _child_source(source, name):
    if source is None:
        return None
    if name.isidentifier() and not name.startswith("__"):
        return attr_source(source, name)
    return f"{source}._modules[{name!r}]"


_SLICEABLE = (torch.nn.ModuleList, torch.nn.Sequential)  # exact types: their __getitem__ slices positionally


def _example(vt):
    """The example (fake) value of an argument tracker, through containers."""
    from .containers import BaseListVariable, DictVariable, NamedTupleVariable

    if hasattr(vt, "example"):
        return vt.example
    if isinstance(vt, NamedTupleVariable):
        return vt.tuple_cls(*[_example(i) for i in vt.items])
    if isinstance(vt, BaseListVariable):
        return vt.container_type([_example(i) for i in vt.items])
    if isinstance(vt, DictVariable):
        return {k.as_python_constant(): _example(v) for k, v in vt.items.values()}
    return vt.as_python_constant()


# nn.Module methods answered by NNModuleVariable.call_method rather than inlined.
_MODULE_API = {"parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
               "modules", "named_modules", "keys", "values", "items", "__len__", "__getitem__", "__contains__",
               "to", "cuda", "cpu", "train", "eval", "register_buffer", "register_parameter", "add_module",
               "register_forward_hook", "register_forward_pre_hook", "apply", "zero_grad", "requires_grad_",
               "state_dict", "load_state_dict", "half", "float", "double", "__iter__"}


def _plain_attribute_lookup(mod: torch.nn.Module) -> None:
    """Graph-break unless ``mod``'s attributes are looked up as ``object`` does: capture
    reads them from the instance and class dicts, where a Python ``__getattribute__``
    could answer anything.  The lookup is recorded, so a class that gains one after
    capture fails the guard."""
    if mro_lookup(type(mod), "__getattribute__") is not object.__getattribute__:
        unsupported(f"{type(mod).__name__} defines __getattribute__")


_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOK_DICTS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                      "_global_backward_pre_hooks")


def _guard_hooks(tx, src: str, mod) -> None:
    """The module's hook dicts have the lengths capture saw (its forward hooks were
    inlined; a backward hook registered later must recompile: capture breaks on one).
    All empty, the usual case, is one check."""
    g = tx.output.guards
    if not any(getattr(mod, d) for d in _HOOK_DICTS):
        g.add(f"not ({' or '.join(f'{src}.{d}' for d in _HOOK_DICTS)})")
        return
    for d in _HOOK_DICTS:
        g.add(f"len({src}.{d}) == {len(getattr(mod, d))}")


def _guard_no_global_hooks(tx) -> None:
    """No global module hook (``register_module_forward_hook`` & co.) is registered: capture
    inlined module calls without them (it breaks on one)."""
    from ..source import globals_dict_name

    nn_mod = torch.nn.modules.module
    name = globals_dict_name(nn_mod.__name__)
    tx.output.guards.env[name] = nn_mod.__dict__
    tx.output.guards.add(f"not ({' or '.join(f'{name}[{d!r}]' for d in _GLOBAL_HOOK_DICTS)})")



def _rnn_runs_eagerly(mod) -> bool:
    """Whether an nn.RNN/GRU/LSTM stays out of graphs: its parameters are on CUDA."""
    return any(p.is_cuda for p in mod.parameters(recurse=False))

class NNModuleVariable(VariableTracker):
    def __init__(self, value: torch.nn.Module, source=None, child_sources: dict | None = None):
        self.value = value
        self.source = source
        # a slice of a container: its children's sources on the sliced container (so the
        # guard reads them there instead of building the slice on every call); the slice's
        # own structure follows from the container's guarded type and keys
        self.child_sources = child_sources

    def _child(self, name):
        if self.child_sources is not None:
            return self.child_sources[name]
        return _child_source(self.source, name)

    def python_type(self):
        return type(self.value)

    def truth(self, tx):
        return True

    def _guard_keys(self, tx, *dicts):
        if self.source is None or self.child_sources is not None:
            return  # a slice's keys: the sliced container's (guarded there)
        for d in dicts:
            tx.output.guards.add(f"list({self.source}.{d}.keys()) == {tx.output.guards.const(list(getattr(self.value, d)))}")

    def var_getattr(self, tx, name):
        from .builder import wrap, wrap_constant_like

        mod = self.value
        pending = tx.output.side_effects.load_attr(self, name)
        if pending is not None:
            return pending
        _plain_attribute_lookup(mod)
        if name in _MODULE_API and name not in mod.__dict__:
            owner = mro_lookup(type(mod), name)
            if owner is not _MISSING and getattr(owner, "__module__", "").startswith("torch.nn"):
                return MethodVariable(self, name)
        if name == "forward" and self.source is not None:
            tx.output.guards.add(f"'forward' {'in' if 'forward' in mod.__dict__ else 'not in'} {self.source}.__dict__")
        if name in mod.__dict__ or mro_lookup(type(mod), name) is not _MISSING:
            return generic_getattr(tx, self, mod, name)
        for d in ("_parameters", "_buffers"):
            if name in mod.__dict__.get(d, {}):
                value = mod.__dict__[d][name]
                if value is None:
                    return ConstantVariable(None)
                return wrap(tx, value, attr_source(self.source, name)) if self.source else wrap_constant_like(tx, value)
        if name in mod.__dict__.get("_modules", {}):
            sub = mod._modules[name]
            if sub is None:
                return ConstantVariable(None)
            return wrap(tx, sub, self._child(name)) if self.source else NNModuleVariable(sub)
        return generic_getattr(tx, self, mod, name)

    # -- calling --------------------------------------------------------------------------
    def call_function(self, tx, args, kwargs):
        call = mro_lookup(type(self.value), "__call__")
        if call is not torch.nn.Module.__call__ and isinstance(call, types.FunctionType):
            from .functions import UserFunctionVariable

            return UserFunctionVariable(call).call_function(tx, [self, *args], kwargs)
        return self.call_module(tx, args, kwargs)

    def call_module(self, tx, args, kwargs):
        """``Module.__call__`` itself: hooks around ``forward``."""
        from .builder import wrap
        from .containers import DictVariable, TupleVariable

        mod = self.value
        _plain_attribute_lookup(mod)  # Module.__call__ reads forward, hooks, training
        nn_mod = torch.nn.modules.module
        if isinstance(mod, torch.nn.RNNBase) and not config.allow_rnn and _rnn_runs_eagerly(mod):
            # as torch.compile (allow_rnn=False): the cell loop the lowering would unroll is
            # 2.6x slower than cuDNN's fused RNN kernel (H100, bench lstm training).  Called
            # from the frame itself, the whole frame runs eagerly, as torch.compile's: its
            # break arises where the module is read, where its root frame cannot break, so
            # it skips the frame (H100 lstm: compiling the embedding and the decoder around
            # the break took 3.2 s cold against torch.compile's 0.15 s and ran no faster).
            # Inlined from a call, the break is at the frame's call of that function.
            reason = "nn.RNN/GRU/LSTM on CUDA runs eagerly on cuDNN's kernel (config.allow_rnn=False)"
            if tx.root is tx:
                raise SkipFrame(reason)
            unsupported(reason)
        if (nn_mod._global_forward_hooks or nn_mod._global_forward_pre_hooks or
                getattr(nn_mod, "_global_forward_hooks_always_called", None)):
            unsupported("global nn.Module forward hooks")
        if mod._backward_hooks or mod._backward_pre_hooks or nn_mod._global_backward_hooks or \
                nn_mod._global_backward_pre_hooks:
            unsupported("nn.Module with backward hooks")
        if isinstance(mod, torch.nn.modules.lazy.LazyModuleMixin) and hasattr(mod, "_initialize_hook"):
            # Lazy modules are initialised for real (outside the fake mode) before tracing.
            mod._infer_parameters(mod, tuple(_example(a) for a in args))
        src = self.source
        _guard_no_global_hooks(tx)
        if src is not None:
            _guard_hooks(tx, src, mod)
        args = list(args)
        for hook_id, hook in list(mod._forward_pre_hooks.items()):
            hook_vt = wrap(tx, hook, item_source(f"{src}._forward_pre_hooks", hook_id) if src else None)
            if hook_id in mod._forward_pre_hooks_with_kwargs:
                kw_vt = DictVariable({k: (ConstantVariable(k), v) for k, v in kwargs.items()})
                result = hook_vt.call_function(tx, [self, TupleVariable(args), kw_vt], {})
                if not (isinstance(result, ConstantVariable) and result.value is None):
                    new_args, new_kwargs = result.unpack_var_sequence(tx)
                    args = new_args.unpack_var_sequence(tx)
                    kwargs = {k.as_python_constant(): v for k, v in new_kwargs.items.values()}
            else:
                result = hook_vt.call_function(tx, [self, TupleVariable(args)], {})
                if not (isinstance(result, ConstantVariable) and result.value is None):
                    args = result.unpack_var_sequence(tx) if isinstance(result, TupleVariable) else [result]
        out = self.var_getattr(tx, "forward").call_function(tx, args, kwargs)
        for hook_id, hook in list(mod._forward_hooks.items()):
            hook_vt = wrap(tx, hook, item_source(f"{src}._forward_hooks", hook_id) if src else None)
            if hook_id in mod._forward_hooks_with_kwargs:
                kw_vt = DictVariable({k: (ConstantVariable(k), v) for k, v in kwargs.items()})
                result = hook_vt.call_function(tx, [self, TupleVariable(args), kw_vt, out], {})
            else:
                result = hook_vt.call_function(tx, [self, TupleVariable(args), out], {})
            if not (isinstance(result, ConstantVariable) and result.value is None):
                out = result
        return out

    # -- containers and module API -------------------------------------------------------
    def _children(self, tx):
        self._guard_keys(tx, "_modules")
        return [(name, self._wrap_child(tx, name, m)) for name, m in self.value._modules.items() if m is not None]

    def _wrap_child(self, tx, name, m):
        from .builder import wrap

        return wrap(tx, m, self._child(name)) if self.source else NNModuleVariable(m)

    def _named(self, tx, kind, recurse=True, prefix="", remove_duplicate=True):
        from .builder import wrap, wrap_constant_like

        result = []
        seen = set()
        modules = self.value.named_modules(prefix="", remove_duplicate=True) if recurse else [("", self.value)]
        for mod_name, m in modules:
            mod_src = self.source
            for part in mod_name.split(".") if mod_name else []:
                mod_src = _child_source(mod_src, part)
            if mod_src is not None:
                tx.output.guards.add(f"list({mod_src}.{kind}.keys()) == {tx.output.guards.const(list(getattr(m, kind)))}")
                tx.output.guards.add(f"list({mod_src}._modules.keys()) == {tx.output.guards.const(list(m._modules))}")
            for name, value in getattr(m, kind).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                full = (prefix + "." if prefix else "") + (mod_name + "." if mod_name else "") + name
                src = attr_source(mod_src, name) if mod_src else None
                result.append((full, wrap(tx, value, src) if src else wrap_constant_like(tx, value)))
        return result

    def call_method(self, tx, name, args, kwargs):
        from .containers import ListIteratorVariable, TupleVariable

        mod = self.value
        own = mro_lookup(type(mod), name)
        if isinstance(own, types.FunctionType) and not (own.__module__ or "").startswith("torch.nn"):
            return generic_getattr(tx, self, mod, name).call_function(tx, args, kwargs)
        cargs = [a.as_python_constant() for a in args] if all(a.is_python_constant() for a in args) else None
        ckw = {k: v.as_python_constant() for k, v in kwargs.items()} if all(
            v.is_python_constant() for v in kwargs.values()) else None
        if name in ("parameters", "named_parameters", "buffers", "named_buffers") and cargs is not None:
            kind = "_parameters" if "param" in name else "_buffers"
            params = dict(zip(["prefix", "recurse", "remove_duplicate"] if name.startswith("named") else ["recurse"], cargs))
            params.update(ckw)
            items = self._named(tx, kind, params.get("recurse", True), params.get("prefix", ""),
                                params.get("remove_duplicate", True))
            if name.startswith("named"):
                return ListIteratorVariable([TupleVariable([ConstantVariable(n), v]) for n, v in items])
            return ListIteratorVariable([v for _, v in items])
        if name in ("children", "named_children"):
            items = self._children(tx)
            seen, result = set(), []
            for n, v in items:
                if id(v.value) not in seen:
                    seen.add(id(v.value))
                    result.append(TupleVariable([ConstantVariable(n), v]) if name == "named_children" else v)
            return ListIteratorVariable(result)
        if name in ("modules", "named_modules") and cargs is not None:
            result = []
            for mod_name, m in mod.named_modules(*cargs, **ckw) if name == "named_modules" else mod.named_modules():
                src = self.source
                for part in mod_name.split(".")[len((ckw or {}).get("prefix", "").split(".")) if ckw and ckw.get("prefix") else 0:] if mod_name else []:
                    src = _child_source(src, part)
                if src is not None:
                    tx.output.guards.add(f"list({src}._modules.keys()) == {tx.output.guards.const(list(m._modules))}")
                vt = self._wrap_any(tx, m, src)
                result.append(TupleVariable([ConstantVariable(mod_name), vt]) if name == "named_modules" else vt)
            return ListIteratorVariable(result)
        if name == "__len__":
            return ConstantVariable(len(self.unpack_var_sequence(tx)))
        if name == "__iter__":
            from .containers import ListIteratorVariable as _It

            return _It(self.unpack_var_sequence(tx))
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name in ("keys", "values", "items") and isinstance(mod, (torch.nn.ModuleDict, torch.nn.ParameterDict)):
            pairs = self._dict_items(tx)
            if name == "keys":
                return ListIteratorVariable([ConstantVariable(k) for k, _ in pairs])
            if name == "values":
                return ListIteratorVariable([v for _, v in pairs])
            return ListIteratorVariable([TupleVariable([ConstantVariable(k), v]) for k, v in pairs])
        if name == "__contains__" and isinstance(mod, (torch.nn.ModuleDict, torch.nn.ParameterDict)):
            return ConstantVariable(args[0].as_python_constant() in mod)
        if name in ("to", "cuda", "cpu", "train", "eval", "register_buffer", "register_parameter", "add_module",
                    "register_forward_hook", "register_forward_pre_hook", "apply", "zero_grad", "requires_grad_",
                    "state_dict", "load_state_dict", "half", "float", "double"):
            unsupported(f"nn.Module.{name}() inside a compiled frame")
        if name == "__call__":
            return self.call_function(tx, args, kwargs)
        return generic_getattr(tx, self, mod, name).call_function(tx, args, kwargs)

    def _wrap_any(self, tx, m, src):
        from .builder import wrap

        return wrap(tx, m, src) if src is not None else NNModuleVariable(m)

    def _dict_items(self, tx):
        from .builder import wrap, wrap_constant_like

        mod = self.value
        if isinstance(mod, torch.nn.ModuleDict):
            return self._children(tx)
        self._guard_keys(tx, "_parameters")
        return [(k, wrap(tx, v, item_source(self.source, k)) if self.source else wrap_constant_like(tx, v))
                for k, v in mod.items()]

    def getitem(self, tx, index_vt):
        from .builder import wrap, wrap_constant_like

        mod = self.value
        index = index_vt.as_python_constant()
        if isinstance(mod, (torch.nn.ModuleDict, torch.nn.ParameterDict)):
            value = mod[index]
            src = item_source(self.source, index)
            return wrap(tx, value, src) if src else wrap_constant_like(tx, value)
        if isinstance(mod, (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ParameterList)):
            self._guard_keys(tx, "_modules" if not isinstance(mod, torch.nn.ParameterList) else "_parameters")
            value = mod[index]
            if self.child_sources is not None and not isinstance(index, slice):
                return wrap(tx, value, self.child_sources[list(mod._modules)[index]])
            if self.source and type(mod) in _SLICEABLE and type(index) is int:
                # ``layers[i]`` is the i-th of the (guarded) keys: read as ``layers._modules[key]``
                # in guards and inputs, not through the container's Python __getitem__ (~1 us)
                tx.output.guards.class_lookup(type(mod), "__getitem__")
                return wrap(tx, value, self._child(list(mod._modules)[index]))
            src = item_source(self.source, index)
            if isinstance(index, slice) and src and type(mod) in _SLICEABLE and type(value) is type(mod):
                return self._slice(tx, value, index, src)
            return wrap(tx, value, src) if src else wrap_constant_like(tx, value)
        getitem = mro_lookup(type(mod), "__getitem__")
        if getitem is not _MISSING:
            return self.var_getattr(tx, "__getitem__").call_function(tx, [index_vt], {})
        unsupported(f"indexing {type(mod).__name__}")

    def _slice(self, tx, value, index, src):
        """``container[a:b]`` of a ModuleList or Sequential: a new container of the same
        type holding the items at those positions (renumbered in a ModuleList).  Its
        children's sources are the sliced container's, so the guard never builds the
        slice (``layers[:n]``: a ModuleList made per call, ~17 us on hf_llama).  The
        container's type and keys are guarded (by the caller), and so is what the slice is
        made by: the class's ``__getitem__`` and ``__init__``."""
        for name in ("__getitem__", "__init__"):
            tx.output.guards.class_lookup(type(self.value), name)
        originals = list(self.value._modules)[index]
        children = {new: self._child(old) for new, old in zip(value._modules, originals)}
        return NNModuleVariable(value, src, children)

    def unpack_var_sequence(self, tx):
        mod = self.value
        if isinstance(mod, torch.nn.ModuleDict):
            return [ConstantVariable(k) for k, _ in self._children(tx)]
        if isinstance(mod, torch.nn.ParameterDict):
            return [ConstantVariable(k) for k, _ in self._dict_items(tx)]
        if isinstance(mod, torch.nn.ParameterList):
            self._guard_keys(tx, "_parameters")
            return [self.getitem(tx, ConstantVariable(i)) for i in range(len(mod))]
        if isinstance(mod, (torch.nn.ModuleList, torch.nn.Sequential)) or mro_lookup(type(mod), "__iter__") is _MISSING:
            return [v for _, v in self._children(tx)]
        unsupported(f"iterating {type(mod).__name__}")

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.from_source(self.source)
        value = self.value
        return lambda rt: value

    def __repr__(self):
        return f"NNModuleVariable({type(self.value).__name__})"
