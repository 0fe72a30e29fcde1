#!/usr/bin/env python3
"""`ember serve` under a loopback load (standard library only).

Usage: serve_load.py EMBER BUNDLE PREFIX
  PREFIX.inputs / PREFIX.probs: `ember eval --load BUNDLE --predictions PREFIX` (every eval sample's
  inputs as a binary /predict body, and the probability ember eval computed for it).

Starts `ember serve` on a free port and checks:
  - 8 concurrent clients send every eval sample in requests of 1 to 64 samples, binary or JSON at
    random: every answer is 200 with exactly ember eval's probabilities (float32 bits), none lost;
  - meanwhile bad clients: malformed JSON, a body over --max_body_bytes, more samples than
    --max_batch, an id outside its table, an unknown path, a GET of /predict, a client that
    disconnects halfway through its body: each gets its 4xx (or nothing, for the one that left)
    and no good request is disturbed;
  - /health and /metrics (Prometheus text) report what happened;
  - SIGTERM while 4 clients keep sending: every answer is still right or a 503 or a refused
    connection, the server exits 0 with its "stopped:" line, and no request hangs.
"""
import http.client
import json
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

NUM_DENSE, NUM_SPARSE = 13, 26
PER = 4 * NUM_DENSE + 8 * NUM_SPARSE
MAX_BATCH, MAX_BODY = 64, 65536


def fail(msg):
    print("serve_load.py: " + msg, flush=True)
    sys.exit(1)


def main():
    ember, bundle, prefix = sys.argv[1:4]
    inputs = open(prefix + ".inputs", "rb").read()
    probs = open(prefix + ".probs", "rb").read()
    if inputs[:4] != b"EMB1":
        fail("the inputs file does not start with EMB1")
    n = struct.unpack_from("<I", inputs, 4)[0]
    if len(inputs) != 8 + n * PER or len(probs) != 4 * n or n < 100:
        fail(f"inputs of {len(inputs)} bytes and probs of {len(probs)} for {n} samples")
    samples = [inputs[8 + i * PER: 8 + (i + 1) * PER] for i in range(n)]
    expect = [probs[4 * i: 4 * i + 4] for i in range(n)]

    proc = subprocess.Popen([ember, "serve", "--load", bundle, "--port", "0", "--max_batch", str(MAX_BATCH),
                             "--max_wait_us", "2000", "--max_body_bytes", str(MAX_BODY)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        run(proc, samples, expect)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def request(port, method, path, body=None, ctype=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Content-Type": ctype} if ctype else {}
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def json_body(chunk):
    out = []
    for s in chunk:
        dense = struct.unpack_from(f"<{NUM_DENSE}f", s, 0)
        ids = struct.unpack_from(f"<{NUM_SPARSE}q", s, 4 * NUM_DENSE)
        out.append({"dense": [float(x) for x in dense], "sparse": list(ids)})
    return json.dumps({"samples": out})


def answers(status, body, binary, k):
    """The float32 bits of k probabilities in a 200 answer."""
    if status != 200:
        return None
    if binary:
        return [body[4 * i: 4 * i + 4] for i in range(len(body) // 4)] if len(body) == 4 * k else None
    got = json.loads(body)["probabilities"]
    return [struct.pack("<f", float(x)) for x in got] if len(got) == k else None


def run(proc, samples, expect):
    line = proc.stdout.readline()
    m = re.search(r"on http://127\.0\.0\.1:(\d+):", line)
    if not m:
        fail("no 'serving ... on http://127.0.0.1:PORT' line: " + line + proc.stdout.read())
    port = int(m.group(1))
    n = len(samples)

    # Good clients: every sample once, in chunks of 1 to MAX_BATCH.
    rng = random.Random(7)
    chunks, i = [], 0
    while i < n:
        k = rng.randint(1, MAX_BATCH)
        chunks.append((i, min(n, i + k), rng.random() < 0.5))
        i += k
    lock = threading.Lock()
    errors, done = [], []

    def good():
        while True:
            with lock:
                if not chunks:
                    return
                a, b, binary = chunks.pop()
            part = samples[a:b]
            if binary:
                body = b"EMB1" + struct.pack("<I", len(part)) + b"".join(part)
                st, rb = request(port, "POST", "/predict", body, "application/octet-stream")
            else:
                st, rb = request(port, "POST", "/predict", json_body(part), "application/json")
            got = answers(st, rb, binary, b - a)
            with lock:
                if got != expect[a:b]:
                    errors.append(f"samples [{a}, {b}) ({'binary' if binary else 'json'}): status {st}, "
                                  f"{rb[:200]!r}")
                done.append(b - a)

    # Bad clients, interleaved with the good ones.
    bad_results = []

    def bad():
        one = samples[0]
        dense = list(struct.unpack_from(f"<{NUM_DENSE}f", one, 0))
        ids = list(struct.unpack_from(f"<{NUM_SPARSE}q", one, 4 * NUM_DENSE))
        cases = [
            ("malformed json", 400, "POST", "/predict", '{"samples": [', "application/json"),
            ("body too large", 413, "POST", "/predict", "x" * (MAX_BODY + 1000), "application/json"),
            ("more than max_batch", 413, "POST", "/predict",
             json.dumps({"samples": [{"dense": dense, "sparse": ids}] * (MAX_BATCH + 1)}), "application/json"),
            ("id outside its table", 400, "POST", "/predict",
             json.dumps({"dense": dense, "sparse": [10 ** 9] + ids[1:]}), "application/json"),
            ("not a number", 400, "POST", "/predict",
             json.dumps({"dense": ["a"] + dense[1:], "sparse": ids}), "application/json"),
            ("binary of a wrong size", 400, "POST", "/predict", b"EMB1" + struct.pack("<I", 2) + one,
             "application/octet-stream"),
            ("unknown path", 404, "GET", "/nothing", None, None),
            ("GET /predict", 405, "GET", "/predict", None, None),
        ]
        for rep in range(3):
            for name, want, method, path, body, ctype in cases:
                st, rb = request(port, method, path, body, ctype)
                ok = st == want and "error" in json.loads(rb)
                bad_results.append((name, ok, st, rb[:160]))
            # A client that leaves halfway through its body.
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 5000\r\n\r\n{\"samples\": [")
            time.sleep(0.01)
            s.close()

    threads = [threading.Thread(target=good) for _ in range(8)] + [threading.Thread(target=bad)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        if t.is_alive():
            fail("a client did not finish in 120 s (a request hangs)")
    if errors:
        fail(f"{len(errors)} good requests answered wrongly, first: {errors[0]}")
    if sum(done) != n:
        fail(f"{sum(done)} samples answered of {n}")
    wrong = [r for r in bad_results if not r[1]]
    if wrong:
        fail(f"bad request '{wrong[0][0]}' got status {wrong[0][2]}: {wrong[0][3]!r}")
    print(f"serve_load.py: {n} samples in {len(done)} requests from 8 clients, all exact, "
          f"{len(bad_results)} bad requests refused, in {time.time() - t0:.1f} s", flush=True)

    st, rb = request(port, "GET", "/health")
    if st != 200 or json.loads(rb)["status"] != "ok":
        fail(f"/health: {st} {rb!r}")
    st, rb = request(port, "GET", "/metrics")
    text = rb.decode()
    m200 = re.search(r'^ember_requests_total\{code="200"\} (\d+)$', text, re.M)
    msamples = re.search(r"^ember_samples_total (\d+)$", text, re.M)
    mq = re.search(r'^ember_request_latency_seconds\{quantile="0.99"\} ([0-9.e+-]+)$', text, re.M)
    m413 = re.search(r'^ember_requests_total\{code="413"\} (\d+)$', text, re.M)
    if not (m200 and msamples and mq and m413) or int(msamples.group(1)) != n or int(m200.group(1)) < len(done) \
            or int(m413.group(1)) != 6:
        fail("/metrics does not add up:\n" + text)

    # SIGTERM under load: every answer right, or 503, or a refused connection; nothing hangs.
    stop = threading.Event()
    counts = {"ok": 0, "503": 0, "refused": 0, "wrong": 0}

    def hammer(seed):
        r = random.Random(seed)
        while not stop.is_set():
            a = r.randrange(0, n - 8)
            body = b"EMB1" + struct.pack("<I", 8) + b"".join(samples[a:a + 8])
            try:
                st, rb = request(port, "POST", "/predict", body, "application/octet-stream", timeout=30)
            except (ConnectionError, OSError, http.client.HTTPException):
                with lock:
                    counts["refused"] += 1
                time.sleep(0.01)
                continue
            got = answers(st, rb, True, 8)
            with lock:
                if got == expect[a:a + 8]:
                    counts["ok"] += 1
                elif st == 503:
                    counts["503"] += 1
                else:
                    counts["wrong"] += 1

    hs = [threading.Thread(target=hammer, args=(s,)) for s in range(4)]
    for t in hs:
        t.start()
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(30)
    except subprocess.TimeoutExpired:
        fail("the server did not stop within 30 s of SIGTERM")
    stop.set()
    for t in hs:
        t.join(60)
        if t.is_alive():
            fail("a client hangs after the server stopped")
    out = proc.stdout.read()
    if rc != 0 or not re.search(r"^stopped: \d+ requests answered", out, re.M):
        fail(f"the server ended with status {rc}:\n{out}")
    if counts["wrong"] or counts["ok"] == 0:
        fail(f"under SIGTERM: {counts}")
    print(f"serve_load.py: SIGTERM under load: {counts}; ok", flush=True)


if __name__ == "__main__":
    main()
