"""Fixtures and measurements for benches/run.sh (standard library only).

python3 benches/fixtures.py leaves DIR N        N storyline leaves in 10 partitions
python3 benches/fixtures.py jsonl DIR MIB       MIB of JSONL in files of up to 128 MiB
python3 benches/fixtures.py shard DIR MIB       one line shard of MIB
python3 benches/fixtures.py walk-tree DIR N     N one-record files in directories of 1,000
python3 benches/fixtures.py dialogue DIR MIB [PER_FILE]   MIB of JSONL turns (four roles) in files of PER_FILE (128) MiB
python3 benches/fixtures.py transcript DIR MIB  MIB of agent turns whose contents are real text
                                                (this repository's code and docs), one file per 128 MiB
python3 benches/fixtures.py median-ms RUNS CMD...   median wall time of CMD
python3 benches/fixtures.py read-mib-s FILE     sequential read throughput
python3 benches/fixtures.py poll MNT PID SECONDS    daemon CPU while polling
python3 benches/fixtures.py cohort FILE N       N records of 100,000s of sessions (an index's input)
python3 benches/fixtures.py read-leaves DIR     reads every leaf's manifest and CURRENT once (ms)
python3 benches/fixtures.py peak CMD...         runs CMD; prints "<ms> <peak RSS KiB>"
python3 benches/fixtures.py runs DIR N          N runs of two records: 3 agents x 20 days, a file each
"""

import math
import os
import statistics
import subprocess
import sys
import time

MIB = 1 << 20


def record(i, day=1):
    return ('{"id":"r%08d","session":"s%05d","ts":"2026-11-%02dT10:00:00Z",'
            '"role":"assistant","content":"%s"}\n' % (i, i % 9973, day, "x" * 120))


def leaves(root, n):
    for i in range(n):
        leaf = os.path.join(root, "part=%02d" % (i % 10), "leaf-%05d" % i)
        gen = os.path.join(leaf, "generations", "g1")
        os.makedirs(gen, exist_ok=True)
        with open(os.path.join(gen, "part-0.jsonl"), "w") as f:
            f.write("".join(record(i * 10 + j) for j in range(10)))
        with open(os.path.join(leaf, "CURRENT"), "w") as f:
            f.write("g1\n")
    for p in range(10):
        with open(os.path.join(root, "part=%02d" % p, "loose.jsonl"), "w") as f:
            f.write("".join(record(j) for j in range(100)))


def chunk():
    lines, size = [], 0
    i = 0
    while size < MIB:
        line = record(i)
        lines.append(line)
        size += len(line)
        i += 1
    return "".join(lines).encode()


def jsonl(root, mib, per_file=128):
    block = chunk()
    written, n = 0, 0
    while written < mib:
        size = min(per_file, mib - written)
        d = os.path.join(root, "day=%02d" % (n % 28 + 1))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "s%04d.jsonl" % n), "wb") as f:
            for _ in range(size):
                f.write(block)
        written += size
        n += 1


def shard(root, mib):
    os.makedirs(root, exist_ok=True)
    block = chunk()
    with open(os.path.join(root, "agent.0a1b2c3d.jsonl"), "wb") as f:
        for _ in range(mib):
            f.write(block)


ROLES = ("user", "assistant", "tool", "system")


def dialogue(root, mib, per_file=128):
    """Agent turns of four roles and varied lengths, in files of `per_file` MiB."""
    os.makedirs(root, exist_ok=True)
    block, size, i = [], 0, 0
    while size < MIB:
        line = ('{"id":"t%08d","session":"s%04d","ts":"2026-11-%02dT%02d:%02d:00Z",'
                '"role":"%s","tokens":%d,"content":"%s"}\n'
                % (i, i % 997, i % 28 + 1, i % 24, i % 60, ROLES[i % 7 % 4], i % 500,
                   "w" * (40 + i * 37 % 200)))
        block.append(line)
        size += len(line)
        i += 1
    block = "".join(block).encode()
    written, n = 0, 0
    while written < mib:
        count = min(per_file, mib - written)
        with open(os.path.join(root, "turns-%03d.jsonl" % n), "wb") as f:
            for _ in range(count):
                f.write(block)
        written += count
        n += 1


def transcript(root, mib, per_file=128):
    """Agent turns as a transcript holds them: a user's short request, an
    assistant's prose, a tool's output of code or docs of any length from
    a line to 16 KiB, and one tool output in a hundred (a whole file, a
    long log) of 32 to 128 KiB. The text is this repository's own (src/,
    docs/), so it compresses as real text does, not as a repeated letter;
    it changes with the repository, so compare figures within one run."""
    import json
    import random
    here = os.path.dirname(os.path.abspath(__file__))
    top = os.path.dirname(here)
    code, prose = [], []
    for base, into in (("src", code), ("docs", prose)):
        for d, _, names in sorted(os.walk(os.path.join(top, base))):
            for name in sorted(names):
                if not name.endswith((".rs", ".md", ".toml", ".py", ".sh", ".js", ".html", ".css")):
                    continue
                with open(os.path.join(d, name), encoding="utf-8", errors="replace") as f:
                    into.append(f.read())
    code, prose = "\n".join(code), "\n".join(prose)
    rng = random.Random(33)

    def cut(text, lo, hi):
        n = int(math.exp(rng.uniform(math.log(lo), math.log(hi))))
        at = rng.randrange(max(len(text) - n, 1))
        return text[at:at + n]

    os.makedirs(root, exist_ok=True)
    written, n, i = 0, 0, 0
    while written < mib * MIB:
        path = os.path.join(root, "session-%03d.jsonl" % n)
        size = 0
        with open(path, "w", encoding="utf-8") as f:
            while size < per_file * MIB and written + size < mib * MIB:
                role = ROLES[i % 3] if i % 50 else "system"
                if role == "tool" and i % 300 == 2:
                    content = cut(code, 32768, 131072)
                elif role == "tool":
                    content = cut(code if i % 5 else prose, 40, 16384)
                elif role == "assistant":
                    content = cut(prose, 60, 2000)
                else:
                    content = cut(prose, 20, 300)
                line = json.dumps({"id": "t%08d" % i, "session": "s%04d" % (i // 40),
                                   "ts": "2026-11-%02dT%02d:%02d:%02dZ" % (i // 86400 % 28 + 1, i // 3600 % 24, i // 60 % 60, i % 60),
                                   "role": role, "content": content},
                                  ensure_ascii=False, separators=(",", ":")) + "\n"
                f.write(line)
                size += len(line.encode("utf-8"))
                i += 1
        written += size
        n += 1


def walk_tree(root, n):
    for i in range(n):
        d = os.path.join(root, "d%04d" % (i // 1000))
        if i % 1000 == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "s%06d.0a1b2c3d.jsonl" % i), "w") as f:
            f.write(record(i))


def median_ms(runs, cmd):
    times = []
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - t0) * 1000)
    print("%.1f" % statistics.median(times))


def read_mib_s(path):
    """Sequential read throughput, 4 MiB at a time into one buffer (no
    allocation per read, so the figure is the read's, not the heap's)."""
    buf = bytearray(4 * MIB)
    fd = os.open(path, os.O_RDONLY)
    total = 0
    t0 = time.perf_counter()
    while True:
        n = os.readv(fd, [buf])
        if n == 0:
            break
        total += n
    os.close(fd)
    print("%.0f" % (total / MIB / (time.perf_counter() - t0)))


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def directories(mnt):
    """Every directory node of the mount (not dataset leaves)."""
    out, todo = [], [mnt]
    while todo:
        d = todo.pop()
        out.append(d)
        for e in os.scandir(d):
            if e.is_dir(follow_symlinks=False):
                kind = os.getxattr(e.path, "user.pchronicle.kind").decode()
                if kind == "directory":
                    todo.append(e.path)
    return sorted(out)


def poll(mnt, pid, seconds):
    dirs = directories(mnt)
    only = os.environ.get("PCHRONICLE_BENCH_POLL_ONLY", "")  # stats | ls
    hz = os.sysconf("SC_CLK_TCK")
    # One round first, so the measurement sees a warm daemon.
    rounds, late = 0, 0
    start_ticks, t0 = cpu_ticks(pid), time.monotonic()
    deadline = t0 + seconds
    next_tick = t0
    while time.monotonic() < deadline:
        for d in dirs:
            if only != "ls":
                with open(os.path.join(d, ".stats"), "rb") as f:
                    f.read()
            if only != "stats":
                for e in os.scandir(d):  # what `ls -l` asks: names, then lstat
                    if only != "names":
                        os.lstat(e.path)
        rounds += 1
        next_tick += 0.1
        pause = next_tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        else:
            late += 1
    elapsed = time.monotonic() - t0
    used = (cpu_ticks(pid) - start_ticks) / hz
    print("  %d directories, %d rounds in %.1f s (%d late); daemon CPU %.2f s"
          % (len(dirs), rounds, elapsed, late, used), file=sys.stderr)
    print("%.2f" % (100 * used / elapsed))


def cohort(path, n):
    """The sidecar benchmark's input: one record file of N records."""
    sessions = max(n // 10, 1)
    with open(path, "w") as f:
        for i in range(n):
            f.write('{"id":"r-%010d","session":"s-%07d","turn":%d,"ts":"2026-11-30T10:00:00Z",'
                    '"role":"assistant","content":"step %d: ran the tests"}\n'
                    % (i, i * 7919 % sessions, i % 10, i))


def read_leaves(root):
    """The native baseline of a cold root `.stats`: one walk that reads
    every leaf's manifest and CURRENT once and enters no leaf (ms)."""
    t0 = time.perf_counter()
    todo, leaves = [root], 0
    while todo:
        d = todo.pop()
        names = os.listdir(d)
        if "CURRENT" in names:
            for name in ("CURRENT", "chronicle.manifest"):
                with open(os.path.join(d, name), "rb") as f:
                    f.read()
            leaves += 1
            continue
        for name in names:
            p = os.path.join(d, name)
            if not name.startswith(".") and os.path.isdir(p):
                todo.append(p)
    print("%.1f" % ((time.perf_counter() - t0) * 1000))
    return leaves


def peak(cmd):
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    ms = (time.perf_counter() - t0) * 1000
    if status != 0:
        sys.exit("%s failed (%d)" % (cmd[0], status))
    print("%.0f %d" % (ms, usage.ru_maxrss))


def runs(root, n):
    for i in range(n):
        agent, day = i % 3, (i // 3) % 20
        d = os.path.join(root, "agent=a%d" % agent, "day=2026-11-%02d" % (day + 1))
        os.makedirs(d, exist_ok=True)
        ts = "2026-11-%02dT%02d:%02d:00Z" % (day + 1, (i // 60) % 24, i % 60)
        with open(os.path.join(d, "s-%06d.jsonl" % i), "w") as f:
            f.write('{"role":"user","content":"task %d","ts":"%s"}\n' % (i, ts))
            f.write('{"role":"assistant","content":"done","ts":"%s"}\n' % ts)


def main():
    what, args = sys.argv[1], sys.argv[2:]
    if what == "leaves":
        leaves(args[0], int(args[1]))
    elif what == "jsonl":
        jsonl(args[0], int(args[1]))
    elif what == "shard":
        shard(args[0], int(args[1]))
    elif what == "walk-tree":
        walk_tree(args[0], int(args[1]))
    elif what == "dialogue":
        dialogue(args[0], int(args[1]), *(int(a) for a in args[2:3]))
    elif what == "transcript":
        transcript(args[0], int(args[1]))
    elif what == "median-ms":
        median_ms(int(args[0]), args[1:])
    elif what == "read-mib-s":
        read_mib_s(args[0])
    elif what == "poll":
        poll(args[0], int(args[1]), float(args[2]))
    elif what == "cohort":
        cohort(args[0], int(args[1]))
    elif what == "read-leaves":
        read_leaves(args[0])
    elif what == "peak":
        peak(args)
    elif what == "runs":
        runs(args[0], int(args[1]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
