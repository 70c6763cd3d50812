"""Security: ``rediss://`` end to end against a redis-server with a certificate made here.

The certificate is self-signed (it is its own CA) for IP 127.0.0.1, made with the
``openssl`` command.  Debian's redis-server is built with TLS; a build without it fails to
start with ``--tls-port``, and the tests then skip saying so.

A producer (``Queue.from_url("rediss://...", ssl_ca_certs=...)``) and a worker process
started through the CLI (``REDIS_URL=rediss://...?ssl_ca_certs=...``) exchange tasks over
TLS only; a client that does not trust the certificate gets ``RedisUnavailableError``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from delayq import RedisUnavailableError
from delayq.testing import PrivateRedis, PrivateRedisError, free_port
from tests.faults.checker import assert_no_loss, check, read_log
from tests.faults.harness import Producer
from tests.helpers import wait_for


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """(cert, key): a self-signed certificate for 127.0.0.1, valid for a day."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    cert, key = tmp_path / "redis.crt", tmp_path / "redis.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
         "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_server(make_redis_server, certificate) -> tuple[PrivateRedis, int, Path]:
    """(server, TLS port, CA file): the plain port stays open for the test's admin client."""
    cert, key = certificate
    port = free_port()
    args = ["--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
            "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no"]  # fmt: skip
    try:
        server = make_redis_server(extra_args=args)
    except PrivateRedisError as exc:
        if "TLS" in str(exc) or "tls" in str(exc):
            pytest.skip(f"this redis-server has no TLS support: {str(exc)[-300:]}")
        raise
    return server, port, cert


async def test_tls_end_to_end(tls_server, spawn_worker, make_queue, log_dir, record_property):
    server, port, ca = tls_server
    url = f"rediss://127.0.0.1:{port}/0"
    worker = spawn_worker(server, url=f"{url}?ssl_ca_certs={ca}", concurrency=5)
    await worker.started()
    queue = make_queue(url, ssl_ca_certs=str(ca))
    producer = Producer(queue)
    for i in range(20):
        await producer.send(f"tls-{i}", delay=0.01 * i)
    await queue.send_delayed("work", {}, 60, task_id="tls-cancel")
    assert (await queue.get("work", "tls-cancel")).state == "delayed"  # type: ignore[union-attr]
    assert await queue.cancel("work", "tls-cancel")
    await wait_for(
        lambda: producer.returned <= {d.task_id for d in read_log(log_dir) if d.event == "done"},
        10,
        "every task delivered over TLS",
    )
    with server.client() as admin:
        clients = admin.client_list()
    report = check("TLS (rediss://) end to end", sent=producer.sent, returned=producer.returned,
                   deliveries=read_log(log_dir))  # fmt: skip
    report.publish(record_property)
    assert_no_loss(report)
    # Every delayq connection (producer, worker, wake-ups) came in on the TLS port; only the
    # test's own admin clients use the plain one.
    on_tls = [c for c in clients if c["laddr"].endswith(f":{port}")]
    plain = [c["cmd"] for c in clients if c["laddr"].endswith(f":{server.port}")]
    assert len(on_tls) >= 3, clients
    assert set(plain) <= {"client|list", "pubsub|numsub"}, plain


@pytest.mark.no_recount("the connection is refused: nothing is stored")
async def test_tls_untrusted_certificate_is_refused(tls_server, make_queue) -> None:
    _, port, _ = tls_server
    queue = make_queue(f"rediss://127.0.0.1:{port}/0")  # the system CAs do not know it
    with pytest.raises(RedisUnavailableError, match="certificate verify failed"):
        await queue.send("work", {})
