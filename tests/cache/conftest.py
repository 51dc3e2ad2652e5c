"""Every cache test gets an empty cache directory of its own, no remote cache, empty
counters and an empty in-memory layer."""
import pytest

import torchkiln
import torchkiln.aot
import torchkiln.codegen
from torchkiln.cache import clear_memory


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """The caches on (tests/conftest.py turns them off for the rest of the suite), in an
    empty directory; subprocesses inherit the environment."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCHKILN_FX_GRAPH_CACHE", "1")
    monkeypatch.setenv("TORCHKILN_AUTOGRAD_CACHE", "1")
    monkeypatch.setattr(torchkiln.codegen.config, "fx_graph_cache", True)
    monkeypatch.setattr(torchkiln.aot.config, "enable_autograd_cache", True)
    for var in ("TORCHKILN_REMOTE_CACHE", "TORCHKILN_CACHE_SECRET", "TORCHKILN_CACHE_SECRET_FILE",
                "TORCHKILN_CACHE_ALLOW_UNSIGNED", "TORCHKILN_CACHE_SIZE_LIMIT"):
        monkeypatch.delenv(var, raising=False)
    torchkiln.reset()
    clear_memory()
    yield tmp_path / "cache"
    torchkiln.reset()
    clear_memory()
