"""Loading a big fleet into a test control plane (controlplane.ControlPlane) fast: the 10,000-run benchmark
(bench/bench_scale.py) and the integration test that checks status against the reports on that fleet
(tests/integration/test_reconcile_10k.py) load the same 230,000 objects the same way.

- ``Loader``: creates objects (then writes their status) over persistent HTTPS connections, one per thread —
  urllib's one TLS handshake per request (``ControlPlane.request``) caps a loader at ~100 objects/s.
- ``put_etcd``: custom resources written straight into the control plane's etcd, as the API server stores them;
  ~50× faster than creating them through the API server (~200 creates/s on a 2-core machine).

``Loader.upload(objects, cp.etcd_url)`` does both: namespaces and Nodes through the API server, the jobtree.dev
kinds into etcd. Standard library only: importable by the benchmarks and the tests alike."""

from __future__ import annotations

import base64
import http.client
import json
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from urllib.parse import urlparse

API = "/apis/jobtree.dev/v1alpha1"
PLURALS = {"Budget": "budgets", "Run": "runs", "Reservation": "reservations", "GPULease": "gpuleases"}


def _stamp(at: datetime | None = None) -> str:
    return (at or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Loader:
    """Creates objects (then writes their status) over persistent connections to ``cp``'s API server as
    admin, ``threads`` at a time."""

    def __init__(self, cp, threads: int = 24):
        url = urlparse(cp.server)
        self.host, self.port = url.hostname, url.port
        self.ctx = cp._ssl_context()
        self.token = cp.tokens["admin"]
        self.threads = threads
        self.local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=120)
            self.local.conn = conn
        return conn

    def request(self, method: str, path: str, body: dict, content_type: str = "application/json") -> tuple[int, bytes]:
        data = json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": content_type,
                   "Accept": "application/json"}
        for attempt in range(6):
            try:
                conn = self._conn()
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.HTTPException, OSError):
                self.local.conn = None
                if attempt == 5:
                    raise
                time.sleep(0.5 * (attempt + 1))
                continue
            if resp.status in (429, 500, 503, 504) and attempt < 5:
                time.sleep(0.5 * (attempt + 1))
                continue
            if resp.status == 409 and method == "POST" and attempt > 0:
                return 201, raw  # a retried create whose first try went in
            return resp.status, raw
        raise RuntimeError("unreachable")

    def one(self, obj: dict) -> None:
        kind, meta = obj["kind"], obj["metadata"]
        if kind == "Node":
            collection, item = "/api/v1/nodes", f"/api/v1/nodes/{meta['name']}"
        else:
            collection = f"{API}/namespaces/{meta['namespace']}/{PLURALS[kind]}"
            item = f"{collection}/{meta['name']}"
        # a Node is created with its status (the API server keeps a Node's status on create: one request, not
        # two); the custom resources' status goes through their status subresource
        body = obj if kind == "Node" else {k: v for k, v in obj.items() if k != "status"}
        status, raw = self.request("POST", collection, body)
        if status != 201:
            raise RuntimeError(f"create {item}: {status} {raw[:300]!r}")
        if kind == "Node":
            kept = json.loads(raw).get("status")  # a retried create that had gone in: a Status object, "Failure"
            if isinstance(kept, dict) and all(kept.get(k) == v for k, v in (obj.get("status") or {}).items()):
                return
        if obj.get("status"):
            status, raw = self.request("PATCH", item + "/status", {"status": obj["status"]},
                                       "application/merge-patch+json")
            if status != 200:
                raise RuntimeError(f"status of {item}: {status} {raw[:300]!r}")

    def upload(self, objects: list[dict], etcd_url: str | None = None, created: datetime | None = None,
               log: Callable[[str], None] | None = None) -> None:
        """Namespaces first; then every object through the API server, or, with ``etcd_url``, the custom
        resources straight into etcd (``put_etcd``, ``creationTimestamp`` ``created``, default now) and only the
        Nodes through the API server. ``log`` is told how long each part took."""
        started = time.monotonic()
        for ns in sorted({o["metadata"]["namespace"] for o in objects if "namespace" in o["metadata"]}):
            status, raw = self.request("POST", "/api/v1/namespaces",
                                       {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            if status not in (201, 409):
                raise RuntimeError(f"namespace {ns}: {status} {raw[:300]!r}")
        if etcd_url is not None:
            resources = [o for o in objects if o["kind"] in PLURALS]
            put_etcd(etcd_url, resources, created=created)
            objects = [o for o in objects if o["kind"] not in PLURALS]
            if log:
                log(f"{len(resources):,} custom resources into etcd in {time.monotonic() - started:.1f} s")
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=self.threads) as pool:
            for _ in pool.map(self.one, objects, chunksize=64):
                pass
        if log:
            log(f"{len(objects):,} objects through the API server in {time.monotonic() - started:.1f} s")


def put_etcd(etcd_url: str, objects: list[dict], threads: int = 4, per_txn: int = 128,
             created: datetime | None = None) -> None:
    """Custom resources written into etcd as the API server stores them (JSON at
    ``/registry/<group>/<plural>/<namespace>/<name>``, with uid, creationTimestamp ``created`` (default now) and
    generation 1; status included), 128 puts per transaction (etcd's default --max-txn-ops). The API server's
    watch cache follows etcd, so the objects are there for every list and watch as if created through it: ~50×
    faster than the ~200 creates/s the API server manages on a 2-core machine (two requests per object with a
    status). The CRDs must be Established first and the namespaces exist (``Loader.upload`` makes them)."""
    url = urlparse(etcd_url)
    stamp = _stamp(created)
    local = threading.local()

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    def txn(chunk: list[dict]) -> None:
        ops = []
        for obj in chunk:
            meta = obj["metadata"]
            stored = {**obj, "metadata": {**meta, "uid": str(uuid.uuid4()), "creationTimestamp": stamp,
                                          "generation": 1}}
            key = f"/registry/jobtree.dev/{PLURALS[obj['kind']]}/{meta['namespace']}/{meta['name']}"
            ops.append({"requestPut": {"key": b64(key.encode()), "value": b64(json.dumps(stored).encode())}})
        data = json.dumps({"success": ops}).encode()
        error = ""
        for attempt in range(5):
            try:
                conn = getattr(local, "conn", None) or http.client.HTTPConnection(url.hostname, url.port, timeout=120)
                local.conn = conn
                conn.request("POST", "/v3/kv/txn", body=data, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                raw = resp.read()
                if resp.status == 200:
                    return
                error = f"{resp.status} {raw[:300]!r}"
            except (http.client.HTTPException, OSError) as exc:
                local.conn, error = None, repr(exc)
            time.sleep(0.5 * (attempt + 1))
        raise RuntimeError(f"etcd txn: {error}")

    chunks = [objects[i:i + per_txn] for i in range(0, len(objects), per_txn)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in pool.map(txn, chunks):
            pass


def runs_without_status(cp, page: int = 500) -> tuple[int, int]:
    """(Runs without ``status.plan``, Runs), over a list paged ``page`` at a time (the benchmark and the 10,000-run
    test wait for a cold start with it)."""
    missing = count = 0
    cont = ""
    while True:
        code, body = cp.request("GET", f"{API}/runs?limit={page}" + (f"&continue={cont}" if cont else ""))
        assert code == 200, body
        for item in body["items"]:
            count += 1
            missing += not (item.get("status") or {}).get("plan")
        cont = body["metadata"].get("continue")
        if not cont:
            return missing, count
