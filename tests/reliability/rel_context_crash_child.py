"""A context-store writer for test_context_crash.py: runs the operations that change several
groups at once (remove_subtree, replace_skill, dequeue_job, put_document and put_memory with jobs,
put_commit, put_embedding_result, fail_job) in a seeded random loop on the LMDB store at `path`
until it is killed. Prints "ready" once its first operation committed."""

from __future__ import annotations

import random
import sys

import numpy as np

from hippograph.backends.lmdb import LMDB
from hippograph.context import ContextStore, SkillFile
from hippograph.errors import NotFoundError


def main(path: str, seed: int, durability: str) -> None:
    rng = random.Random(seed)
    ctx = ContextStore(LMDB(path, durability=durability), document_jobs=("embed", "layers"))
    session = ctx.create_session()
    print("ready", flush=True)
    step = 0
    while True:
        step += 1
        area = f"p{rng.randrange(4)}"
        op = rng.randrange(8)
        try:
            if op == 0:
                for i in range(rng.randrange(1, 6)):
                    ctx.put_document(f"{area}/d{rng.randrange(3)}/f{i}", f"text {step} {i}\nline two")
            elif op == 1:
                files = [SkillFile(("SKILL.md",), f"skill {step}")]
                files += [SkillFile(("lib", f"m{i}.py"), f"code {i}") for i in range(rng.randrange(0, 12))]
                ctx.replace_skill(f"skills/s{rng.randrange(3)}", files, owner="ops")
            elif op == 2:
                ctx.remove_subtree(rng.choice([area, f"{area}/d{rng.randrange(3)}", f"skills/s{rng.randrange(3)}"]))
            elif op == 3:
                job = ctx.dequeue_job(["embed", "layers"])
                if job is not None and job.uri is not None:
                    if job.kind == "embed":
                        ctx.put_embedding_result(job.id, job.uri, np.full(8, step % 5 + 1, np.float32))
                    elif rng.random() < 0.5:
                        ctx.put_layer_result(job.id, job.uri, "abstract", f"summary {step}")
                    else:
                        ctx.fail_job(job.id, "transient")
            elif op == 4:
                ctx.put_memory(f"{area}/mem/m{rng.randrange(4)}", f"value {rng.randrange(3)}", rng.random(),
                               status=rng.choice(["active", "candidate"]))  # fmt: skip
            elif op == 5:
                ctx.put_commit(session, f"{area}/commits/c{rng.randrange(3)}", f"committed {step}", f"h{step}")
            elif op == 6:
                ctx.promote_memory(f"{area}/mem/m{rng.randrange(4)}")
            else:
                ctx.append_message(session, "user", f"message {step}")
        except NotFoundError:
            pass  # removing or promoting what is not there: refused, nothing written


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
