"""Instructions executed per request, in-process, by the kinds of bench/documents.py.

    .venv/bin/python bench/instructions.py [--requests 100] [KIND ...]

KIND is GET, "GET floor", PUT, "PUT floor", recall, list or page (default: GET, its floor,
PUT, its floor and recall). bench/documents.py seeds its throwaway database and warms
every kind up under valgrind's callgrind with instrumentation off (seconds, not
minutes); for each kind in turn, instrumentation is switched on, the counters zeroed,
the requests made and the counts dumped (`callgrind_control`). The count covers the whole
request through the full middleware stack (the database's own work is in another
process and not in it). Instructions are the same from run to run (within about 1 %),
where CPU time on a shared machine is not: a change of a few percent shows in one run.
Needs valgrind (`apt-get install valgrind`).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT = ["GET", "GET floor", "PUT", "PUT floor", "recall"]


def _control(pid: int, *flags: str) -> None:
    subprocess.run(["callgrind_control", *flags, str(pid)], check=True, capture_output=True)


def _line(process: subprocess.Popen[str], prefix: str) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(prefix):
            return
    raise SystemExit(f"bench/documents.py ended before {prefix!r} (exit {process.wait()})")


def _total(path: Path) -> int:
    found = re.search(r"^(?:summary|totals): (\d+)", path.read_text(), re.M)
    if found is None:
        raise SystemExit(f"no totals in {path}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kinds", nargs="*", default=DEFAULT)
    parser.add_argument("--requests", type=int, default=100, help="per kind")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("bench/instructions.py needs valgrind: apt-get install valgrind")
    folder = Path(tempfile.mkdtemp(prefix="memoryadmin-instructions-"))
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    command += [f"--callgrind-out-file={folder}/out", sys.executable, str(HERE / "documents.py")]
    command += ["--requests", str(args.requests), "--handshake", str(folder)]
    for kind in args.kinds:
        command += ["--count", kind]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    counts: dict[str, float] = {}
    try:
        for number, kind in enumerate(args.kinds, start=1):
            _line(process, f"START {kind}")
            _control(process.pid, "-i", "on")
            _control(process.pid, "-z")
            (folder / "go").touch()
            _line(process, f"END {kind}")
            _control(process.pid, "-d")
            _control(process.pid, "-i", "off")
            (folder / "stop").touch()
            dump = folder / f"out.{number}"
            for _ in range(100):  # the dump is written as the command returns; be sure
                if dump.exists():
                    break
                time.sleep(0.05)
            counts[kind] = _total(dump) / args.requests / 1000
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
        shutil.rmtree(folder, ignore_errors=True)
    print(f"thousands of instructions per request (mean of {args.requests} requests)")
    print("| request | kinstr |")
    print("| --- | --- |")
    for kind, kinstr in counts.items():
        print(f"| {kind} | {kinstr:,.0f} |")
    for name in ("GET", "PUT"):
        if name in counts and f"{name} floor" in counts:
            print(f"{name} floor / {name}: {counts[f'{name} floor'] / counts[name]:.2f}")
    if "recall" in counts and "GET" in counts:
        print(f"recall / GET: {counts['recall'] / counts['GET']:.2f}")


if __name__ == "__main__":
    main()
