"""Variable trackers: symbolic stand-ins for every Python value capture meets.

One module per family: :mod:`.base` (the protocol and constants), :mod:`.tensor`,
:mod:`.containers`, :mod:`.functions`, :mod:`.user_defined`, :mod:`.nn_module`,
:mod:`.torch_fns`, :mod:`.ctx_manager`, :mod:`.builtin`, :mod:`.native` (container methods run
natively on proxies), :mod:`.generators`, :mod:`.copies`; :mod:`.builder` wraps real
values read from a source (installing guards).
"""

from . import copies as _copies

_copies.register()
