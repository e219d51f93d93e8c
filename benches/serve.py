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
python3 benches/serve.py flood-ms HOSTPORT TOKEN SECONDS TARGET
    clients without the token open 300 connections, then 10 a second, each
    pipelining 600 requests for a public script and never reading; prints
    the slowest of GETs of TARGET (with the token, a new connection each,
    every 0.5 s) over SECONDS while they do
python3 benches/serve.py scans-ms HOSTPORT TOKEN SCANS SCAN_TARGET SECONDS TARGET
    SCANS GETs of SCAN_TARGET, each with its own `contains=` (a new scan
    each), left running; prints the slowest GET of TARGET over SECONDS
python3 benches/serve.py query-peak-mib HOSTPORT TOKEN PID PATH
    POSTs a query whose function would make 2.2 GB and one that selects
    every record of PATH; prints the status codes and the server's peak
    resident memory (VmHWM) after them, in MiB
"""

import json
import socket

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


def slowest_ms(hostport, token, seconds, target):
    """The slowest GET of TARGET, each on a new connection, every 0.5 s."""
    slowest = 0.0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        conn = connect(hostport)
        started = time.perf_counter()
        get(conn, token, target)
        slowest = max(slowest, (time.perf_counter() - started) * 1000)
        conn.close()
        time.sleep(0.5)
    return slowest


def flood_ms(hostport, token, seconds, target):
    host, port = hostport.rsplit(":", 1)
    request = f"GET /assets/conversation.js HTTP/1.1\r\nHost: {hostport}\r\n\r\n".encode() * 600
    held, done = [], threading.Event()

    def open_one():
        try:
            s = socket.create_connection((host, int(port)))
            s.settimeout(0.1)
            s.sendall(request)
        except OSError:
            return
        held.append(s)

    def flood():
        for _ in range(300):
            open_one()
        while not done.is_set():
            for _ in range(10):
                open_one()
            done.wait(1)

    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    time.sleep(3)
    print(f"{slowest_ms(hostport, token, seconds, target):.1f}")
    done.set()
    thread.join()
    for s in held:
        s.close()


def scans_ms(hostport, token, scans, scan_target, seconds, target):
    host, port = hostport.rsplit(":", 1)
    held = []
    for i in range(scans):
        s = socket.create_connection((host, int(port)))
        head = (f"GET {scan_target}&contains=needle{i} HTTP/1.1\r\nHost: {hostport}\r\n"
                f"Authorization: Bearer {token}\r\n\r\n")
        s.sendall(head.encode())
        held.append(s)
    time.sleep(1)
    print(f"{slowest_ms(hostport, token, seconds, target):.1f}")
    for s in held:
        s.close()


def query_peak_mib(hostport, token, pid, path):
    codes = []
    for body in (
        {"sql": "SELECT length(s) FROM (SELECT repeat(CAST(value AS VARCHAR), 200000000) AS s "
                "FROM generate_series(1,10))"},
        {"path": path, "sql": "SELECT record FROM records"},
    ):
        conn = connect(hostport)
        conn.request("POST", "/api/query", body=json.dumps(body),
                     headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        codes.append(str(response.status))
    with open(f"/proc/{pid}/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    print("/".join(codes), kib // 1024)


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
    elif what == "flood-ms":
        flood_ms(args[0], args[1], float(args[2]), args[3])
    elif what == "scans-ms":
        scans_ms(args[0], args[1], int(args[2]), args[3], float(args[4]), args[5])
    elif what == "query-peak-mib":
        query_peak_mib(args[0], args[1], int(args[2]), args[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
