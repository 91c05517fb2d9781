"""A job-queue worker process for test_context_queue.py: `threads` threads claim jobs of the kind
"work" from the LMDB context store at `path` until the queue is empty (starting once the file
`go` exists), logging every claim
(job id, attempts) and every completion to its own file. With `die_after` > 0 the process kills
itself (SIGKILL) right after that many claims, before completing the last one: a crash mid-job."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time

from hippograph.backends.lmdb import LMDB
from hippograph.context import ContextStore

STUCK_AFTER_S = 300


def main(path: str, log_path: str, threads: int, die_after: int, durability: str, go: str) -> None:
    ctx = ContextStore(LMDB(path, durability=durability))
    # A worker still running after five minutes is stuck: its threads' stacks go to stderr (which
    # the test shows) and it exits with status 1, which the test reports, instead of hanging it.
    faulthandler.dump_traceback_later(STUCK_AFTER_S, exit=True)
    print("ready", flush=True)
    while not os.path.exists(go):  # every worker starts at once: none drains the queue alone
        time.sleep(0.005)
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 - closed after the threads, or by the kill
    lock = threading.Lock()
    claims = [0]

    def work() -> None:
        while True:
            job = ctx.dequeue_job(["work"])
            if job is None:
                return
            with lock:
                log.write(f"claim {job.id} {job.attempts}\n")
                claims[0] += 1
                if die_after and claims[0] >= die_after:
                    log.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
            ctx.complete_job(job.id)
            with lock:
                log.write(f"done {job.id}\n")

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    log.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6])
