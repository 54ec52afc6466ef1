"""Bad input at startup: one clear line on stderr and a non-zero exit, never a crash or a hang."""
import os
import socket
import subprocess
import tempfile
import time

import pytest

from harness import binary


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="ard-st.", dir="/tmp")
    yield d
    subprocess.run(["rm", "-rf", d])


def run_daemon(*flags, timeout_s=10):
    return subprocess.run([binary("allreduced")] + list(flags), capture_output=True, text=True,
                          timeout=timeout_s)


def assert_one_line_error(r, expected_rc, needle):
    assert r.returncode == expected_rc, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("allreduced: "), lines[0]
    assert needle in lines[0], lines[0]


def test_unknown_flag(tmp):
    assert_one_line_error(run_daemon("--no_such_flag=1"), 2, "unknown flag --no_such_flag")


def test_malformed_config(tmp):
    path = os.path.join(tmp, "bad.conf")
    with open(path, "w") as f:
        f.write('host_name: "x"\nheartbeat_ms: {\n')
    assert_one_line_error(run_daemon(f"--config={path}"), 2, "malformed config " + path + ":")


def test_missing_config(tmp):
    assert_one_line_error(run_daemon(f"--config={tmp}/absent.conf"), 2,
                          f"cannot read config file {tmp}/absent.conf: No such file or directory")


def test_port_file_directory_is_created_like_the_sockets(tmp):
    port_file = f"{tmp}/new/dir/port"
    p = subprocess.Popen([binary("allreduced"), "--cluster_address=127.0.0.1:0",
                          f"--local_socket={tmp}/d.sock", f"--port_file={port_file}",
                          "--host_name=x"], stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(200):
            if os.path.exists(port_file) or p.poll() is not None:
                break
            time.sleep(0.05)
        assert os.path.exists(port_file), p.stderr.read() if p.poll() is not None else ""
        with open(port_file) as f:
            assert int(f.read()) > 0
        assert oct(os.stat(f"{tmp}/new/dir").st_mode & 0o777) == oct(0o755 & ~current_umask())
    finally:
        p.terminate()
        p.wait(timeout=10)


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_port_file_error_says_why(tmp):
    blocker = os.path.join(tmp, "file")
    open(blocker, "w").close()
    r = run_daemon("--cluster_address=127.0.0.1:0", f"--local_socket={tmp}/d.sock",
                   f"--port_file={blocker}/port", "--log_level=error")
    assert_one_line_error(r, 1, f"cannot write port_file {blocker}/port: {blocker} exists and is "
                          "not a directory")
    r = run_daemon("--cluster_address=127.0.0.1:0", f"--local_socket={tmp}/d2.sock",
                   f"--port_file={tmp}", "--log_level=error")  # a directory: rename fails
    assert_one_line_error(r, 1, f"cannot write port_file {tmp}: Is a directory")


def test_version():
    r = run_daemon("--version")
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.startswith("allreduced ") and len(r.stdout.split()) == 2, r.stdout


def test_config_that_is_a_directory(tmp):
    assert_one_line_error(run_daemon(f"--config={tmp}"), 2, f"config file {tmp} is a directory")


def test_config_field_set_twice(tmp):
    path = os.path.join(tmp, "twice.conf")
    with open(path, "w") as f:
        f.write('host_name: "x"\nstall_shutdown_ms: 0\n\nstall_shutdown_ms: 600000\n')
    assert_one_line_error(run_daemon(f"--config={path}"), 2,
                          f'{path}:4:18: Non-repeated field "stall_shutdown_ms" is specified '
                          "multiple times")


def test_port_in_use(tmp):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        r = run_daemon(f"--cluster_address=127.0.0.1:{port}", f"--local_socket={tmp}/d.sock",
                       "--host_name=x")
    finally:
        holder.close()
    assert_one_line_error(r, 1, f"cannot listen on 127.0.0.1:{port}: port already in use")
    # Nothing left behind: the socket file it created was removed.
    assert not os.path.exists(f"{tmp}/d.sock")


def test_socket_path_cannot_be_created(tmp):
    blocker = os.path.join(tmp, "file")
    open(blocker, "w").close()
    r = run_daemon("--cluster_address=127.0.0.1:0", f"--local_socket={blocker}/sub/d.sock")
    assert_one_line_error(r, 1, "local socket")
    assert "not a directory" in r.stderr


def test_socket_path_is_a_regular_file_is_not_deleted(tmp):
    precious = os.path.join(tmp, "precious")
    with open(precious, "w") as f:
        f.write("keep")
    r = run_daemon("--cluster_address=127.0.0.1:0", f"--local_socket={precious}")
    assert_one_line_error(r, 1, "is not a socket")
    with open(precious) as f:
        assert f.read() == "keep"


def test_help_lists_every_flag_with_a_description():
    r = run_daemon("--help")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    for flag in ("--cluster_address=", "--coordinator=", "--host_name=", "--local_socket=",
                 "--port_file=", "--heartbeat_ms=", "--host_timeout_ms=", "--log_level=",
                 "--config="):
        [at] = [i for i, l in enumerate(lines) if l.startswith("  " + flag)]
        description = lines[at + 1]
        assert description.startswith("      ") and len(description.strip()) > 5, description
    assert "HOST:PORT of the coordinator daemon" in r.stdout
