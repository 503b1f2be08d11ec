"""No client action may crash the worker (issue 15 item 3): a real
gift-worker (local cluster: coordinator + 1 server + 1 worker) against
clients that try to make it fault or touch memory that is not theirs.

- A client that shrinks its buffer after registering (the SIGBUS of the
  named-shm design): a named /dev/shm object is refused at registration; a
  handed memfd is sealed, so the client's own ftruncate fails; an unsealed
  memfd is refused at the handoff. The worker keeps averaging.
- A 0600 shared-memory object of another uid (created by a child that
  setresuid()s to nobody; needs root, skipped otherwise) cannot be named
  into the worker, and its descriptor, handed over by a client that could
  open it, is refused as unsealed; its bytes stay untouched.
- A client killed with SIGKILL while registered leaves a worker that serves
  the next client.
- A client refused at the buffer socket's connection cap (256 idle
  connections of another client) connects again on its next call.
- Another local user hoarding connections and handed buffers hits its
  per-user caps (RESOURCE_EXHAUSTED to it only); this client keeps
  registering and stepping.
"""

import fcntl
import mmap
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import unittest

import torch

import cluster_util
from gift_ps import GiftError, WorkerClient
from gift_ps import shm as gshm

SKIP = cluster_util.skip_reason()
NOBODY = 65534


@unittest.skipIf(SKIP is not None, SKIP or "")
class HostileClientTest(cluster_util.ClusterFixture, unittest.TestCase):
    SERVERS = WORKERS = 1

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.socket = cls.cluster.sockets[0]
        cls.step = 0

    def setUp(self):
        self.client = WorkerClient(self.socket, connect_timeout=30)
        self.pb = self.client._pb

    def tearDown(self):
        self.client.close()

    def next_step(self) -> int:
        HostileClientTest.step += 1
        return HostileClientTest.step

    def register_raw(self, location: dict, size: int = 64):
        request = self.pb.worker_pb2.RegisterBuffersRequest()
        spec = request.buffers.add(name="hostile", shape=[size // 4],
                                   dtype=self.pb.cluster_pb2.DTYPE_FLOAT32)
        for key, value in location.items():
            setattr(spec.buffer, key, value)
        spec.buffer.size_bytes = size
        return self.client._call("RegisterBuffers", self.client._stub.RegisterBuffers, request, 30)

    def assert_worker_serves(self):
        """The worker is alive and averages a fresh registration correctly."""
        t = self.client.register({"alive": (8,)})
        t["alive"].copy_(torch.arange(8, dtype=torch.float32))
        self.client.push_pull(self.next_step())
        self.assertTrue(torch.equal(t["alive"], torch.arange(8, dtype=torch.float32)))
        self.assertTrue(self.client.info().buffer_socket.endswith(".buffers"))

    def test_named_shm_object_is_refused_and_shrinking_it_harms_nothing(self):
        path = f"/dev/shm/gift-hostile-{os.getpid()}"
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, 64)
            with self.assertRaises(GiftError) as ctx:
                self.register_raw({"shm_name": path[len("/dev/shm"):]})
            self.assertEqual(ctx.exception.code, "INVALID_ARGUMENT")
            self.assertIn("refused", ctx.exception.message)
            os.ftruncate(fd, 0)  # what used to kill the worker on the next PushPull
        finally:
            os.close(fd)
            os.unlink(path)
        self.assert_worker_serves()

    def test_sealed_memfd_cannot_be_shrunk_after_registering(self):
        t = self.client.register({"g1000": (1000,)})
        t["g1000"].fill_(2.0)
        fd = self.client._buffer.fileno()
        with self.assertRaises(PermissionError):
            os.ftruncate(fd, 0)
        with self.assertRaises(PermissionError):
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)  # F_SEAL_SEAL holds
        self.client.push_pull(self.next_step())
        self.assertTrue(torch.equal(t["g1000"], torch.full((1000,), 2.0)))
        self.assert_worker_serves()

    def test_a_client_refused_at_the_connection_cap_connects_again_next_call(self):
        # 256 idle connections take every slot of the buffer socket (its cap):
        # the client's handoff is refused RESOURCE_EXHAUSTED; once they close,
        # its next register connects again instead of reusing the refused,
        # closed connection ("Connection reset by peer").
        path = self.client.info().buffer_socket
        hogs = []
        try:
            for _ in range(256):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                s.connect(path)
                hogs.append(s)
            time.sleep(0.5)  # accepted by the worker
            with self.assertRaises(GiftError) as ctx:
                self.client.register({"refused": (8,)})
            # UNAVAILABLE when the worker's reply went with the reset of a
            # connection it closed with our handoff unread.
            self.assertIn(ctx.exception.code, ("RESOURCE_EXHAUSTED", "UNAVAILABLE"), ctx.exception)
        finally:
            for s in hogs:
                s.close()
        time.sleep(0.5)  # the worker sees them close
        self.assert_worker_serves()

    def test_a_replaced_set_is_released(self):
        self.client.register({"first": (16,)})
        old = self.client._handle
        self.client.register({"second": (16,)})
        with self.assertRaises(GiftError) as ctx:  # the worker forgot the old handle
            self.register_raw({"handle": old})
        self.assertEqual(ctx.exception.code, "NOT_FOUND")
        self.assert_worker_serves()

    def test_unsealed_memfd_is_refused_at_the_handoff(self):
        self.client.register({"g": (4,)})  # connects the buffer channel
        channel = self.client._buffer_channel
        for seals in (0, fcntl.F_SEAL_GROW):
            fd = os.memfd_create("hostile", os.MFD_ALLOW_SEALING)
            try:
                os.ftruncate(fd, 4096)
                if seals:
                    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
                with self.assertRaises(gshm.HandoffError) as ctx:
                    channel.hand(fd)
                self.assertEqual(ctx.exception.code, "FAILED_PRECONDITION")
                self.assertIn("F_SEAL_SHRINK", ctx.exception.message)
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)
        # Not a memfd at all, and a malformed handoff.
        r, w = os.pipe()
        with self.assertRaises(gshm.HandoffError):
            channel.hand(r)
        os.close(r)
        os.close(w)
        self.assert_worker_serves()

    @unittest.skipUnless(os.geteuid() == 0, "needs root (setresuid to another uid)")
    def test_another_user_hoarding_buffers_and_connections_starves_nobody(self):
        # A hostile local user (uid nobody; the socket opened to it for the
        # test) hands one 4 KiB memfd over and over on as many connections as
        # it gets: it is refused RESOURCE_EXHAUSTED at its per-user caps (64
        # connections, 4,096 buffers), far below the kernel's ~65,530
        # mappings, while this client keeps registering and stepping.
        path = self.client.info().buffer_socket
        # Let uid nobody reach the socket: it, and execute on its directories.
        modes = {}
        d = os.path.dirname(path)
        while d not in ("/", "/tmp"):
            modes[d] = os.stat(d).st_mode & 0o7777
            os.chmod(d, modes[d] | 0o001)
            d = os.path.dirname(d)
        os.chmod(path, 0o666)
        read_fd, write_fd = os.pipe()
        child = os.fork()
        if child == 0:
            try:
                os.close(read_fd)
                os.setresgid(NOBODY, NOBODY, NOBODY)
                os.setresuid(NOBODY, NOBODY, NOBODY)
                conns, refused_conns, handed, refused = [], 0, 0, ""
                for _ in range(80):
                    try:
                        conns.append(gshm.BufferChannel(path, timeout=10))
                    except gshm.HandoffError:
                        refused_conns += 1
                fd = os.memfd_create("hoard", os.MFD_ALLOW_SEALING)
                os.ftruncate(fd, 4096)
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
                live = []
                for c in conns:
                    try:
                        c.hand(fd)  # a refused connection fails here
                        live.append(c)
                    except gshm.HandoffError as e:
                        refused_conns += 1
                for _ in range(6000 if live else 0):
                    try:
                        live[handed % len(live)].hand(fd)
                        handed += 1
                    except gshm.HandoffError as e:
                        refused = f"{e.code} {e.message}"
                        break
                os.write(write_fd, f"{len(live)} {refused_conns} {handed}|{refused}\n".encode())
                time.sleep(30)  # holds everything until killed
            finally:
                os._exit(0)
        os.close(write_fd)
        try:
            with os.fdopen(read_fd) as r:
                counts, refused = r.readline().strip().split("|")
            live, refused_conns, handed = (int(x) for x in counts.split())
            self.assertEqual(live, 64)
            self.assertGreater(refused_conns, 0)
            self.assertEqual(handed + live, 4096)  # the first hand on each counts too
            self.assertIn("RESOURCE_EXHAUSTED at most 4096 buffers of uid 65534", refused)
            # This client (another uid) is not affected.
            for _ in range(3):
                self.assert_worker_serves()
        finally:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            os.chmod(path, 0o660)
            for d, mode in modes.items():
                os.chmod(d, mode)

    @unittest.skipUnless(os.geteuid() == 0, "needs root (setresuid to another uid)")
    def test_another_users_0600_object_cannot_be_registered(self):
        name = f"gift-other-{os.getpid()}"
        path = "/dev/shm/" + name
        child = os.fork()
        if child == 0:  # becomes nobody and creates the object, mode 0600
            try:
                os.setresgid(NOBODY, NOBODY, NOBODY)
                os.setresuid(NOBODY, NOBODY, NOBODY)
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
                os.ftruncate(fd, 64)
                os.write(fd, b"secret!!" * 8)
                os.close(fd)
                os._exit(0)
            except BaseException:
                os._exit(1)
        _, status = os.waitpid(child, 0)
        self.assertEqual(status, 0)
        try:
            st = os.stat(path)
            self.assertEqual((st.st_uid, st.st_mode & 0o777), (NOBODY, 0o600))
            with self.assertRaises(GiftError) as ctx:
                self.register_raw({"shm_name": "/" + name})
            self.assertEqual(ctx.exception.code, "INVALID_ARGUMENT")
            # Even its descriptor (this client, root, can open it) is refused:
            # a named object cannot carry seals.
            self.client.register({"g": (4,)})
            fd = os.open(path, os.O_RDWR)
            try:
                with self.assertRaises(gshm.HandoffError) as ctx:
                    self.client._buffer_channel.hand(fd)
                self.assertEqual(ctx.exception.code, "FAILED_PRECONDITION")
            finally:
                os.close(fd)
            self.client.push_pull(self.next_step())
            with open(path, "rb") as f:
                self.assertEqual(f.read(), b"secret!!" * 8)
        finally:
            os.unlink(path)
        self.assert_worker_serves()

    def test_a_client_killed_while_registered(self):
        script = textwrap.dedent("""
            import os, sys
            from gift_ps import WorkerClient
            c = WorkerClient(sys.argv[1], connect_timeout=30)
            t = c.register({"victim": (4096,)})
            t["victim"].fill_(1.0)
            print("registered", flush=True)
            sys.stdin.read()
        """)
        proc = subprocess.Popen([sys.executable, "-c", script, self.socket],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ))
        try:
            self.assertEqual(proc.stdout.readline().strip(), "registered")
            # The dead client's set is still the registered one: averaging it
            # touches memory only the worker still maps.
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            self.client.push_pull(self.next_step())
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stdout.close()
            proc.stdin.close()
        self.assert_worker_serves()


if __name__ == "__main__":
    unittest.main()
