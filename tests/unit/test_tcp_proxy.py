"""The test suite's lossy TCP proxy leaves no thread blocked on a closed descriptor.

A thread blocked in accept() on a socket another thread closed is resumed, after a kernel syscall restart
(SIGSTOP/SIGCONT, ptrace, a cgroup freeze), on whatever socket then has that descriptor number: the proxy's
stale accept thread took a later test's connections to the scripted LLM server and forwarded them to etcd
(404s in test_code_supervisor.py, and an LLMServer.stop that never returned). This test reproduces it with a
real SIGSTOP/SIGCONT of this process and shows the proxy's close() prevents it.
"""

import os
import socket
import subprocess
import sys
import textwrap

from helpers.tcp_proxy import LossyProxy

_STEAL = textwrap.dedent(
    """
    import os, signal, socket, sys, threading, time
    sys.path.insert(0, {helpers!r})
    from tcp_proxy import LossyProxy

    ACCEPT_SYSCALLS = ("43", "288", "202", "242")  # accept, accept4 on x86_64; the same on aarch64
    upstream = socket.create_server(("127.0.0.1", 0))
    proxy = LossyProxy(*upstream.getsockname())
    with socket.create_connection(("127.0.0.1", int(proxy.endpoint.rsplit(":", 1)[1]))) as c:
        c.sendall(b"ping")
        u, _ = upstream.accept()
        assert u.recv(4) == b"ping"
    if {old!r}:  # the old close(): the listening socket closed under its blocked accept thread — once it is
        # blocked in accept() again (after the first connection it is still starting the pair; closed then,
        # its next accept() fails at once and nothing is left to steal: a loaded machine showed it)
        tid, deadline = proxy.threads[0].native_id, time.monotonic() + 30
        while time.monotonic() < deadline:
            with open(f"/proc/self/task/{{tid}}/syscall") as f:
                if f.read().split()[0] in ACCEPT_SYSCALLS:
                    break
            time.sleep(0.01)
        proxy.sock.close()
    else:
        proxy.close()
    time.sleep(0.2)
    victim = socket.create_server(("127.0.0.1", 0))  # takes the lowest free descriptor number
    pending = socket.create_connection(victim.getsockname())  # waits in victim's accept queue
    if os.fork() == 0:  # stop and continue the whole process: blocked system calls are restarted
        os.kill(os.getppid(), signal.SIGSTOP)
        time.sleep(0.2)
        os.kill(os.getppid(), signal.SIGCONT)
        os._exit(0)
    os.wait()
    if {old!r}:  # the stale accept thread, resumed on victim's descriptor, takes the pending connection
        deadline = time.monotonic() + 30  # and starts a forwarding pair: wait for that, not for a time
        while len(proxy.threads) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
    victim.settimeout(1)
    try:
        victim.accept()
        print("victim got its connection")
    except socket.timeout:
        print("stolen")
    """
)


def _run(old: bool) -> str:
    helpers = os.path.dirname(os.path.abspath(sys.modules[LossyProxy.__module__].__file__))
    code = _STEAL.format(helpers=helpers, old=old)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_a_closed_proxy_leaves_no_thread_that_can_take_another_sockets_connections():
    assert _run(old=False) == "victim got its connection"


def test_the_old_close_let_its_accept_thread_take_them():  # the mechanism above, shown on this kernel
    assert _run(old=True) == "stolen"


def test_close_joins_every_thread():
    upstream = socket.create_server(("127.0.0.1", 0))
    proxy = LossyProxy(*upstream.getsockname())
    conns = [socket.create_connection(("127.0.0.1", int(proxy.endpoint.rsplit(":", 1)[1]))) for _ in range(3)]
    ups = [upstream.accept()[0] for _ in conns]
    proxy.close()
    # the accept thread and a pair per connection it had taken before close() (a connection it was still
    # taking is closed at once); none alive
    assert len(proxy.threads) in (1, 3, 5, 7) and not any(t.is_alive() for t in proxy.threads), proxy.threads
    for s in (*conns, *ups, upstream):
        s.close()
