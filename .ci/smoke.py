"""Smoke test of an installed wheel (run by .ci/run from a clean virtual environment, outside the
source tree): graph memory and the scoped store on LMDB, and the exact scan answering without hnswlib."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import hippograph as hg
from hippograph.embedding import HashingEmbedder
from hippograph.engine.vector_index import ann_available
from hippograph.structuring import episodic

assert "site-packages" in hg.__file__, f"hippograph imported from {hg.__file__}, not the installed wheel"
where = Path(tempfile.mkdtemp())
embed = HashingEmbedder(dim=64)
with hg.open_repo("smoke", path=where / "r") as repo:
    t = hg.Trajectory(source_id="s1", goal="fix the failing build", steps=[hg.Step("cargo fails", "add serde")])
    receipt = repo.ingest(t, episodic(embed, procedures=True))
    assert repo.ingest(t, episodic(embed, procedures=True)) == receipt
    hits = repo.recall(embed(["cargo fails"])[0])
    assert hits and all(h.node.id.startswith("s1:") for h in hits), hits
    stats = repo.vector_index_stats()["episodic"]
    with_ann = ann_available()
    assert with_ann or (stats["exact_fallback"] and "hippograph[ann]" in stats["fallback_reason"]), stats
with hg.open_store("smoke", path=where / "r", embed=embed) as store:
    store.put(("users", "u1"), "diet", "vegetarian, allergic to peanuts")
    assert [h.entry.key for h in store.search(("users",), text="peanuts")] == ["diet"]
print(f"smoke ok: hippograph {hg.__version__}, numpy {sys.modules['numpy'].__version__}, hnswlib present: {with_ann}")
