"""Smoke test of an installed wheel (run by .ci/run from a clean virtual environment, outside the
source tree): graph memory and the scoped store on LMDB, and the core's vector index built and
used with nothing but the wheel (no hnswlib, no compiler)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import hippograph as hg
from hippograph.backends import LMDB
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
    assert ann_available(), "the core's index ships in every wheel"
with hg.open_store("smoke", path=where / "r", embed=embed) as store:
    store.put(("users", "u1"), "diet", "vegetarian, allergic to peanuts")
    assert [h.entry.key for h in store.search(("users",), text="peanuts")] == ["diet"]
# 30k x 384 clustered: the core's index is built from the wheel alone and answers, with no fallback.
rng = np.random.default_rng(3)
centres = rng.standard_normal((75, 384)).astype(np.float32)
vectors = centres[rng.integers(0, 75, 30_000)] + 0.6 * rng.standard_normal((30_000, 384)).astype(np.float32)
backend = LMDB(where / "big", durability="fast")
for start in range(0, len(vectors), 5_000):
    cs = hg.Changeset()
    for i in range(start, start + 5_000):
        cs.add_node(hg.Semantic(id=f"n{i:05d}", embedding=vectors[i], proposition="", confidence=1.0))
    backend.apply_changeset(cs)
backend.build_vector_index()
stats = backend.vector_index_stats()["semantic"]
assert stats["available"] and stats["vectors"] == 30_000, stats
assert not stats["exact_fallback"], stats  # clustered data: the calibrated index beats the exact scan
found = backend.find_candidates([hg.NodeType.SEMANTIC], vectors[7], [], None)
assert found[0][0].id == "n00007", found[:3]
backend.close()
print(f"smoke ok: hippograph {hg.__version__}, numpy {sys.modules['numpy'].__version__}, index ef_search {stats['ef_search']}")
