"""How tests/data/proc/<kernel>/{a,b} were made: two copies, 0.5 s apart, of
the /proc files nslab.traffic.interference reads, for this process, a CPU hog pinned
to CPU1 (busy half of every 20 ms), an idle sleeper allowed on every CPU, and
the softirq threads; plus /proc/schedstat where the kernel has it.

    python3 tests/data/proc/capture.py tests/data/proc/$(uname -r)
"""
import os
import shutil
import subprocess
import sys
import time

HOG = ("import os,time\nos.sched_setaffinity(0,{1})\n"
       "while True:\n t=time.monotonic()\n while time.monotonic()-t<0.01: pass\n time.sleep(0.01)\n")


def copy(pid: int, dest: str) -> None:
    for f in ("stat", "status", "comm", "schedstat"):
        src = f"/proc/{pid}/{f}"
        os.makedirs(f"{dest}/{pid}", exist_ok=True)
        shutil.copyfile(src, f"{dest}/{pid}/{f}")
    for tid in os.listdir(f"/proc/{pid}/task"):
        d = f"{dest}/{pid}/task/{tid}"
        os.makedirs(d, exist_ok=True)
        for f in ("schedstat", "comm", "status", "stat"):
            shutil.copyfile(f"/proc/{pid}/task/{tid}/{f}", f"{d}/{f}")


def softirqd() -> list:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if open(f"/proc/{p}/comm").read().startswith("ksoftirqd/"):
                    out.append(int(p))
            except OSError:
                pass
    return out


def main(dest: str) -> None:
    os.sched_setaffinity(0, {0})
    hog = subprocess.Popen([sys.executable, "-c", HOG])
    idle = subprocess.Popen(["sleep", "30"])
    os.sched_setaffinity(idle.pid, set(range(os.cpu_count() or 1)))
    time.sleep(0.3)
    pids = [os.getpid(), hog.pid, idle.pid] + softirqd()
    for snap in ("a", "b"):
        for pid in pids:
            copy(pid, f"{dest}/{snap}")
        if os.path.exists("/proc/schedstat"):
            shutil.copyfile("/proc/schedstat", f"{dest}/{snap}/schedstat")
        with open(f"{dest}/{snap}/t", "w") as f:
            f.write(f"{time.monotonic()}\n")
        if snap == "a":
            time.sleep(0.5)
    with open(f"{dest}/roles", "w") as f:
        f.write(f"self {os.getpid()}\nhog {hog.pid}\nidle {idle.pid}\n")
    hog.kill()
    idle.kill()


if __name__ == "__main__":
    main(sys.argv[1])
