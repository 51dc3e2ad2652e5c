"""``torchkiln cache dir|stats|clear``."""
import torch

import torchkiln
from torchkiln.cache.store import flush_stats
from torchkiln.cli import main


def test_cache_dir_stats_clear(fresh_cache, capsys):
    x = torch.randn(4, 4)
    torchkiln.compile(lambda a: (a.sin() * 2,))(x)
    flush_stats()
    assert main(["cache", "dir"]) == 0
    assert capsys.readouterr().out.strip() == str(fresh_cache)
    assert main(["cache", "stats"]) == 0
    out = capsys.readouterr().out
    assert "fxgraph" in out and "aotautograd" in out and "FX graph" in out
    fx_row = next(line for line in out.splitlines() if "fxgraph" in line)
    assert fx_row.split()[2] != "0"  # one entry (the row: border, name, entries, bytes)
    assert main(["cache", "clear"]) == 0
    assert not fresh_cache.exists()
