"""Warm start for more frame kinds (capture/warm_start.py): a graph that mutates its
inputs (BatchNorm training), LSTM guards on weak references, a torch closure named by
where torch publishes it, attribute stores replayed after the graph, a transformers
ModelOutput result, a decorated forward found as its class's attribute; a guard on a
local function's code object (in process).  Two subprocesses (cold, then warm); each kind is checked
against eager, hits without capture when nothing changed, and captures again when a
guard fails, including a mutated input that aliases another one (which the loaded
graph could not run)."""
import enum
import json

from ._subprocess import run_worker


def _run(phase):
    return run_worker("tests.cache._warm_kinds_worker", phase)


def test_more_frame_kinds_load_from_records(fresh_cache):
    cold = _run("cold")
    assert cold["ok"], cold
    for name, f in cold["frames"].items():
        assert f["captured"] >= 1 and f["saved"] == 1 and f["not_recordable"] == 0, (name, f)

    warm = _run("warm")
    assert warm["ok"], warm  # every result (and BatchNorm's statistics and gradients) equals eager's
    frames = warm["frames"]
    for name in ("bn_step", "lstm_same", "pooled", "store_after", "decorated", "model_output", "rope_same"):
        if name not in frames:  # model_output needs transformers
            continue
        assert frames[name]["hit"] == 1 and frames[name]["captured"] == 0, (name, frames[name])
    # another sequence length: the record is not used (a size guard, then automatic dynamic's
    # other key); the frame goes through capture, with eager's result
    other = frames["lstm_call"]
    assert other["hit"] == 0 and other["miss"] + other["bypass"] >= 1, other
    # the mutated input is a view of the other input: the loaded graph cannot run it
    alias = frames["add_to_buffer"]
    assert alias["captured"] >= 1 and alias["hit"] == 0, alias
    assert any("shares storage with another input" in line for line in alias["log"]), alias
    # a decorated forward found through its class: its live defaults changed, capture runs
    changed = frames["rope_changed"]
    assert changed["hit"] == 0 and changed["captured"] == 1, changed
    assert any("the defaults of" in line for line in changed["log"]), changed
    # the side-effect frame with another dtype: its guard fails, capture runs (and stores)
    assert frames["store_other"]["hit"] == 0 and frames["store_other"]["bypass"] == 1, frames["store_other"]


def make_scaler(k):
    def scale(x):
        return x * k
    return scale


def deprecate_arg(name):  # a decorator factory, as transformers' ``deprecate_kwarg``
    def wrapper(func):
        def wrapped_func(*args, **kwargs):
            kwargs.pop(name, None)
            return func(*args, **kwargs)
        return wrapped_func
    return wrapper


def test_code_of_a_decorator_factory_is_named_through_its_outermost_function():
    """``deprecate_arg.<locals>.wrapper.<locals>.wrapped_func`` (transformers 5.17's BERT and
    GPT-2 forwards, on the H100): ``wrapper`` cannot be resolved by name, ``deprecate_arg``
    can; the code is found two ``co_consts`` levels down (no record was saved before)."""
    from torchkiln.capture import warm_start

    code = deprecate_arg("old")(make_scaler).__code__
    desc = warm_start.encode(code)
    assert desc[0] == "nested_code" and desc[2] == "deprecate_arg" and len(desc[3]) == 2, desc
    assert warm_start.decode(json.loads(json.dumps(desc))) is code


class Action(enum.Enum):  # as transformers' utils.deprecation.Action
    NONE = "none"
    RAISE = "raise"


def test_enum_member_is_named_by_its_class():
    """An enum member guarded as a constant (transformers 5.17's ``deprecate_kwarg`` closes
    over ``Action.NONE``) is recorded by class and member name and resolves to the same
    member; a member that is gone is a bypass."""
    from torchkiln.capture import warm_start

    desc = warm_start.encode(Action.NONE)
    assert desc == ["enum", __name__, "Action", "NONE"], desc
    assert warm_start.decode(json.loads(json.dumps(desc))) is Action.NONE
    try:
        warm_start.decode(desc[:3] + ["GONE"])
    except warm_start._Bypass:
        pass
    else:
        raise AssertionError("a missing member was accepted")


def test_local_function_code_is_named_through_its_outer_function():
    """A local function's code object (guarded by identity, e.g. torch.compiler.disable's
    ``_fn``) is described by its named outer function and the path to it; a changed
    digest is a bypass, never another code object."""
    from torchkiln.capture import warm_start

    code = make_scaler(2.0).__code__
    desc = warm_start.encode(code)
    assert desc[0] == "nested_code" and desc[2] == "make_scaler"
    assert warm_start.decode(json.loads(json.dumps(desc))) is code
    desc[4] = "0" * 64
    try:
        warm_start.decode(desc)
    except warm_start._Bypass as e:
        assert "changed source" in str(e)
    else:
        raise AssertionError("a changed digest was accepted")
