"""Without the `ann` extra (no hnswlib, which builds from source): the core's own vector index is built
and answers, as a wheel installed where nothing compiles has it; a store configured for hnswlib answers
with the exact scan and its statistics say why. Run in a child process where ``import hnswlib`` fails."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import json, sys
    sys.modules["hnswlib"] = None  # `import hnswlib` raises ImportError, as without the extra
    import numpy as np
    import hippograph as hg
    from hippograph.backends import LMDB
    from hippograph.cli import main
    from hippograph.embedding import HashingEmbedder
    from hippograph.structuring import episodic

    where = sys.argv[1]
    embed = HashingEmbedder(dim=32)
    out = {}
    with hg.open_store("s", path=where + "/s", embed=embed) as store:
        store.put_many([{"scope": ("u", str(i % 3)), "key": f"k{i}", "text": f"note {i} apple"} for i in range(300)])
        out["search"] = [h.entry.key for h in store.search(("u",), text="note 7 apple", limit=3)]
        out["exact"] = [h.entry.key for h in store.search(("u",), vector=embed(["note 7 apple"])[0], limit=3)]
        out["built"] = store.build_vector_index()
        out["store_stats"] = store.vector_index_stats()
    core = hg.AnnConfig(min_nodes=100, background=False, min_speedup=0)
    with hg.open_store("c", path=where + "/c", embed=embed, ann=core) as store:
        store.put_many([{"scope": ("u", str(i % 3)), "key": f"k{i}", "text": f"note {i} apple"} for i in range(300)])
        out["core_built"] = store.build_vector_index()
        out["core_search"] = [h.entry.key for h in store.search(("u",), vector=embed(["note 7 apple"])[0], limit=3)]
        out["core_stats"] = store.vector_index_stats()
    hnsw = hg.AnnConfig(engine="hnswlib")
    with hg.Repo(LMDB(where + "/r", ann=hnsw)) as repo:
        repo.ingest(hg.Trajectory(source_id="a", goal="fix the build", steps=[hg.Step("look", "act")]), episodic(embed))
        out["recall"] = [h.node.id for h in repo.recall(embed(["fix the build"])[0])]
        out["repo_stats"] = repo.vector_index_stats()["episodic"]
    main(["index", "--path", where + "/r"])
    print(json.dumps(out))
    """
)


def test_without_hnswlib_the_core_index_answers_and_an_hnswlib_store_says_why(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    *cli, last = run.stdout.strip().splitlines()
    out = json.loads(last)
    assert out["search"][0] == "k7" and out["exact"][0] == "k7" and out["built"] is False  # 300 rows: too few
    assert out["core_built"] is True and out["core_search"][0] == "k7"
    assert out["core_stats"]["available"] is True and out["core_stats"]["exact_fallback"] is False
    assert out["recall"] and all(node_id.startswith("a:") for node_id in out["recall"])
    stats = out["repo_stats"]
    assert stats["available"] is False and stats["exact_fallback"] is True
    assert "hippograph[ann]" in stats["fallback_reason"] and "exact scan" in stats["fallback_reason"]
    assert any("recall scans exactly" in line for line in cli)
