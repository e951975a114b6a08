"""`make test-busy`: a command (the test suite) beside a CPU and a memory hog, and what it ran under.

A suite that passes only on a quiet machine teaches people to rerun until green. This runs it the way a
busy laptop would: ``--cpu-hogs`` processes spinning at normal priority (3 on 2 cores leave the suite
about a quarter to half of the CPU, depending on how many of its own processes are runnable) and one
process holding ``--memory-gib`` of touched memory. Every ``--every-s`` it samples the 1-minute load
average and the memory in use (MemTotal - MemAvailable, swap apart), and at the end prints and writes
the wall time, the load (mean, max), the suite's peak memory (peak in use, less what was in use before
it started, hogs included there) and the peak swap.

Usage: python tests/busy.py [--cpu-hogs 3] [--memory-gib 6] [--out FILE] -- COMMAND...
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

SPIN = "while True: pass"
HOLD = (
    "import sys, time\n"
    "block = bytearray(int(float(sys.argv[1]) * 2**30))\n"
    "for i in range(0, len(block), 4096): block[i] = 1\n"  # touched: resident, not just reserved
    "print('held', flush=True)\n"
    "time.sleep(10**9)\n"
)


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes."""
    values = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, rest = line.split(":", 1)
        values[key] = int(rest.split()[0]) * 1024
    return values


def in_use() -> tuple[int, int]:
    """(memory in use, swap in use), bytes."""
    info = meminfo()
    return info["MemTotal"] - info["MemAvailable"], info["SwapTotal"] - info["SwapFree"]


def load_1min() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


class Sampler(threading.Thread):
    def __init__(self, every_s: float):
        super().__init__(daemon=True)
        self.every_s, self.loads, self.memory, self.swap = every_s, [], [], []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.every_s):
            memory, swap = in_use()
            self.loads.append(load_1min())
            self.memory.append(memory)
            self.swap.append(swap)

    def stop(self) -> None:
        self._done.set()
        self.join()


def start_hogs(cpu_hogs: int, memory_gib: float) -> list[subprocess.Popen]:
    hogs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(cpu_hogs)]
    if memory_gib > 0:
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(memory_gib)], stdout=subprocess.PIPE, text=True)
        if holder.stdout.readline().strip() != "held":  # the suite starts beside memory already taken
            raise SystemExit(f"the memory hog could not hold {memory_gib} GiB")
        hogs.append(holder)
    return hogs


def summary(args, code: int, wall_s: float, before: int, sampler: Sampler) -> dict:
    gib = 2**30
    return {
        "command": args.command,
        "exit_code": code,
        "wall_minutes": round(wall_s / 60, 1),
        "cpu_hogs": args.cpu_hogs,
        "memory_hog_gib": args.memory_gib,
        "load_1min_mean": round(statistics.fmean(sampler.loads), 1) if sampler.loads else None,
        "load_1min_max": max(sampler.loads, default=None),
        "memory_in_use_before_gib": round(before / gib, 2),
        "memory_in_use_peak_gib": round(max(sampler.memory, default=before) / gib, 2),
        "suite_peak_gib": round((max(sampler.memory, default=before) - before) / gib, 2),
        "swap_peak_gib": round(max(sampler.swap, default=0) / gib, 2),
        "max_engines": _max_engines(),
    }


def _max_engines() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.engine_shelf import max_engines

    return str(max_engines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-hogs", type=int, default=3)
    parser.add_argument("--memory-gib", type=float, default=6.0)
    parser.add_argument("--every-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=Path("tests/benchmarks/results/busy.json"))
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("give the command to run after --")
    hogs = start_hogs(args.cpu_hogs, args.memory_gib)
    before, _ = in_use()
    sampler = Sampler(args.every_s)
    sampler.start()
    started = time.monotonic()
    try:
        code = subprocess.call(args.command)
    finally:
        wall_s = time.monotonic() - started
        sampler.stop()
        for hog in hogs:
            hog.kill()
            hog.wait()
    result = summary(args, code, wall_s, before, sampler)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"test-busy: {json.dumps(result)} (written to {args.out})")
    return code


if __name__ == "__main__":
    sys.exit(main())
