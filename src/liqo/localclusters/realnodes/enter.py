"""``python -m liqo.localclusters.realnodes.enter``: become a process of a real node, then run its program.

The supervisor knows how to start, probe and restart a command line, nothing about nodes. This launcher
is that command line's first word: it moves itself into the node's ``daemons`` cgroup (in every
hierarchy, so whatever it starts is found and killed by the node's teardown), enters the node's network
and mount namespaces, optionally waits for containerd and imports the node's images, then ``exec``s the
real program, which keeps the launcher's pid (the supervisor's process identity stays right).

Images the program needs at once are imported before it starts; the others (``--image-later``: the
preloaded tool image and liqo's, seconds of work) by a detached process in the same cgroup and
namespaces, so a node is Ready as soon as it would be without them.

Why not ``ip netns exec``: it remounts ``/sys``, which hides the host's cgroup mounts from the kubelet.
Why a Python launcher and not ``nsenter``: joining the cgroup must happen before anything forks, and
the image import needs the node's view of ``/run`` — both in the same process, before the ``exec``.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from liqo.kube.waiting import block_until
from liqo.localclusters.realnodes.images import archive_images

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
SOCKET_DEADLINE = 60.0
POLL = 0.05


def _setns(path: str, nstype: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, nstype) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"setns({path}): {os.strerror(error)}")
    finally:
        os.close(fd)


def _join_cgroup(cgroup: str) -> None:
    root = Path("/sys/fs/cgroup")
    for procs in root.glob(f"*/{cgroup.strip('/')}/cgroup.procs"):
        procs.write_text(str(os.getpid()))


def _wait_socket(path: str) -> None:
    if not block_until(lambda: Path(path).is_socket(), timeout=SOCKET_DEADLINE, interval=POLL):
        sys.exit(f"containerd's socket {path} did not appear within {SOCKET_DEADLINE:.0f}s")


def import_images(*, ctr: str, socket: str, archives: list[str]) -> None:
    """Import each archive whose images the node's containerd lacks or holds other content under (CRI's ``k8s.io``).

    Names alone would not do: liqo's image keeps its name from one code change to the next, and a node keeps
    its images when its cluster stops. An archive the cache no longer has (pruned) is left out: the node
    imported it when it first started.
    """
    base = [ctr, "--address", socket, "--namespace", "k8s.io"]
    held = held_images(subprocess.run([*base, "images", "list"], capture_output=True, text=True, check=True).stdout)
    for archive in archives:
        if not Path(archive).is_file():
            print(f"{archive} is gone from the cache: not imported", file=sys.stderr)
        elif not is_held(archive_images(Path(archive)), held):
            subprocess.run([*base, "images", "import", archive], check=True, stdout=subprocess.DEVNULL)


def held_images(listing: str) -> dict[str, str]:
    """Each image ``ctr images list`` shows and its digest (pure): columns REF, TYPE, DIGEST, then sizes..."""
    rows = [line.split() for line in listing.splitlines()[1:]]
    return {row[0]: row[2] for row in rows if len(row) >= 3}


def is_held(declared: dict[str, str], held: dict[str, str]) -> bool:
    """Whether containerd holds every image an archive declares, with the same content where that is known (pure)."""
    return bool(declared) and all(name in held and digest in ("", held[name]) for name, digest in declared.items())


def main(argv: list[str] | None = None) -> None:
    """Parse, enter, prepare, exec."""
    parser = argparse.ArgumentParser(prog="python -m liqo.localclusters.realnodes.enter")
    parser.add_argument("--cgroup", required=True)
    parser.add_argument("--net", required=True)
    parser.add_argument("--mount", required=True)
    parser.add_argument("--path", default="", help="directories put first on PATH")
    parser.add_argument("--wait-socket", default="")
    parser.add_argument("--ctr", default="")
    parser.add_argument("--image", action="append", default=[], help="an image archive to import first")
    parser.add_argument("--images-dir", default="", help="a directory of image archives (*.tar) to import first")
    parser.add_argument(
        "--image-later", action="append", default=[], help="an image archive to import while the program runs"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given after --")
    _join_cgroup(args.cgroup)
    _setns(args.net, CLONE_NEWNET)
    _setns(args.mount, CLONE_NEWNS)
    os.chdir("/")
    if args.path:
        os.environ["PATH"] = f"{args.path}:{os.environ.get('PATH', '')}"
    if args.wait_socket:
        _wait_socket(args.wait_socket)
        loaded = sorted(str(p) for p in Path(args.images_dir).glob("*.tar")) if args.images_dir else []
        if args.image or loaded:
            import_images(ctr=args.ctr, socket=args.wait_socket, archives=[*args.image, *loaded])
        if args.image_later:
            _detached(lambda: import_images(ctr=args.ctr, socket=args.wait_socket, archives=args.image_later))
    os.execvp(command[0], command)


def _detached(work: Callable[[], None]) -> None:
    """Run ``work`` in a grandchild: init reaps it, since the program exec'd next never waits for it."""
    child = os.fork()
    if child:
        os.waitpid(child, 0)
        return
    if os.fork() == 0:
        status = 0
        try:
            work()
        except Exception:  # whatever it is, the log gets it and this process ends here, never exec'ing too
            traceback.print_exc()
            status = 1
        os._exit(status)
    os._exit(0)


if __name__ == "__main__":
    main()
