"""Running untrusted code (a student's functions, a student's notebook) in a child process that cannot harm the
machine that grades it, as far as plain Linux allows without a container.

Every run gets:

* its own working folder (also its ``HOME`` and ``TMPDIR``), created fresh and removed afterwards;
* an environment reduced to an allow-list (:data:`ENV_ALLOWED`): no tokens, no proxies, no instructor paths;
* resource limits set before the program starts (``RLIMIT_CPU``, ``RLIMIT_AS``, ``RLIMIT_FSIZE``,
  ``RLIMIT_NPROC``, no core files) and a wall-clock time-out that kills the whole process tree;
* where the system allows it (:func:`probe`), Linux namespaces through util-linux ``unshare``: a network namespace
  with only its own loopback (no route out), an IPC namespace (no System V shared memory outlives the run), a PID
  namespace (every process it starts dies with it, none can escape the time-out), a mount namespace in which the run's folder is ``/tmp``, ``/var/tmp`` and ``/dev/shm``
  are its own, the folders it must not read (the class, the grader's output) are hidden under an empty tmpfs and
  the grader's home is replaced by an empty tmpfs (the Python installation under it bound back read-only); and,
  run as root, an unprivileged user id of its own (``setpriv``, no capabilities, no new privileges), so the
  instructor's files and model cache are not writable.

As root it also gets a cgroup holding the memory and processes of all its processes together (:func:`_cgroup`,
v2 or v1) and a working folder that is a tmpfs of its own size (:func:`make_run_folder`), and every other
world-writable folder (:func:`world_writable`, e.g. ``/run/lock``) is hidden. The grader reads back nothing by name
that a run could swap for a link or a named pipe (:func:`read_run_file`), and removes a run's folder with ``rm -rf``
(:func:`remove_tree`).

What it cannot prevent on plain Linux (say so to whoever grades): reading world-readable files of the system (the
installed packages and the workbench's source; the grader hides the master notebooks), using CPU up to its limits,
and kernel exploits. A container (``docker run --network none --read-only ...``, see the book's command-line page)
adds a separate file system.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import random
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ENV_ALLOWED = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "WORKBENCH_MULTI30K")  # copied from the grader's
UID_RANGE = (200_000, 2**31 - 2)  # unprivileged user ids drawn for runs as root (no user owns them)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run."""

    wall_seconds: float = 120.0  # wall-clock time-out: the process tree is killed after it
    cpu_seconds: int = 120  # RLIMIT_CPU (the process gets SIGXCPU, then SIGKILL)
    memory_bytes: int = 4 * 2**30  # RLIMIT_AS: address space of each process (an allocation past it fails)
    file_bytes: int = 256 * 2**20  # RLIMIT_FSIZE: largest file it may write
    processes: int = 128  # RLIMIT_NPROC: processes and threads of its user id (only enforced off root's uid)
    disk_bytes: int = 2**30  # size of the run's own folder (a tmpfs, where the system allows): its /tmp
    threads: int = 1  # OMP_NUM_THREADS / MKL_NUM_THREADS given to it


@dataclasses.dataclass(frozen=True)
class Isolation:
    """What :func:`probe` found this system allows; recorded in every gradebook."""

    namespaces: bool  # network + PID + mount namespaces through `unshare`
    own_uid: bool  # runs under an unprivileged uid of its own (the grader is root and `setpriv` exists)
    user_namespace: bool  # not root: `unshare -rn` (network only, same user)
    cgroup: bool = False  # its memory (tmpfs pages included) and processes limited together, in a cgroup of its own
    own_disk: bool = False  # its folder is a tmpfs of Limits.disk_bytes: filling it fills no one else's disk

    def describe(self) -> str:
        """One paragraph: what a sandboxed run can and cannot reach."""
        parts = ["own working folder as HOME and TMPDIR", "environment reduced to " + ", ".join(ENV_ALLOWED),
                 "limits on CPU seconds, address space, file size and processes", "wall-clock time-out"]
        if self.namespaces:
            parts += ["no network (own network namespace, loopback only)",
                      "own PID namespace (all its processes die with it)",
                      "own IPC namespace (no shared memory outlives it)",
                      "own mount namespace: /tmp, /var/tmp and /dev/shm are its folder, the class folder and "
                      "grader output hidden, the grader's home replaced by an empty tmpfs (Python bound back "
                      "read-only)"]
        elif self.user_namespace:
            parts += ["no network (user + network namespace)", "SAME USER AS THE GRADER: it can write whatever "
                      "the grader's user can (run as root, or in a container, to prevent it)"]
        else:
            parts += ["NETWORK REACHABLE and SAME USER AS THE GRADER (no namespaces on this system): run the "
                      "grader in a container"]
        if self.namespaces:
            parts.append("world-writable folders such as /run/lock hidden (nothing it writes outlives it)")
        if self.own_uid:
            parts.append("unprivileged user id of its own (no capabilities): cannot write the instructor's files "
                         "or model cache; can read world-readable files")
        parts.append("memory and processes of the whole run limited together (a cgroup of its own)" if self.cgroup
                     else "MEMORY LIMITED PER PROCESS ONLY (no cgroup here): many processes can together use more")
        if self.own_disk:
            parts.append("its folder a tmpfs of fixed size (it cannot fill the grader's disk)")
        return "; ".join(parts)


def _works(argv: Sequence[str]) -> bool:
    try:
        return subprocess.run(list(argv), capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=1)
def probe() -> Isolation:
    """Find once which isolation this system allows (each mechanism tried, never assumed)."""
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return Isolation(False, False, False)
    root = os.geteuid() == 0
    full = root and _works(["unshare", "--net", "--pid", "--mount", "--ipc", "--fork", "--kill-child", "--mount-proc",
                            "sh", "-c", "mount --make-rprivate / && ip link set lo up"])
    own_uid = full and shutil.which("setpriv") is not None and _works(
        ["setpriv", f"--reuid={UID_RANGE[0]}", f"--regid={UID_RANGE[0]}", "--clear-groups", "--no-new-privs",
         "--bounding-set=-all", "--inh-caps=-all", "true"])
    userns = not full and _works(["unshare", "-rn", "true"])
    groups = _cgroup(Limits()) if own_uid else []
    _release_cgroup(groups)
    disk = False
    if own_uid:
        folder = make_run_folder(Path(tempfile.gettempdir()), "workbench-probe", Limits(disk_bytes=2**20))
        disk = os.path.ismount(folder)
        remove_tree(folder)
    return Isolation(full, own_uid, userns, cgroup=bool(groups), own_disk=disk)


@dataclasses.dataclass
class RunResult:
    """How a sandboxed run ended."""

    returncode: int | None  # None: killed at the time-out or by the watch
    timed_out: bool
    seconds: float
    output: str  # the last lines of its stdout and stderr together
    stopped_by: str | None = None  # the reason the caller's watch gave for stopping it

    @property
    def killed(self) -> bool:
        """Ended by SIGKILL: a limit, or the kernel's out-of-memory killer. ``unshare --kill-child`` before util-linux
        2.40 reports its child's SIGKILL as exit status 1 and "sigprocmask unblock failed" (util-linux#2614)."""
        return self.returncode == -signal.SIGKILL or (self.returncode == 1
                                                      and "sigprocmask unblock failed" in self.output)

    def reason(self, limits: Limits) -> str:
        """One line: why it stopped (or "exit status 0")."""
        if self.stopped_by:
            return self.stopped_by
        if self.killed and not self.timed_out:
            return "was killed (memory, CPU or process limit)"
        if self.timed_out:
            return f"ran past the time-out of {limits.wall_seconds:.0f} s and was stopped"
        code = self.returncode
        if code is not None and code < 0:
            sig = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            why = {"SIGXCPU": f"ran past its CPU limit of {limits.cpu_seconds} s", "SIGKILL": "was killed (memory, "
                   "CPU or process limit)", "SIGXFSZ": f"wrote a file past the limit of {limits.file_bytes >> 20} MB"}
            return why.get(sig, f"was stopped by {sig}")
        last = [line for line in self.output.strip().splitlines() if line.strip()]
        return f"exit status {code}" + (f": {last[-1][:200]}" if last and code else "")


def _limit(limits: Limits, group: Sequence[Path] = ()) -> None:  # runs in the child between fork and exec
    os.setsid()
    for one in group or ():  # the whole run in its cgroups: memory and processes counted together, tmpfs pages too
        (one / "cgroup.procs").write_text(str(os.getpid()))
    for what, value in ((resource.RLIMIT_CPU, limits.cpu_seconds), (resource.RLIMIT_AS, limits.memory_bytes),
                        (resource.RLIMIT_FSIZE, limits.file_bytes), (resource.RLIMIT_NPROC, limits.processes),
                        (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(what, (value, value))


def _mount_script(work: Path, hide: Sequence[Path], keep: Sequence[Path]) -> str:
    """The shell commands run as root inside the new namespaces before the program: see the module docstring."""
    q = shlex.quote
    lines = ["set -e", "mount --make-rprivate /", "ip link set lo up"]
    for folder in hide:
        if folder.is_dir():
            lines.append(f"mount -t tmpfs -o size=64k,mode=755,ro none {q(str(folder))}")
    home = Path(os.path.expanduser("~")).resolve()
    kept = sorted({p for p in keep if p.exists() and home in p.parents}, key=lambda p: len(p.parts))
    if home != Path("/") and home.is_dir():
        stage = work / ".stage"
        lines.append(f"mkdir -p {q(str(stage))}")
        for i, path in enumerate(kept):
            lines.append(f"mkdir -p {q(str(stage / str(i)))} && mount --bind {q(str(path))} {q(str(stage / str(i)))}")
        lines.append(f"mount -t tmpfs -o size=1m,mode=755 none {q(str(home))}")
        for i, path in enumerate(kept):
            lines += [f"mkdir -p {q(str(path))} && mount --bind {q(str(stage / str(i)))} {q(str(path))}",
                      f"mount -o remount,bind,ro {q(str(path))}", f"umount {q(str(stage / str(i)))}"]
        lines.append(f"rm -rf {q(str(stage))}")
        # a folder bound back (non-recursively) lost the tmpfs hiding what lies inside it: hide those again
        for folder in hide:
            if folder.is_dir() and any(path in folder.parents for path in kept):
                lines.append(f"mount -t tmpfs -o size=64k,mode=755,ro none {q(str(folder))}")
    for folder in world_writable():  # e.g. /run/lock: files written there would outlive the run
        if folder == work or folder in work.parents:  # a TMPDIR elsewhere than /tmp holds the run's own folder
            continue
        lines.append(f"mount -t tmpfs -o size=64k,mode=755,ro none {q(str(folder))} || true")
    lines += [f"mount --bind {q(str(work))} /var/tmp", f"mount --bind {q(str(work))} /dev/shm",
              f"mount --bind {q(str(work))} /tmp"]
    return "\n".join(lines)


FS_TYPES = ("ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "vfat", "f2fs", "fuseblk", "9p")


@functools.lru_cache(maxsize=1)
def world_writable() -> tuple[Path, ...]:
    """Folders any user may write in, on every local file system but those a run gets its own of (/tmp, /var/tmp,
    /dev/shm): a run's files there would outlive it (``/run/lock``), so each is hidden under a read-only tmpfs."""
    mounts = []
    with contextlib.suppress(OSError), open("/proc/self/mounts") as f:
        mounts = [line.split()[1] for line in f if line.split()[2] in FS_TYPES]
    own = [Path(p) for p in ("/tmp", "/var/tmp", "/dev/shm")]
    found: set[Path] = set()
    for mount in mounts:
        point = Path(mount.encode().decode("unicode_escape"))
        if point.parts[1:2] in (("proc",), ("sys",)) or any(point == o or o in point.parents for o in own):
            continue
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(["find", str(point), "-xdev", "-type", "d", "-perm", "-0002", "-prune"],
                                 capture_output=True, timeout=120).stdout
            found |= {Path(os.fsdecode(line)) for line in out.splitlines() if line}
    return tuple(sorted(p for p in found if not any(p == o or o in p.parents for o in own)))


def make_run_folder(parent: Path, prefix: str, limits: Limits) -> Path:
    """A new folder for one run, readable by the grader alone; run as root on Linux, a tmpfs of
    ``limits.disk_bytes``, so a run that fills its disk fills only its own (remove it with :func:`remove_tree`)."""
    folder = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=parent))
    folder.chmod(0o700)
    if sys.platform == "linux" and os.geteuid() == 0 and shutil.which("mount"):
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={limits.disk_bytes},mode=700", "none", str(folder)],
                       capture_output=True)
    return folder


def read_run_file(path: Path, limit: int) -> bytes | None:
    """A file a run wrote, read by the grader: None unless it is a regular file of at most ``limit`` bytes (a link
    is not followed, a named pipe not waited on)."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        return f.read(limit) if stat.S_ISREG(info.st_mode) and info.st_size <= limit else None


def remove_tree(path: Path) -> None:
    """Remove a run's folder, whatever the run left in it: its tmpfs unmounted, then ``rm -rf`` (not recursive in
    Python: a folder tree 5,000 deep stops ``shutil.rmtree`` with a RecursionError); never raises."""
    path = Path(path)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        if os.path.ismount(path):
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=60)
        if shutil.which("rm"):
            subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], capture_output=True, timeout=600)
            return
    with contextlib.suppress(Exception):  # noqa: BLE001 (RecursionError included)
        shutil.rmtree(path, ignore_errors=True)


def _cgroup(limits: Limits) -> list[Path]:
    """A cgroup (v2, else v1's memory and pids hierarchies) holding a run's memory to ``limits.memory_bytes`` and
    its processes to ``limits.processes`` together; [] where the system does not let the grader make one."""
    root, name, groups = Path("/sys/fs/cgroup"), f"workbench-run-{os.getpid()}-{random.randrange(1 << 30)}", []
    try:
        if (root / "cgroup.controllers").is_file():
            with contextlib.suppress(OSError):
                (root / "cgroup.subtree_control").write_text("+memory +pids")
            settings = {root / name: {"memory.max": limits.memory_bytes, "memory.swap.max": 0,
                                      "pids.max": limits.processes}}
        else:
            settings = {root / "memory" / name: {"memory.limit_in_bytes": limits.memory_bytes},
                        root / "pids" / name: {"pids.max": limits.processes}}
        for group, files in settings.items():
            if group.parent.is_dir():
                group.mkdir()
                groups.append(group)
                for fname, value in files.items():
                    if (group / fname).exists():
                        (group / fname).write_text(str(value))
        if not any((g / "memory.max").exists() or (g / "memory.limit_in_bytes").exists() for g in groups):
            raise OSError("no memory controller")
    except OSError:
        _release_cgroup(groups)
        return []
    return groups


def _release_cgroup(groups: Sequence[Path] | None) -> None:
    """Kill what is left in a run's cgroups and remove them."""
    for group in groups or ():
        for _ in range(50):
            with contextlib.suppress(OSError, ValueError):
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), signal.SIGKILL)
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.02)


def _kill_user(uid: int) -> None:
    """SIGKILL every process left running under ``uid`` (a run's own user id: nothing else uses it)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                pass


def run(
    argv: Sequence[str],
    work: Path,
    limits: Limits,
    hide: Sequence[Path] = (),
    isolation: Isolation | None = None,
    watch: Callable[[], str | None] | None = None,
    pass_fds: Sequence[int] = (),
) -> RunResult:
    """Run ``argv`` sandboxed in the folder ``work`` (which the caller creates and fills; in the namespaces it is
    also ``/tmp``, so ``argv`` should name files in it as ``/tmp/...``: use :func:`inside`).

    Args:
        argv: the program and its arguments.
        work: the run's folder: its HOME, TMPDIR and working folder; handed to the run's user id.
        limits: resource limits and time-out.
        hide: folders it must not read (the class folder, the grader's output).
        isolation: as found by :func:`probe` (default: probe now).
        watch: called twice a second while it runs; a reason (one line) stops it (e.g. no progress).
        pass_fds: file descriptors the program inherits (as ``subprocess.Popen``'s), e.g. the write end of a pipe
            the caller reads; they are closed here once it has started, so the caller sees the end of the pipe when
            the run's processes are gone.

    Returns:
        How it ended; it never raises on the program's behaviour.
    """
    iso = isolation or probe()
    work = work.resolve()
    inner = Path("/tmp") if iso.namespaces else work
    env = {k: os.environ[k] for k in ENV_ALLOWED if k in os.environ}
    env.update(HOME=str(inner), TMPDIR=str(inner), PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1",
               OMP_NUM_THREADS=str(limits.threads), MKL_NUM_THREADS=str(limits.threads),
               MPLCONFIGDIR=str(inner / ".mpl"), JUPYTER_PLATFORM_DIRS="1")
    uid = None
    command = list(argv)
    if iso.own_uid:
        uid = random.randint(*UID_RANGE)
        os.chown(work, uid, uid)
        work.chmod(0o700)
        command = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
                   "--bounding-set=-all", "--inh-caps=-all", *command]
    if iso.namespaces:
        keep = [Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent,
                Path(__file__).resolve().parents[3]]
        script = _mount_script(work, [Path(h).resolve() for h in hide], keep) + "\ncd /tmp\nexec \"$@\""
        command = ["unshare", "--net", "--pid", "--mount", "--ipc", "--fork", "--kill-child", "--mount-proc",
                   "sh", "-c", script, "sandbox", *command]
    elif iso.user_namespace:
        command = ["unshare", "-rn", *command]
    group = _cgroup(limits) if iso.cgroup else []
    start = time.perf_counter()
    # the output goes to a file with no name (never one in the run's folder, which the run may swap for a link or
    # a named pipe), read back from the same descriptor
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(command, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, preexec_fn=functools.partial(_limit, limits, group),
                                    pass_fds=tuple(pass_fds))
        finally:
            for fd in pass_fds:
                os.close(fd)
        timed_out, stopped_by = False, None
        deadline = start + limits.wall_seconds
        try:
            while proc.poll() is None:
                if time.perf_counter() > deadline:
                    timed_out = True
                    break
                stopped_by = watch() if watch is not None else None
                if stopped_by:
                    break
                try:
                    proc.wait(timeout=min(0.5, max(0.01, deadline - time.perf_counter())))
                except subprocess.TimeoutExpired:
                    pass
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            if uid is not None:
                _kill_user(uid)
            _release_cgroup(group)
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - 8000))
        tail = out.read(8000).decode("utf-8", "replace")
    code = None if timed_out or stopped_by else proc.returncode
    return RunResult(code, timed_out, round(time.perf_counter() - start, 2), tail, stopped_by)


def inside(path: Path, work: Path, isolation: Isolation | None = None) -> str:
    """The name the sandboxed program sees for ``path`` (a file in the run's folder ``work``)."""
    iso = isolation or probe()
    return str(Path("/tmp") / path.resolve().relative_to(work.resolve())) if iso.namespaces else str(path)
