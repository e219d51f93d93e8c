"""HTTP measurements for benches/serve.sh (standard library only).

python3 benches/serve.py poll HOSTPORT TOKEN PID SECONDS CLIENTS PATH...
    CLIENTS clients each fetch the tree, stats and runs of every PATH every
    5 s, as the pages do (If-None-Match with the last ETag); prints the
    server's CPU over SECONDS as a percentage of one core.
python3 benches/serve.py median-ms HOSTPORT TOKEN RUNS TARGET
    median wall time of a GET of TARGET (one kept-alive connection, the
    answer read to its end)
python3 benches/serve.py first-byte-ms HOSTPORT TOKEN TARGET
    time from sending a GET of TARGET to the first byte of its body
python3 benches/serve.py get-ms HOSTPORT TOKEN TARGET
    time of one GET of TARGET, read to its end
"""

import http.client
import os
import statistics
import sys
import threading
import time
import urllib.parse


def connect(hostport):
    host, port = hostport.rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=600)


def get(conn, token, target, etag=None):
    headers = {"Authorization": "Bearer " + token}
    if etag:
        headers["If-None-Match"] = etag
    conn.request("GET", target, headers=headers)
    response = conn.getresponse()
    body = response.read()
    if response.status not in (200, 304):
        raise SystemExit(f"GET {target}: {response.status} {body[:300]!r}")
    return response, body


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def poll(hostport, token, pid, seconds, clients, paths):
    targets = []
    for path in paths:
        q = urllib.parse.quote(path)
        targets += [f"/api/explorer/tree?path={q}", f"/api/stats?path={q}", f"/api/runs?path={q}"]
    stop = time.monotonic() + seconds
    errors = []

    def client(offset):
        conn = connect(hostport)
        etags = {}
        time.sleep(offset)
        while time.monotonic() < stop:
            started = time.monotonic()
            try:
                for target in targets:
                    response, _ = get(conn, token, target, etags.get(target))
                    etags[target] = response.getheader("ETag") or etags.get(target)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
                return
            time.sleep(max(0.0, 5.0 - (time.monotonic() - started)))

    # Warm: the first answers are made once, as a page's first load would.
    conn = connect(hostport)
    for target in targets:
        get(conn, token, target)
    hz = os.sysconf("SC_CLK_TCK")
    before = cpu_ticks(pid)
    threads = [threading.Thread(target=client, args=(5.0 * i / clients,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    used = (cpu_ticks(pid) - before) / hz
    if errors:
        raise SystemExit(f"a client failed: {errors[0]}")
    print(f"{100.0 * used / seconds:.2f}")


def median_ms(hostport, token, runs, target):
    conn = connect(hostport)
    get(conn, token, target)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        get(conn, token, target)
        times.append((time.perf_counter() - started) * 1000)
    print(f"{statistics.median(times):.2f}")


def first_byte_ms(hostport, token, target):
    conn = connect(hostport)
    started = time.perf_counter()
    conn.request("GET", target, headers={"Authorization": "Bearer " + token})
    response = conn.getresponse()
    response.read(1)
    took = (time.perf_counter() - started) * 1000
    response.read()
    if response.status != 200:
        raise SystemExit(f"GET {target}: {response.status}")
    print(f"{took:.1f}")


def get_ms(hostport, token, target):
    conn = connect(hostport)
    started = time.perf_counter()
    get(conn, token, target)
    print(f"{(time.perf_counter() - started) * 1000:.1f}")


def main():
    what, args = sys.argv[1], sys.argv[2:]
    if what == "poll":
        poll(args[0], args[1], int(args[2]), float(args[3]), int(args[4]), args[5:])
    elif what == "median-ms":
        median_ms(args[0], args[1], int(args[2]), args[3])
    elif what == "first-byte-ms":
        first_byte_ms(args[0], args[1], args[2])
    elif what == "get-ms":
        get_ms(args[0], args[1], args[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
